// The per-host connection budget every DownloadAll of the process draws on, handed out first
// come, first served by tickets (see remote.h and io/remote_internal.h).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "io/remote.h"
#include "io/remote_internal.h"

namespace ringloader {
namespace {

// The transfers in flight to each host, across every DownloadAll of the process: whole-shard
// downloads (a BackgroundFetch runs one DownloadAll per worker thread), range reads and the
// downloads that index a dataset all draw on one budget per host, so that together they hold no
// more connections than `max_connections` (per process and host, not per dataset: the link and
// the server's limits are the host's, and two datasets of one process reading one host share them).
//
// The budget is handed out first come, first served: each DownloadAll draws a ticket when it
// starts, and while a call with an earlier ticket waits for a host's budget, later calls start
// nothing there. So the shards an epoch wants first (a BackgroundFetch worker takes them in
// the epoch's order) get the connections first, and a shard's pieces (shard_cache.h:
// DownloadPieces) are not spread over the shards after it.
//
// A caller that hands shards out in order to several threads (BackgroundFetch) draws each
// shard's ticket where it hands the shard out (DrawDownloadTicket), so that tickets follow its
// order, not the order in which the threads get to DownloadAll. Until that DownloadAll has made
// its first pass over its transfers, the ticket is "unstarted", and later tickets take no
// connection: otherwise a thread that got there first would start the next shard's first piece
// beside the first shard's. An unstarted ticket holds later ones back for kUnstartedGrace at
// most (its thread may be waiting for a lock another download of the same object holds).
constexpr auto kUnstartedGrace = std::chrono::milliseconds(500);

struct Connections {
  std::mutex mu;
  std::condition_variable freed;
  std::map<std::string, int> open ABSL_GUARDED_BY(mu);
  std::map<std::string, std::set<int64_t>> waiting ABSL_GUARDED_BY(mu);  // tickets, per host
  std::map<int64_t, std::chrono::steady_clock::time_point> unstarted ABSL_GUARDED_BY(mu);
  int64_t next_ticket ABSL_GUARDED_BY(mu) = 0;
};

Connections& TheConnections() {
  static auto* connections = new Connections;  // never destroyed: download threads may run at exit
  return *connections;
}

// True when a ticket before `ticket` was drawn within kUnstartedGrace and has not made its first
// pass yet (see DrawDownloadTicket).
bool EarlierUnstarted(Connections& c, int64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [earlier, drawn] : c.unstarted) {
    if (earlier >= ticket) return false;
    if (now - drawn < kUnstartedGrace) return true;
  }
  return false;
}

}  // namespace

int64_t NextTicket() {
  Connections& c = TheConnections();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.next_ticket++;
}

bool TakeConnection(const std::string& host, int limit, int64_t ticket) {
  Connections& c = TheConnections();
  std::lock_guard<std::mutex> lock(c.mu);
  int& open = c.open[host];
  std::set<int64_t>& waiting = c.waiting[host];
  if (open < limit && (waiting.empty() || *waiting.begin() >= ticket) && !EarlierUnstarted(c, ticket)) {
    ++open;
    return true;
  }
  waiting.insert(ticket);
  return false;
}

void StopWaiting(const std::string& host, int64_t ticket) {
  Connections& c = TheConnections();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.waiting.find(host);
    if (it == c.waiting.end() || it->second.erase(ticket) == 0) return;
    if (it->second.empty()) c.waiting.erase(it);
  }
  c.freed.notify_all();
}

void ReturnConnection(const std::string& host) {
  Connections& c = TheConnections();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.open.find(host);
    if (it != c.open.end() && --it->second <= 0) c.open.erase(it);
  }
  c.freed.notify_all();
}

int64_t DrawDownloadTicket() {
  Connections& c = TheConnections();
  std::lock_guard<std::mutex> lock(c.mu);
  const int64_t ticket = c.next_ticket++;
  c.unstarted.emplace(ticket, std::chrono::steady_clock::now());
  return ticket;
}

void ReleaseDownloadTicket(int64_t ticket) {
  Connections& c = TheConnections();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.unstarted.erase(ticket) == 0) return;
  }
  c.freed.notify_all();
}

void WaitForFreedConnection(std::chrono::milliseconds timeout) {
  Connections& c = TheConnections();
  std::unique_lock<std::mutex> lock(c.mu);
  c.freed.wait_for(lock, timeout);
}

}  // namespace ringloader
