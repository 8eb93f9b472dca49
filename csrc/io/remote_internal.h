#pragma once
// What DownloadAll (io/remote.cc) uses of the files split from it: the parts of a URL a request
// signs (io/remote_addressing.cc) and the per-host connection budget with its tickets
// (io/connection_budget.cc). Internal to io/.

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ringloader {

// ---- io/remote_addressing.cc ----

/// The Host header libcurl sends for an http(s) URL: its authority, without a default port.
std::string HostHeaderOf(absl::string_view http_url);

/// The path (as sent) and the canonical query string of an http(s) URL, for SigV4.
void PathAndQueryOf(absl::string_view http_url, std::string* path, std::string* query);

// ---- io/connection_budget.cc ----

// A ticket for a DownloadAll called without one (DrawDownloadTicket's order, never "unstarted").
int64_t NextTicket();

// Takes one of `host`'s transfers when fewer than `limit` are in flight (the caller's own
// `max_connections`: a caller with a lower setting waits while others hold more) and no call
// with an earlier ticket waits for one; else `ticket` waits (until StopWaiting).
bool TakeConnection(const std::string& host, int limit, int64_t ticket);

// `ticket` no longer waits for `host`'s budget (it started what it could, or it ended).
void StopWaiting(const std::string& host, int64_t ticket);

// One of `host`'s transfers ended.
void ReturnConnection(const std::string& host);

// Waits up to `timeout` for any host's transfer to end (a DownloadAll with nothing in flight
// whose next transfer waits for the budget).
void WaitForFreedConnection(std::chrono::milliseconds timeout);

}  // namespace ringloader
