#pragma once
/// Whole objects fetched over HTTP(S) and S3 into local files, with libcurl (its multi interface:
/// many transfers on one thread, no Python involved).
///
/// An `s3://bucket/key` URL is fetched from its endpoint (S3Config::endpoint, else AWS's regional
/// one) path-style (`ENDPOINT/bucket/key`) or virtual-hosted (`https://bucket.HOST/key`) as
/// S3Config::addressing_style says, and signed with AWS Signature Version 4 as the AWS SDKs sign
/// (io/sigv4.h: host, range, x-amz-content-sha256, x-amz-date and x-amz-security-token signed)
/// with the credentials in RemoteOptions::s3 (the Python layer resolves them from the environment
/// and `~/.aws`); without an access key it goes unsigned (a public bucket). `http://` and
/// `https://` URLs are fetched as they are.
///
/// Fault rules: timeouts (connect, or a transfer that stalls), a transfer slower than
/// `min_rate_bytes_per_s` over `min_rate_window_s`, connection failures and resets, HTTP 5xx and
/// 429 are retried up to `max_attempts` times with exponential backoff and full jitter, while the
/// job is younger than `download_deadline_s`; a retry resumes the bytes already written with a
/// Range request (If-Range on the ETag, else on Last-Modified, so a changed object restarts from
/// byte 0 instead of splicing two versions). HTTP 401/403 (PermissionDenied), 404 (NotFound) and
/// other 4xx (InvalidArgument) fail at once, the message naming the URL. A result is OK only when
/// the bytes written equal the object's size as the server stated it (Content-Length or
/// Content-Range) and every response carried the same ETag (without ETags: the same
/// Last-Modified).
///
/// Ranges are pinned to one version of their object: the range requests of a DownloadAll call to
/// one URL (a shard's pieces, an epoch's range reads of it) carry If-Match on the object's ETag
/// when one is known (the job's, else the ETag of the call's first response from that URL; a weak
/// ETag is not sent) or, without an ETag, If-Unmodified-Since on that first response's
/// Last-Modified; a response of another ETag or Last-Modified than the first (requests sent before
/// it answered), or a 412, is FailedPrecondition "changed" (DownloadResult::changed). A server
/// that sends neither validator, or replaces an object without an ETag within the second of its
/// Last-Modified, cannot be pinned.
///
/// Memory is bounded: bytes go straight to the file descriptor; an error body keeps its first
/// 512 bytes. Connections are bounded per process and host: every DownloadAll (whole downloads,
/// range reads, the downloads that index a dataset) starts a transfer only while fewer than its
/// `max_connections` transfers to that host are in flight in the process, all callers counted.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringloader {

/// What SigV4 signs with and where S3 lives.
struct S3Config {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  ///< sent as x-amz-security-token when set
  std::string region = "us-east-1";
  /// `https://s3.REGION.amazonaws.com` when empty; AWS_ENDPOINT_URL for S3-compatible stores.
  std::string endpoint;
  /// "path": ENDPOINT/bucket/key. "virtual": the bucket in the host name (SCHEME://bucket.HOST/key).
  /// "auto" (what the Python layer passes unless `~/.aws/config` or remote_options say otherwise):
  /// virtual-hosted on AWS's own endpoint for a bucket that is a DNS label (lower-case letters,
  /// digits, '-', no '.'), else path-style, which S3-compatible stores at a custom endpoint expect.
  std::string addressing_style = "path";
};

struct RemoteOptions {
  int max_connections = 8;
  int max_attempts = 5;
  double backoff_initial_s = 0.2;
  double backoff_max_s = 10.0;
  long connect_timeout_s = 15;
  /// A transfer that moves under 1 byte/s for this long is a timeout (then retried).
  long stall_timeout_s = 30;
  /// A request whose body moves fewer than `min_rate_bytes_per_s` bytes a second on average over
  /// any `min_rate_window_s` seconds (windows counted from the request's start) is stopped as
  /// too slow and retried like a timeout (the retry resumes after the bytes that landed). 0: no
  /// minimum. The default is far under any link that moves shards at all (8 KiB/s per connection
  /// is a 64 KiB/s link shared by 8); a trickle of a few bytes a second fails in a window.
  int64_t min_rate_bytes_per_s = 8192;
  double min_rate_window_s = 30;
  /// A job that has not landed this long after its first request is stopped and not retried
  /// (DeadlineExceeded, naming the URL). 0: none. The default (an hour) is a backstop for a
  /// server that keeps just above the minimum rate; each job has its own, and a shard of known
  /// size is several jobs (shard_cache.h: DownloadPieces), so a 1 GB shard in 8 pieces lands
  /// within it above 36 KB/s per connection.
  double download_deadline_s = 3600;
  /// CA bundle for https (a self-signed test server's cert, a corporate CA); system default
  /// when empty.
  std::string ca_file;
  /// Protocols libcurl may use, redirects included. Tests add `file` to fetch local files.
  std::string protocols = "http,https";
  S3Config s3;
};

/// The HTTP(S) URL a remote URL is fetched from (an s3:// URL: at its endpoint, path-style or
/// virtual-hosted as S3Config::addressing_style says); InvalidArgument for an s3:// URL without
/// bucket or key, an unknown addressing style, or a URL of another scheme.
absl::StatusOr<std::string> HttpUrlOf(const std::string& url, const RemoteOptions& options);

struct DownloadJob {
  std::string url;   ///< the remote URL (as written: s3:// or http(s)://)
  std::string path;  ///< where its bytes go (created or truncated; a range's file is neither)
  /// A byte range of the object, [offset, offset + length), fetched with Range and written at
  /// `offset` in `path`; length -1: the whole object. A range is OK only from a 206 whose
  /// Content-Range starts where asked, of `length` bytes, from an object of `object_size` bytes
  /// (-1: any) whose ETag is `etag` (empty: any, but one version across the requests of the
  /// DownloadAll call to that URL: see "pinned" in the file comment); another object size, ETag
  /// or Last-Modified, or a 412 to the request's If-Match / If-Unmodified-Since, is
  /// FailedPrecondition "changed" (the index it came from is stale), never retried.
  int64_t offset = 0;
  int64_t length = -1;
  int64_t object_size = -1;
  std::string etag;
};

struct DownloadResult {
  absl::Status status;
  int64_t size = 0;   ///< bytes written (the object's size when OK)
  std::string etag;   ///< as the server sent it (quotes kept), empty when none
  int attempts = 0;   ///< requests made, the first included
  bool changed = false;  ///< a range's object is not the one indexed or pinned (FailedPrecondition)
};

/// Called once per job, on DownloadAll's thread, the moment its result is final (OK, failed,
/// or Cancelled): a caller hands each job on without waiting for the others.
using JobDone = std::function<void(size_t job, const DownloadResult& result)>;

/// A place in the order in which DownloadAll calls take connections, drawn where a caller hands
/// shards out in order to several threads (BackgroundFetch), so that the threads' DownloadAll
/// calls take connections in that order whichever gets there first. The DownloadAll given it
/// releases it after its first pass; a caller that runs none releases it (ReleaseDownloadTicket,
/// idempotent). An unreleased ticket holds later ones back for half a second at most.
int64_t DrawDownloadTicket();
void ReleaseDownloadTicket(int64_t ticket);

/// Fetches every job, at most `max_connections` at once to a host counting the transfers of every
/// other DownloadAll of the process (see the file comment), starting them in the order given, and
/// returns one result per job, in order. Returns early (results Cancelled) soon after `*cancel`
/// is set. Every successful response feeds the link estimate of its host (MeasuredLink).
/// `ticket`: one from DrawDownloadTicket (-1: drawn now).
std::vector<DownloadResult> DownloadAll(const std::vector<DownloadJob>& jobs,
                                        const RemoteOptions& options,
                                        const std::atomic<bool>* cancel = nullptr,
                                        const JobDone& on_done = nullptr, int64_t ticket = -1);

/// A download of the process that has not landed yet: every job of every DownloadAll call from
/// its first request until its result is final (its retries and the waits between them
/// included), the jobs of one URL (a shard's pieces, range reads) summed. For the loader's
/// timeout error and describe(): a trickling or stalled download is named, not just waited on.
struct TransferInFlight {
  std::string url;
  int64_t bytes = 0;      ///< written so far
  int64_t expected = -1;  ///< the bytes asked (ranges) or stated by the server; -1: not known yet
  /// Over the last second or more of the body's progress; -1 in a download's first second
  /// (not measured yet).
  double bytes_per_s = -1;
  double seconds = 0;     ///< since its first request
  int transfers = 1;      ///< jobs of that URL in flight
  int attempts = 0;       ///< requests made so far, its jobs' summed
};

/// Every URL with a download in flight, slowest first (measured rate, then the oldest).
std::vector<TransferInFlight> TransfersInFlight();

/// One line naming the slowest `max_urls` downloads in flight ("downloads in flight (N): URL:
/// B of E bytes, R bytes/s now, started S s ago; ..."), empty when none.
std::string DescribeTransfersInFlight(int max_urls = 3);

/// What the process has measured of the link to a host: the time to the first byte of a
/// response (a request's round trip, the connection's set-up included when it is new) and the
/// bytes per second one transfer moves once its body flows, each smoothed over the responses
/// (an exponential moving average). Before anything is measured: the prior below.
struct LinkEstimate {
  static constexpr double kPriorLatencyS = 0.05;
  static constexpr double kPriorBytesPerS = 100e6;
  double latency_s = kPriorLatencyS;
  double bytes_per_s = kPriorBytesPerS;
  int64_t latency_samples = 0;  ///< responses measured (0: latency_s is the prior)
  int64_t rate_samples = 0;     ///< bodies long enough to time (0: bytes_per_s is the prior)
  std::string host;             ///< scheme://host[:port] it is of; empty for the prior alone
};

/// The estimate for `url`'s host (s3:// URLs: their endpoint's), or the prior.
LinkEstimate MeasuredLink(const std::string& url, const RemoteOptions& options);

/// The estimate of the host measured last, or the prior when none was (for the loader's stats).
LinkEstimate LastMeasuredLink();

/// Feeds one response into `host`'s estimate: `first_byte_s` from the request to its first
/// byte; `body_bytes` that then took `body_s` seconds (a body under 64 KiB is not timed: its
/// seconds are mostly the latency's). Tests use it to set an estimate.
void NoteLinkSample(const std::string& host, double first_byte_s, int64_t body_bytes, double body_s);

/// scheme://host[:port] of an http(s) URL.
std::string HostOf(absl::string_view http_url);

/// The delay before retry number `retry` (1-based): uniform in [0, min(max, initial * 2^(retry-1))]
/// ("full jitter"), from `unit`, a draw in [0, 1).
double BackoffSeconds(int retry, const RemoteOptions& options, double unit);

}  // namespace ringloader
