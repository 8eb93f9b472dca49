#pragma once
/// AWS Signature Version 4 for S3 GET requests, computed as the AWS SDKs compute it (botocore's
/// S3SigV4Auth, the Java and Go SDKs' S3 signers), with a SHA-256 and HMAC-SHA256 of its own
/// (no crypto library is linked; the digests are checked against NIST's and RFC 4231's vectors).
///
/// What a signed GET carries (AWS's "Authenticating Requests: Using the Authorization Header"):
///   x-amz-date            the request's time, YYYYMMDD'T'HHMMSS'Z' in UTC
///   x-amz-content-sha256  the hex SHA-256 of the payload: of the empty string for a GET
///   x-amz-security-token  the session token, for temporary (STS) credentials only
///   Authorization         AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/s3/aws4_request,
///                         SignedHeaders=host;range;x-amz-content-sha256;x-amz-date[;...],
///                         Signature=HEX
/// The signed headers are `host` (as the client sends it), `range` when the request has one,
/// and every x-amz-* header above. The canonical URI is the path with each byte other than the
/// unreserved ones (A-Z a-z 0-9 - _ . ~) and '/' percent-encoded once (S3 does not normalise or
/// double-encode paths); a path sent percent-encoded is decoded first, so that the server, which
/// decodes what it receives, computes the same string.

#include <array>
#include <cstdint>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace ringloader {
namespace sigv4 {

using Digest = std::array<uint8_t, 32>;

Digest Sha256(absl::string_view data);
Digest HmacSha256(absl::string_view key, absl::string_view data);
/// Lower-case hex, as SigV4 writes digests.
std::string Hex(const Digest& digest);

/// Hex SHA-256 of the empty payload (every GET's x-amz-content-sha256).
inline constexpr char kEmptyPayloadSha256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// `t` (seconds since the epoch) as x-amz-date writes it: 20130524T000000Z.
std::string AmzDate(std::time_t t);

/// The canonical URI of a path as sent (see the file comment).
std::string CanonicalUri(absl::string_view path);

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  ///< empty for long-term keys
  std::string region = "us-east-1";
  std::string service = "s3";
};

/// One GET to sign: its Host header value, path (as sent, without the query) and canonical query
/// string (empty for a GET of an object), and the headers to sign besides the x-amz-* ones
/// (lower-case name, value as sent: `range` when the request has one).
struct Request {
  std::string host;
  std::string path;
  std::string query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string amz_date;  ///< AmzDate of the request's time
};

/// The signing's intermediate strings, for tests and for the message of a refused signature.
struct Signed {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;
  /// The headers to send, "Name: value" (x-amz-date, x-amz-content-sha256, x-amz-security-token
  /// when there is a session token, Authorization); `host` and the request's own headers are
  /// sent by the client as given.
  std::vector<std::string> headers;
};

Signed SignGet(const Request& request, const Credentials& credentials);

}  // namespace sigv4
}  // namespace ringloader
