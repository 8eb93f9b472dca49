#include "io/sigv4.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ringloader {
namespace sigv4 {
namespace {

// FIPS 180-4, section 4.2.2: the first 32 bits of the fractional parts of the cube roots of the
// first 64 primes.
constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void Compress(uint32_t state[8], const uint8_t block[64]) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t{block[4 * i]} << 24) | (uint32_t{block[4 * i + 1]} << 16) |
           (uint32_t{block[4 * i + 2]} << 8) | uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 = h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                        kRoundConstants[i] + w[i];
    const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

bool Unreserved(unsigned char c) {
  return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A header value as SigV4 canonicalises it: trimmed, runs of spaces made one.
std::string CanonicalValue(absl::string_view value) {
  value = absl::StripAsciiWhitespace(value);
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == ' ' && !out.empty() && out.back() == ' ') continue;
    out.push_back(c);
  }
  return out;
}

}  // namespace

Digest Sha256(absl::string_view data) {
  uint32_t state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
  size_t n = data.size();
  while (n >= 64) {
    Compress(state, bytes);
    bytes += 64;
    n -= 64;
  }
  // The tail, 0x80, zeros, and the length in bits (big-endian): one or two blocks.
  uint8_t tail[128] = {0};
  std::memcpy(tail, bytes, n);
  tail[n] = 0x80;
  const size_t blocks = n + 1 + 8 <= 64 ? 1 : 2;
  const uint64_t bits = static_cast<uint64_t>(data.size()) * 8;
  for (int i = 0; i < 8; ++i) tail[blocks * 64 - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  for (size_t b = 0; b < blocks; ++b) Compress(state, tail + 64 * b);
  Digest out;
  for (int i = 0; i < 8; ++i) {
    out[4 * i] = static_cast<uint8_t>(state[i] >> 24);
    out[4 * i + 1] = static_cast<uint8_t>(state[i] >> 16);
    out[4 * i + 2] = static_cast<uint8_t>(state[i] >> 8);
    out[4 * i + 3] = static_cast<uint8_t>(state[i]);
  }
  return out;
}

Digest HmacSha256(absl::string_view key, absl::string_view data) {
  // RFC 2104 with a 64-byte block: a longer key is hashed first.
  uint8_t block[64] = {0};
  if (key.size() > 64) {
    const Digest k = Sha256(key);
    std::memcpy(block, k.data(), k.size());
  } else {
    std::memcpy(block, key.data(), key.size());
  }
  std::string inner(64, '\0'), outer(64, '\0');
  for (int i = 0; i < 64; ++i) {
    inner[i] = static_cast<char>(block[i] ^ 0x36);
    outer[i] = static_cast<char>(block[i] ^ 0x5c);
  }
  inner.append(data.data(), data.size());
  const Digest inner_digest = Sha256(inner);
  outer.append(reinterpret_cast<const char*>(inner_digest.data()), inner_digest.size());
  return Sha256(outer);
}

std::string Hex(const Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : digest) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::string AmzDate(std::time_t t) {
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &utc);
  return buf;
}

std::string CanonicalUri(absl::string_view path) {
  if (path.empty()) return "/";
  std::string decoded;
  decoded.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    const int hi = path[i] == '%' && i + 2 < path.size() ? HexValue(path[i + 1]) : -1;
    const int lo = hi >= 0 ? HexValue(path[i + 2]) : -1;
    if (lo >= 0) {
      decoded.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      decoded.push_back(path[i]);
    }
  }
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(decoded.size());
  for (unsigned char c : decoded) {
    if (Unreserved(c) || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

Signed SignGet(const Request& request, const Credentials& credentials) {
  std::vector<std::pair<std::string, std::string>> headers;
  headers.emplace_back("host", CanonicalValue(request.host));
  for (const auto& [name, value] : request.headers) {
    headers.emplace_back(absl::AsciiStrToLower(name), CanonicalValue(value));
  }
  headers.emplace_back("x-amz-content-sha256", kEmptyPayloadSha256);
  headers.emplace_back("x-amz-date", request.amz_date);
  if (!credentials.session_token.empty()) {
    headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  std::sort(headers.begin(), headers.end());
  std::string canonical_headers, signed_headers;
  for (const auto& [name, value] : headers) {
    absl::StrAppend(&canonical_headers, name, ":", value, "\n");
    absl::StrAppend(&signed_headers, signed_headers.empty() ? "" : ";", name);
  }
  Signed out;
  out.canonical_request = absl::StrCat("GET\n", CanonicalUri(request.path), "\n", request.query, "\n",
                                       canonical_headers, "\n", signed_headers, "\n",
                                       kEmptyPayloadSha256);
  const std::string date = request.amz_date.substr(0, 8);
  const std::string scope =
      absl::StrCat(date, "/", credentials.region, "/", credentials.service, "/aws4_request");
  out.string_to_sign = absl::StrCat("AWS4-HMAC-SHA256\n", request.amz_date, "\n", scope, "\n",
                                    Hex(Sha256(out.canonical_request)));
  auto str = [](const Digest& d) {
    return std::string(reinterpret_cast<const char*>(d.data()), d.size());
  };
  const std::string k_date = str(HmacSha256(absl::StrCat("AWS4", credentials.secret_key), date));
  const std::string k_region = str(HmacSha256(k_date, credentials.region));
  const std::string k_service = str(HmacSha256(k_region, credentials.service));
  const std::string k_signing = str(HmacSha256(k_service, "aws4_request"));
  out.signature = Hex(HmacSha256(k_signing, out.string_to_sign));
  out.headers.push_back(absl::StrCat("x-amz-date: ", request.amz_date));
  out.headers.push_back(absl::StrCat("x-amz-content-sha256: ", kEmptyPayloadSha256));
  if (!credentials.session_token.empty()) {
    out.headers.push_back(absl::StrCat("x-amz-security-token: ", credentials.session_token));
  }
  out.headers.push_back(absl::StrCat("Authorization: AWS4-HMAC-SHA256 Credential=",
                                     credentials.access_key, "/", scope,
                                     ", SignedHeaders=", signed_headers,
                                     ", Signature=", out.signature));
  return out;
}

}  // namespace sigv4
}  // namespace ringloader
