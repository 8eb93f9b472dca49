// DownloadAll: libcurl's multi interface, the retries, resumes and version pins, and the
// transfers in flight. The URLs requests go to and their signing parts are in
// io/remote_addressing.cc, the per-host connection budget in io/connection_budget.cc, the link
// estimates in io/link_estimates.cc.

#include "io/remote.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_util.h"
#include "io/remote_internal.h"
#include "io/sigv4.h"

namespace ringloader {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kErrorBodyBytes = 512;

void InitCurlOnce() {
  // curl_global_init is not thread-safe before 7.84; a function-local static runs it once.
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)init;
}

/// The version of an object that the range requests of one DownloadAll call to its URL are pinned
/// to: the validators of the first response (see "pinned" in remote.h).
struct Pin {
  std::string etag;
  std::string last_modified;
  bool set = false;
};

bool WeakETag(absl::string_view etag) { return absl::StartsWith(etag, "W/"); }

/// One job's transfer state, across its attempts.
struct Transfer {
  const DownloadJob* job = nullptr;
  DownloadResult* result = nullptr;
  std::string http_url;
  std::string host;  // HostOf(http_url): whose connection budget it draws on
  int fd = -1;
  int64_t written = 0;       // bytes of the object in the file
  int64_t total = -1;        // the object's size, once a response stated it
  std::string etag;          // of the first response that had one
  std::string last_modified;  // of the first response that had one (a resume's If-Range without an ETag)
  Pin* pin = nullptr;        // a range's: the version of its URL this call's ranges are pinned to
  bool precondition_sent = false;  // this attempt's request carried If-Match / If-Unmodified-Since
  // The response being received (reset at each status line: redirects, 100-continue).
  long status = 0;
  int64_t content_length = -1;
  int64_t range_start = -1, range_total = -1;
  std::string response_etag;
  std::string response_last_modified;
  bool body_started = false;
  std::string error_body;
  std::string write_error;   // why the write callback stopped the transfer
  bool resume_mismatch = false;  // it stopped because the resumed part did not fit: retried
  bool etag_changed = false;
  bool stale = false;  // a range's object is not the one indexed: final
  // The minimum rate and the deadline (RemoteOptions), checked by OnProgress.
  int64_t min_rate = 0;
  double min_rate_window_s = 0;
  Clock::time_point window_start{};
  int64_t window_bytes = 0;        // the attempt's body bytes when the window started
  Clock::time_point deadline = Clock::time_point::max();  // from the job's first request
  bool too_slow = false;           // OnProgress stopped the attempt: under the minimum rate
  bool deadline_passed = false;    // OnProgress stopped it: the job's deadline passed
  Clock::time_point noted_at{};    // when OnProgress last told the table of transfers in flight
  char curl_error[CURL_ERROR_SIZE] = {0};
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  Clock::time_point ready_at{};
  bool done = false;
};

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  absl::string_view line(data, n);
  line = absl::StripTrailingAsciiWhitespace(line);
  if (absl::StartsWith(line, "HTTP/")) {
    t->status = 0;
    t->content_length = t->range_start = t->range_total = -1;
    t->response_etag.clear();
    t->response_last_modified.clear();
    const size_t space = line.find(' ');
    if (space != absl::string_view::npos) {
      int code = 0;
      if (absl::SimpleAtoi(line.substr(space + 1, 3), &code)) t->status = code;
    }
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return n;
  const std::string name = absl::AsciiStrToLower(line.substr(0, colon));
  const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (name == "etag") {
    t->response_etag = std::string(value);
  } else if (name == "last-modified") {
    t->response_last_modified = std::string(value);
  } else if (name == "content-length") {
    int64_t v = 0;
    if (absl::SimpleAtoi(value, &v)) t->content_length = v;
  } else if (name == "content-range") {
    // bytes START-END/TOTAL
    absl::string_view v = value;
    if (absl::ConsumePrefix(&v, "bytes ")) {
      const size_t dash = v.find('-'), slash = v.find('/');
      int64_t start = 0, total = 0;
      if (dash != absl::string_view::npos && absl::SimpleAtoi(v.substr(0, dash), &start)) {
        t->range_start = start;
      }
      if (slash != absl::string_view::npos && absl::SimpleAtoi(v.substr(slash + 1), &total)) {
        t->range_total = total;
      }
    }
  }
  return n;
}

bool WriteAll(int fd, const char* data, size_t n, int64_t offset) {
  while (n > 0) {
    const ssize_t w = pwrite(fd, data, n, offset);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
    offset += w;
  }
  return true;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (t->status == 0) {
    // No status line: a protocol without one (file://, which tests use). Its Range is honoured.
    const bool ranged = t->job->length >= 0;
    t->status = t->written > 0 || ranged ? 206 : 200;
    if (t->status == 206) t->range_start = (ranged ? t->job->offset : 0) + t->written;
  }
  if (t->status < 200 || t->status >= 300) {
    const size_t keep = std::min(n, kErrorBodyBytes - std::min(kErrorBodyBytes, t->error_body.size()));
    t->error_body.append(data, keep);
    return n;
  }
  const bool ranged = t->job->length >= 0;
  if (!t->body_started && ranged) {
    t->body_started = true;
    const int64_t want = t->job->offset + t->written;
    if (t->status != 206 || t->range_start != want) {
      t->write_error = absl::StrCat("asked for bytes from ", want, ", got HTTP ", t->status,
                                    t->status == 206 ? absl::StrCat(" from byte ", t->range_start)
                                                     : std::string(" (no byte range)"));
      return 0;
    }
    const bool other_size = t->job->object_size >= 0 && t->range_total >= 0 &&
                            t->range_total != t->job->object_size;
    const bool other_etag = !t->job->etag.empty() && !t->response_etag.empty() &&
                            t->response_etag != t->job->etag;
    // A retry's response of another ETag than the attempt before: the bytes already written are
    // another version's (a range asked without an ETag to check against may not splice two).
    const bool changed_between = !other_etag && !t->etag.empty() && !t->response_etag.empty() &&
                                 t->response_etag != t->etag;
    if (changed_between) {
      t->stale = true;
      t->write_error = absl::StrCat("the object changed between attempts: ETag ", t->etag, ", then ",
                                    t->response_etag);
      return 0;
    }
    if (other_size || other_etag) {
      t->stale = true;
      t->write_error = other_size
          ? absl::StrCat("the object changed: ", t->range_total, " bytes, indexed from ",
                         t->job->object_size)
          : absl::StrCat("the object changed: ETag ", t->response_etag, ", indexed from ",
                         t->job->etag);
      return 0;
    }
    // Another version than the one this call's earlier responses for the URL came from (the
    // pieces of one shard are ranges of one call): bytes of two versions must not meet in a file.
    if (Pin* pin = t->pin; pin != nullptr && pin->set) {
      std::string why;
      if (!pin->etag.empty() && !t->response_etag.empty() && pin->etag != t->response_etag) {
        why = absl::StrCat("ETag ", t->response_etag, ", earlier ", pin->etag);
      } else if (pin->etag.empty() && t->response_etag.empty() && !pin->last_modified.empty() &&
                 !t->response_last_modified.empty() &&
                 pin->last_modified != t->response_last_modified) {
        why = absl::StrCat("Last-Modified ", t->response_last_modified, ", earlier ",
                           pin->last_modified);
      }
      if (!why.empty()) {
        t->stale = true;
        t->write_error = absl::StrCat("the object changed during the download: ", why);
        return 0;
      }
    } else if (pin != nullptr) {
      pin->etag = t->response_etag;
      pin->last_modified = t->response_last_modified;
      pin->set = true;
    }
    t->etag = t->response_etag;
    if (t->last_modified.empty()) t->last_modified = t->response_last_modified;
  }
  if (ranged) {
    if (!WriteAll(t->fd, data, n, t->job->offset + t->written)) {
      t->write_error = absl::StrCat("write(", t->job->path, "): ", std::strerror(errno));
      return 0;
    }
    t->written += static_cast<int64_t>(n);
    return n;
  }
  if (!t->body_started) {
    t->body_started = true;
    if (!t->response_etag.empty()) {
      if (t->etag.empty()) {
        t->etag = t->response_etag;
      } else if (t->etag != t->response_etag) {
        // The object changed between attempts: what was written is another version.
        t->etag_changed = true;
      }
    } else if (t->etag.empty() && !t->response_last_modified.empty()) {
      // Without ETags the object's version is its Last-Modified.
      if (t->last_modified.empty()) {
        t->last_modified = t->response_last_modified;
      } else if (t->last_modified != t->response_last_modified) {
        t->etag_changed = true;
      }
    }
    if (t->status == 206) {
      if (t->range_start != t->written || t->etag_changed) {
        t->write_error = absl::StrCat("the server resumed at byte ", t->range_start, ", not ",
                                      t->written);
        t->resume_mismatch = true;
        t->written = 0;
        return 0;
      }
      if (t->range_total >= 0) t->total = t->range_total;
    } else {
      // A whole object (the server ignored the Range, or If-Range saw another ETag).
      if (t->written > 0 && ftruncate(t->fd, 0) != 0) {
        t->write_error = absl::StrCat("ftruncate(", t->job->path, "): ", std::strerror(errno));
        return 0;
      }
      t->written = 0;
      t->etag_changed = false;
      if (!t->response_etag.empty()) t->etag = t->response_etag;
      if (!t->response_last_modified.empty()) t->last_modified = t->response_last_modified;
      t->total = t->content_length;
    }
  }
  if (!WriteAll(t->fd, data, n, t->written)) {
    t->write_error = absl::StrCat("write(", t->job->path, "): ", std::strerror(errno));
    return 0;
  }
  t->written += static_cast<int64_t>(n);
  return n;
}

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ---- transfers in flight (TransfersInFlight) -----------------------------------------------

/// One job's entry, from its first request until its result is final.
struct InFlight {
  std::string url;
  int64_t bytes = 0;
  int64_t expected = -1;
  int attempts = 0;
  Clock::time_point started{};
  // The rate: bytes moved since `rate_since` (`rate_bytes` then), measured once a second passed.
  Clock::time_point rate_since{};
  int64_t rate_bytes = 0;
  double rate = -1;
};

struct InFlightTable {
  std::mutex mu;
  std::map<const void*, InFlight> jobs ABSL_GUARDED_BY(mu);
};

InFlightTable& TheInFlight() {
  static auto* table = new InFlightTable;  // never destroyed: transfers may outlive static teardown
  return *table;
}

/// Registers `t` (at its first request) or updates its bytes, size and rate.
void NoteInFlight(const Transfer* t, Clock::time_point now) {
  InFlightTable& table = TheInFlight();
  std::lock_guard<std::mutex> lock(table.mu);
  auto [it, fresh] = table.jobs.try_emplace(t);
  InFlight& e = it->second;
  if (fresh) {
    e.url = t->job->url;
    e.started = e.rate_since = now;
    e.rate_bytes = t->written;
  }
  e.bytes = t->written;
  e.expected = t->total;
  e.attempts = t->result->attempts;
  const double measured = SecondsBetween(e.rate_since, now);
  if (measured >= 1.0) {
    // (A retry that starts over from byte 0 moved nothing yet, not a negative amount.)
    e.rate = static_cast<double>(std::max<int64_t>(0, e.bytes - e.rate_bytes)) / measured;
    e.rate_since = now;
    e.rate_bytes = e.bytes;
  }
}

void ForgetInFlight(const Transfer* t) {
  InFlightTable& table = TheInFlight();
  std::lock_guard<std::mutex> lock(table.mu);
  table.jobs.erase(t);
}

/// libcurl's progress callback (at least once a second while a transfer runs): stops an attempt
/// whose body moved under the minimum rate over the last window, or whose job's deadline passed.
int OnProgress(void* user, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  const Clock::time_point now = Clock::now();
  if (now - t->noted_at >= std::chrono::milliseconds(100)) {
    t->noted_at = now;
    NoteInFlight(t, now);
  }
  if (now >= t->deadline) {
    t->deadline_passed = true;
    return 1;
  }
  if (t->min_rate <= 0) return 0;
  const double elapsed = SecondsBetween(t->window_start, now);
  if (elapsed < t->min_rate_window_s) return 0;
  const int64_t moved = static_cast<int64_t>(dlnow) - t->window_bytes;
  const double rate = static_cast<double>(moved) / elapsed;
  if (rate < static_cast<double>(t->min_rate)) {
    t->too_slow = true;
    t->write_error = absl::StrFormat(
        "too slow: %d bytes in the last %.1f s (%.0f bytes/s, under min_rate_bytes_per_s=%d)", moved,
        elapsed, rate, t->min_rate);
    return 1;
  }
  t->window_start = now;
  t->window_bytes = static_cast<int64_t>(dlnow);
  return 0;
}

bool RetryableCurl(CURLcode code) {
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

std::string CodeText(long status) {
  switch (status) {
    case 401: return "401 Unauthorized";
    case 403: return "403 Forbidden";
    case 404: return "404 Not Found";
    case 412: return "412 Precondition Failed";
    case 416: return "416 Range Not Satisfiable";
    case 429: return "429 Too Many Requests";
    case 500: return "500 Internal Server Error";
    case 502: return "502 Bad Gateway";
    case 503: return "503 Service Unavailable";
    case 504: return "504 Gateway Timeout";
    default: return absl::StrCat(status);
  }
}

/// The body of an error response, on one line, for the message (S3 puts its reason there).
std::string BodyNote(const std::string& body) {
  if (body.empty()) return "";
  std::string text = body;
  for (char& c : text) {
    if (c == '\n' || c == '\r' || static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return absl::StrCat(": ", absl::StripAsciiWhitespace(text));
}

// A job's request, as messages name it.
std::string RequestName(const Transfer& t) {
  return t.job->length >= 0
             ? absl::StrCat("GET ", t.job->url, " bytes ", t.job->offset, "-", t.job->offset + t.job->length - 1)
             : absl::StrCat("GET ", t.job->url);
}

// The outcome of an attempt that ended with `code`: OK when the object (or its range) landed
// whole; else the failure, with `*retry_out` when another attempt may get it.
absl::Status AttemptOutcome(Transfer& t, CURLcode code, bool* retry_out) {
  const long status = t.status;
  absl::Status failure;
  bool& retry = *retry_out;
  retry = false;
  const std::string where = RequestName(t);
  if (code == CURLE_OK && (status == 0 || (status >= 200 && status < 300))) {
    if (!t.body_started) {
      // An empty body: OnBody never ran for this response.
      if (status != 206 && status != 0) {
        if (t.written > 0 && ftruncate(t.fd, 0) == 0) t.written = 0;
        t.total = t.content_length;
        if (!t.response_etag.empty()) t.etag = t.response_etag;
      }
    }
    if (t.total >= 0 && t.written != t.total) {
      failure = absl::DataLossError(absl::StrCat(where, ": got ", t.written, " of ", t.total,
                                                 " bytes"));
      retry = true;
    } else {
      return absl::OkStatus();
    }
  } else if (code == CURLE_OK || code == CURLE_HTTP_RETURNED_ERROR) {
    const std::string what = absl::StrCat(where, ": HTTP ", CodeText(status),
                                          BodyNote(t.error_body));
    if (status == 412 && t.precondition_sent) {
      // If-Match / If-Unmodified-Since refused: the object is not the version pinned.
      t.stale = true;
      const std::string pinned = !t.job->etag.empty() ? t.job->etag
                                 : t.pin != nullptr ? t.pin->etag : std::string();
      failure = absl::FailedPreconditionError(absl::StrCat(
          where, ": HTTP 412 Precondition Failed: the object changed: ",
          !pinned.empty() && !WeakETag(pinned)
              ? absl::StrCat("it is not ETag ", pinned, " any more")
              : absl::StrCat("modified after ", t.pin != nullptr ? t.pin->last_modified : "")));
    } else if (status == 401 || status == 403) {
      failure = absl::PermissionDeniedError(what);
    } else if (status == 404) {
      failure = absl::NotFoundError(what);
    } else if (status == 429 || status >= 500) {
      failure = absl::UnavailableError(what);
      retry = true;
    } else if (status == 416 && t.written > 0) {
      // The part on disk does not fit the object any more: start over.
      t.written = 0;
      failure = absl::DataLossError(what);
      retry = true;
    } else {
      failure = absl::InvalidArgumentError(what);
    }
  } else {
    const std::string detail = t.write_error.empty()
                                   ? (t.curl_error[0] ? std::string(t.curl_error)
                                                       : std::string(curl_easy_strerror(code)))
                                   : t.write_error;
    const std::string what = absl::StrCat(where, ": ", detail);
    // A resumed part that did not fit is fetched again from byte 0, a transfer under the
    // minimum rate is resumed; a failed write to the cache's disk (full, read-only) is not
    // retried.
    retry = !t.stale && (RetryableCurl(code) || (code == CURLE_WRITE_ERROR && t.resume_mismatch) ||
                          (code == CURLE_ABORTED_BY_CALLBACK && t.too_slow));
    failure = retry ? absl::UnavailableError(what) : absl::FailedPreconditionError(what);
  }
  return failure;
}

// An attempt's request headers (the caller frees them): the Range of a job's range or of a
// resumed download (`*range_out`, empty without one) with the version it is pinned to, and an
// s3:// request's SigV4 signature.
curl_slist* RequestHeaders(Transfer& t, const RemoteOptions& options, std::string* range_out) {
  curl_slist* headers = nullptr;
  std::string& range = *range_out;
  range.clear();
  if (t.job->length >= 0) {
    // A range: the part of it not written yet (a retry resumes after what landed), of the
    // version the call's ranges of this URL are pinned to.
    const int64_t first = t.job->offset + t.written;
    range = absl::StrCat(first, "-", t.job->offset + t.job->length - 1);
    std::string etag = t.job->etag;
    if (etag.empty() && t.pin != nullptr) etag = t.pin->etag;
    if (!etag.empty() && !WeakETag(etag)) {
      headers = curl_slist_append(headers, absl::StrCat("If-Match: ", etag).c_str());
      t.precondition_sent = true;
    } else if (etag.empty() && t.pin != nullptr && !t.pin->last_modified.empty()) {
      headers = curl_slist_append(
          headers, absl::StrCat("If-Unmodified-Since: ", t.pin->last_modified).c_str());
      t.precondition_sent = true;
    }
  } else if (t.written > 0) {
    // Resume: the rest of the object, unless it changed (then the whole new one). Without an
    // ETag, its Last-Modified tells the version.
    range = absl::StrCat(t.written, "-");
    const std::string& validator = !t.etag.empty() ? t.etag : t.last_modified;
    if (!validator.empty()) {
      headers = curl_slist_append(headers, absl::StrCat("If-Range: ", validator).c_str());
    }
  }
  // Without credentials an s3:// request goes unsigned: a public bucket allows it.
  if (absl::StartsWith(t.job->url, "s3://") && !options.s3.access_key.empty()) {
    sigv4::Request request;
    request.host = HostHeaderOf(t.http_url);
    PathAndQueryOf(t.http_url, &request.path, &request.query);
    // libcurl sends CURLOPT_RANGE as "Range: bytes=RANGE".
    if (!range.empty()) request.headers.emplace_back("range", absl::StrCat("bytes=", range));
    request.amz_date = sigv4::AmzDate(std::time(nullptr));
    sigv4::Credentials credentials{options.s3.access_key, options.s3.secret_key,
                                   options.s3.session_token, options.s3.region, "s3"};
    for (const std::string& header : sigv4::SignGet(request, credentials).headers) {
      headers = curl_slist_append(headers, header.c_str());
    }
  }
  return headers;
}

// After a failed attempt: nullopt when another one is scheduled (at `t->ready_at`, after the
// backoff), else the job's final error (its deadline passed, or no attempt left or worth making).
std::optional<absl::Status> AfterFailure(Transfer* t, absl::Status failure, bool retry, const RemoteOptions& options,
                                         std::mt19937_64& rng) {
  const std::string where = RequestName(*t);
  if (t->deadline_passed || (retry && Clock::now() >= t->deadline)) {
    failure = absl::DeadlineExceededError(absl::StrFormat(
        "%s: not landed within download_deadline_s=%g (%d of %s bytes after %d attempts; "
        "last: %s)",
        where, options.download_deadline_s, t->written,
        t->total >= 0 ? absl::StrCat(t->total) : std::string("?"), t->result->attempts,
        t->deadline_passed ? std::string("stopped at the deadline") : std::string(failure.message())));
    return failure;
  }
  if (retry && t->result->attempts < options.max_attempts) {
    const double unit = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const double delay = BackoffSeconds(t->result->attempts, options, unit);
    t->ready_at = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(delay * 1e6));
    return std::nullopt;
  }
  if (retry) {
    failure = absl::Status(failure.code(), absl::StrCat(failure.message(), " (gave up after ",
                                                        t->result->attempts, " attempts)"));
  }
  return failure;
}

// Feeds a successful response's time to first byte and body rate into its host's link estimate.
void NoteLinkOf(const Transfer& t) {
  curl_off_t first_byte_us = 0, total_us = 0, body = 0;
  curl_easy_getinfo(t.easy, CURLINFO_STARTTRANSFER_TIME_T, &first_byte_us);
  curl_easy_getinfo(t.easy, CURLINFO_TOTAL_TIME_T, &total_us);
  curl_easy_getinfo(t.easy, CURLINFO_SIZE_DOWNLOAD_T, &body);
  NoteLinkSample(HostOf(t.http_url), static_cast<double>(first_byte_us) * 1e-6, static_cast<int64_t>(body),
                 static_cast<double>(total_us - first_byte_us) * 1e-6);
}

// A new attempt of `t`: its easy handle (`t->easy`) set up with the options, the callbacks and
// the request headers, and its per-attempt state reset; the caller adds it to its multi handle.
void BeginAttempt(Transfer* t, const RemoteOptions& options) {
  CURL* e = curl_easy_init();
  t->easy = e;
  t->status = 0;
  t->body_started = false;
  t->error_body.clear();
  t->write_error.clear();
  t->resume_mismatch = false;
  t->precondition_sent = false;
  t->too_slow = false;
  t->curl_error[0] = '\0';
  const Clock::time_point now = Clock::now();
  if (t->result->attempts == 0 && options.download_deadline_s > 0) {
    t->deadline = now + std::chrono::microseconds(
                            static_cast<int64_t>(options.download_deadline_s * 1e6));
  }
  t->min_rate = options.min_rate_bytes_per_s;
  t->min_rate_window_s = options.min_rate_window_s;
  t->window_start = now;
  t->window_bytes = 0;
  curl_easy_setopt(e, CURLOPT_URL, t->http_url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->curl_error);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, options.protocols.c_str());
  curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, options.protocols.c_str());
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, options.connect_timeout_s);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, options.stall_timeout_s);
  curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(e, CURLOPT_XFERINFODATA, t);
  curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, nullptr);  // the bytes as stored, never re-encoded
  if (!options.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options.ca_file.c_str());
  std::string range;  // the Range header's value, when one is sent
  curl_slist* headers = RequestHeaders(*t, options, &range);
  if (!range.empty()) curl_easy_setopt(e, CURLOPT_RANGE, range.c_str());
  t->headers = headers;
  if (headers != nullptr) curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  t->result->attempts += 1;
  t->noted_at = now;
  NoteInFlight(t, now);
}

}  // namespace

std::vector<TransferInFlight> TransfersInFlight() {
  const Clock::time_point now = Clock::now();
  std::map<std::string, TransferInFlight> by_url;
  std::map<std::string, bool> unmeasured;  // a job of the URL has no measured rate yet
  {
    InFlightTable& table = TheInFlight();
    std::lock_guard<std::mutex> lock(table.mu);
    for (const auto& [job, e] : table.jobs) {
      auto [it, fresh] = by_url.try_emplace(e.url);
      TransferInFlight& u = it->second;
      const double seconds = SecondsBetween(e.started, now);
      if (fresh) {
        u.url = e.url;
        u.bytes = e.bytes;
        u.expected = e.expected;
        u.bytes_per_s = e.rate;
        u.seconds = seconds;
        u.attempts = e.attempts;
        unmeasured[e.url] = e.rate < 0;
        continue;
      }
      u.bytes += e.bytes;
      u.expected = u.expected < 0 || e.expected < 0 ? -1 : u.expected + e.expected;
      if (e.rate >= 0) u.bytes_per_s = std::max(0.0, u.bytes_per_s) + e.rate;
      if (e.rate < 0) unmeasured[e.url] = true;
      u.seconds = std::max(u.seconds, seconds);
      u.transfers += 1;
      u.attempts += e.attempts;
    }
  }
  std::vector<TransferInFlight> out;
  for (auto& [url, u] : by_url) {
    // A URL some of whose jobs are in their first second: its sum would understate the rate.
    if (unmeasured[url]) u.bytes_per_s = -1;
    out.push_back(std::move(u));
  }
  std::sort(out.begin(), out.end(), [](const TransferInFlight& a, const TransferInFlight& b) {
    const bool a_known = a.bytes_per_s >= 0, b_known = b.bytes_per_s >= 0;
    if (a_known != b_known) return a_known;
    if (a.bytes_per_s != b.bytes_per_s) return a.bytes_per_s < b.bytes_per_s;
    return a.seconds > b.seconds;
  });
  return out;
}

std::string DescribeTransfersInFlight(int max_urls) {
  const std::vector<TransferInFlight> all = TransfersInFlight();
  if (all.empty()) return "";
  std::vector<std::string> parts;
  for (size_t i = 0; i < all.size() && i < static_cast<size_t>(std::max(1, max_urls)); ++i) {
    const TransferInFlight& u = all[i];
    std::string part = absl::StrCat(u.url, ": ", u.bytes, " of ",
                                    u.expected >= 0 ? absl::StrCat(u.expected) : std::string("?"), " bytes, ");
    absl::StrAppend(&part, u.bytes_per_s >= 0 ? absl::StrFormat("%.0f bytes/s now", u.bytes_per_s)
                                              : std::string("rate not measured yet"));
    absl::StrAppend(&part, absl::StrFormat(", started %.1f s ago", u.seconds));
    if (u.transfers > 1) absl::StrAppend(&part, ", ", u.transfers, " ranges");
    if (u.attempts > u.transfers) absl::StrAppend(&part, ", ", u.attempts, " requests");
    parts.push_back(std::move(part));
  }
  std::string line = absl::StrCat("downloads in flight (", all.size(), ", slowest first): ",
                                  absl::StrJoin(parts, "; "));
  if (all.size() > parts.size()) absl::StrAppend(&line, "; and ", all.size() - parts.size(), " more");
  return line;
}

double BackoffSeconds(int retry, const RemoteOptions& options, double unit) {
  const double cap = std::min(options.backoff_max_s,
                              options.backoff_initial_s * std::ldexp(1.0, std::max(0, retry - 1)));
  return cap * unit;
}

std::vector<DownloadResult> DownloadAll(const std::vector<DownloadJob>& jobs,
                                        const RemoteOptions& options,
                                        const std::atomic<bool>* cancel, const JobDone& on_done,
                                        int64_t given_ticket) {
  InitCurlOnce();
  std::vector<DownloadResult> results(jobs.size());
  std::vector<std::unique_ptr<Transfer>> transfers;
  std::map<std::string, Pin> pins;  // per URL, for its ranges (std::map: the pointers stay valid)
  std::mt19937_64 rng(std::random_device{}());

  for (size_t i = 0; i < jobs.size(); ++i) {
    auto t = std::make_unique<Transfer>();
    t->job = &jobs[i];
    t->result = &results[i];
    absl::StatusOr<std::string> http = HttpUrlOf(jobs[i].url, options);
    if (!http.ok()) {
      results[i].status = http.status();
      t->done = true;
    } else {
      t->http_url = *std::move(http);
      t->host = HostOf(t->http_url);
      t->total = jobs[i].length;  // -1 for a whole object: the response states it
      if (jobs[i].length >= 0) t->pin = &pins[jobs[i].url];
    }
    if (t->done && on_done) on_done(i, results[i]);
    transfers.push_back(std::move(t));
  }

  CURLM* multi = curl_multi_init();
  const int max_connections = std::max(1, options.max_connections);
  const int64_t ticket = given_ticket >= 0 ? given_ticket : NextTicket();
  bool first_pass = true;
  std::set<std::string> budget_hosts;  // whose budget this call may wait for
  for (const auto& t : transfers) {
    if (!t->done) budget_hosts.insert(t->host);
  }
  curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, static_cast<long>(max_connections));
  int active = 0;

  auto finish = [&](Transfer* t, absl::Status status) {
    ForgetInFlight(t);
    t->done = true;
    t->result->status = std::move(status);
    t->result->size = t->written;
    t->result->etag = t->etag;
    t->result->changed = t->stale;
    if (t->fd >= 0) close(t->fd);
    t->fd = -1;
    if (on_done) on_done(static_cast<size_t>(t->job - jobs.data()), *t->result);
  };

  auto start = [&](Transfer* t) {
    BeginAttempt(t, options);
    curl_multi_add_handle(multi, t->easy);
    ++active;
  };

  auto release = [&](Transfer* t) {
    curl_multi_remove_handle(multi, t->easy);
    curl_easy_cleanup(t->easy);
    t->easy = nullptr;
    curl_slist_free_all(t->headers);
    t->headers = nullptr;
    ReturnConnection(t->host);
    --active;
  };

  // The outcome of one attempt: finished (OK or a final error) or scheduled for a retry.
  auto settle = [&](Transfer* t, CURLcode code) {
    bool retry = false;
    absl::Status failure = AttemptOutcome(*t, code, &retry);
    if (failure.ok()) return finish(t, absl::OkStatus());
    std::optional<absl::Status> final_error = AfterFailure(t, std::move(failure), retry, options, rng);
    if (final_error) finish(t, *std::move(final_error));
  };

  while (true) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) break;
    const Clock::time_point now = Clock::now();
    bool waiting = false;
    std::set<std::string> over_budget_hosts;  // a transfer is ready but the host's budget is spent
    Clock::time_point next_ready = now + std::chrono::milliseconds(100);
    for (auto& t : transfers) {
      if (t->done || t->easy != nullptr) continue;
      waiting = true;
      if (t->ready_at > now) {
        next_ready = std::min(next_ready, t->ready_at);
      } else if (active < max_connections) {
        if (over_budget_hosts.count(t->host) > 0 || !TakeConnection(t->host, max_connections, ticket)) {
          over_budget_hosts.insert(t->host);
          continue;
        }
        // Opened at its first attempt, so that an epoch's thousands of ranges do not hold a
        // descriptor each while they wait their turn.
        if (t->fd < 0) {
          const int truncate = t->job->length >= 0 ? 0 : O_TRUNC;
          t->fd = open(t->job->path.c_str(), O_WRONLY | O_CREAT | truncate | O_CLOEXEC, 0644);
          if (t->fd < 0) {
            ReturnConnection(t->host);
            finish(t.get(), ErrnoStatus(errno, "open", t->job->path));
            continue;
          }
        }
        start(t.get());
      }
    }
    for (const std::string& host : budget_hosts) {
      if (over_budget_hosts.count(host) == 0) StopWaiting(host, ticket);
    }
    if (first_pass) {
      first_pass = false;
      ReleaseDownloadTicket(ticket);  // later tickets may take connections now
    }
    const bool over_budget = !over_budget_hosts.empty();
    if (!waiting && active == 0) break;
    if (over_budget && active == 0) {
      // Nothing of ours in flight: the budget frees when another DownloadAll's transfer ends.
      WaitForFreedConnection(std::chrono::milliseconds(100));
      continue;
    }
    int running = 0;
    curl_multi_perform(multi, &running);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
      const CURLcode code = msg->data.result;
      if (code == CURLE_OK && t->status >= 200 && t->status < 300) NoteLinkOf(*t);
      release(t);
      settle(t, code);
    }
    if (std::all_of(transfers.begin(), transfers.end(), [](const auto& t) { return t->done; })) break;
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(next_ready - Clock::now(), Clock::duration::zero()));
    // Over the budget, another DownloadAll's transfer may end first: look again soon.
    curl_multi_poll(multi, nullptr, 0,
                    static_cast<int>(std::clamp<int64_t>(wait_ms.count(), 1, over_budget ? 10 : 100)), nullptr);
  }
  for (auto& t : transfers) {
    if (t->easy != nullptr) release(t.get());
    if (!t->done) finish(t.get(), absl::CancelledError(absl::StrCat("GET ", t->job->url, ": cancelled")));
  }
  for (const std::string& host : budget_hosts) StopWaiting(host, ticket);
  ReleaseDownloadTicket(ticket);  // cancelled before its first pass
  curl_multi_cleanup(multi);
  return results;
}

}  // namespace ringloader
