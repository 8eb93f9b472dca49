// Where a remote URL's requests go: an s3:// URL's endpoint, path-style or virtual-hosted, and
// the parts of an http(s) URL that a request names and SigV4 signs (host, path, query).

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "io/remote.h"
#include "io/remote_internal.h"

namespace ringloader {
namespace {

/// Whether an S3 bucket name may be a host name label (virtual-hosted addressing): 3 to 63
/// lower-case letters, digits and '-', starting and ending with a letter or digit. A name with
/// '.' is not: it would not match the endpoint's wildcard certificate.
bool DnsCompatibleBucket(absl::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (char c : bucket) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) return false;
  }
  return bucket.front() != '-' && bucket.back() != '-';
}

}  // namespace

std::string HostHeaderOf(absl::string_view http_url) {
  absl::string_view rest = http_url;
  const bool https = absl::ConsumePrefix(&rest, "https://");
  if (!https) absl::ConsumePrefix(&rest, "http://");
  absl::string_view host = rest.substr(0, rest.find_first_of("/?"));
  absl::ConsumeSuffix(&host, https ? ":443" : ":80");
  return std::string(host);
}

void PathAndQueryOf(absl::string_view http_url, std::string* path, std::string* query) {
  const size_t scheme = http_url.find("://");
  const size_t slash = http_url.find('/', scheme == absl::string_view::npos ? 0 : scheme + 3);
  absl::string_view rest = slash == absl::string_view::npos ? "/" : http_url.substr(slash);
  const size_t mark = rest.find('?');
  *path = std::string(rest.substr(0, mark));
  query->clear();
  if (mark == absl::string_view::npos) return;
  std::vector<std::string> params;
  for (absl::string_view p : absl::StrSplit(rest.substr(mark + 1), '&', absl::SkipEmpty())) {
    params.push_back(absl::StrContains(p, '=') ? std::string(p) : absl::StrCat(p, "="));
  }
  std::sort(params.begin(), params.end());
  *query = absl::StrJoin(params, "&");
}

absl::StatusOr<std::string> HttpUrlOf(const std::string& url, const RemoteOptions& options) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "s3://")) {
    // Fetched as written when its scheme is one libcurl may use here (http, https; file in tests).
    const size_t colon = url.find("://");
    if (colon != std::string::npos) {
      for (absl::string_view p : absl::StrSplit(options.protocols, ',')) {
        if (p == absl::string_view(url).substr(0, colon)) return url;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("remote url ", url, ": only http://, https:// and s3:// are fetched"));
  }
  const size_t slash = rest.find('/');
  if (slash == 0 || slash == absl::string_view::npos || slash + 1 == rest.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("remote url ", url, ": an s3 url is s3://BUCKET/KEY"));
  }
  std::string endpoint = options.s3.endpoint;
  const bool aws = endpoint.empty();
  if (aws) endpoint = absl::StrCat("https://s3.", options.s3.region, ".amazonaws.com");
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  const std::string& style = options.s3.addressing_style;
  if (style != "path" && style != "virtual" && style != "auto") {
    return absl::InvalidArgumentError(absl::StrCat(
        "remote url ", url, ": s3 addressing style '", style, "' is none of path, virtual, auto"));
  }
  const absl::string_view bucket = rest.substr(0, slash);
  // Keys are sent as written: shard names are plain ASCII; a key that needs percent-encoding
  // must be written encoded.
  if (style == "virtual" || (style == "auto" && aws && DnsCompatibleBucket(bucket))) {
    const size_t host_at = endpoint.find("://");
    if (host_at == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("s3 endpoint ", endpoint, ": expected SCHEME://HOST[:PORT]"));
    }
    return absl::StrCat(endpoint.substr(0, host_at + 3), bucket, ".", endpoint.substr(host_at + 3),
                        rest.substr(slash));
  }
  return absl::StrCat(endpoint, "/", rest);
}

std::string HostOf(absl::string_view http_url) {
  const size_t scheme = http_url.find("://");
  if (scheme == absl::string_view::npos) return std::string(http_url);
  const size_t path = http_url.find('/', scheme + 3);
  return std::string(http_url.substr(0, path));
}

}  // namespace ringloader
