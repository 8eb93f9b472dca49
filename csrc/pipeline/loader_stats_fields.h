#pragma once
/// The one list of LoaderStats' fields: the binding's stats() dict and the bench's before/after
/// differences walk it instead of naming fields one by one. A field added to LoaderStats
/// without a line here fails the static_assert below.

#include <cstddef>
#include <iterator>
#include <type_traits>

#include "ringloader/ringloader.h"

namespace ringloader {

// X(field) for every field of LoaderStats, in the struct's order.
#define RINGLOADER_LOADER_STATS_FIELDS(X) \
  X(samples) \
  X(batches) \
  X(batches_completed) \
  X(errors) \
  X(skipped) \
  X(replaced) \
  X(decodes) \
  X(views_rendered) \
  X(bytes_read) \
  X(stream_restarts) \
  X(range_requests) \
  X(range_bytes) \
  X(row_groups_read) \
  X(row_group_bytes_read) \
  X(row_group_bytes_held) \
  X(row_group_bytes_peak) \
  X(row_group_waits) \
  X(row_group_wait_seconds) \
  X(row_groups_over_budget) \
  X(row_group_compactions) \
  X(read_seconds) \
  X(decode_seconds) \
  X(wait_seconds) \
  X(slots_allocated) \
  X(slots_held) \
  X(io_backend) \
  X(io_note) \
  X(memory) \
  X(memory_note) \
  X(numa_node) \
  X(numa_cpus) \
  X(numa_note) \
  X(threads_pinned) \
  X(decode_threads) \
  X(reader_threads) \
  X(threads_note) \
  X(prefetch_batches) \
  X(prefetch_max) \
  X(prefetch_grown) \
  X(max_slots) \
  X(max_memory) \
  X(memory_budget_note) \
  X(slots_note) \
  X(read_ahead) \
  X(read_buffers) \
  X(slot_bytes) \
  X(producer_waits) \
  X(outputs_new) \
  X(outputs_reused) \
  X(output_bytes_kept) \
  X(idle_spells) \
  X(thread_cpus) \
  X(device) \
  X(device_buffers) \
  X(device_buffers_held) \
  X(device_bytes) \
  X(device_copy_seconds) \
  X(samples_ahead) \
  X(epochs_queued) \
  X(epochs_adopted) \
  X(seconds_since_progress) \
  X(stalled) \
  X(pipeline_state) \
  X(scan_memo) \
  X(scan_memo_note) \
  X(scan_memo_entries) \
  X(scan_memo_slots) \
  X(scan_index_scans) \
  X(scan_index_bytes) \
  X(last_error) \
  X(recent_errors)

/// Calls f("name", stats.name) for every field of `stats` (a LoaderStats, const or not).
template <typename Stats, typename F>
void ForEachStat(Stats& stats, F&& f) {
#define RINGLOADER_VISIT_STAT(name) f(#name, stats.name);
  RINGLOADER_LOADER_STATS_FIELDS(RINGLOADER_VISIT_STAT)
#undef RINGLOADER_VISIT_STAT
}

/// What a measured window added: `after` with before's value taken from every number (counts
/// and busy seconds; gauges such as slots_held come out as their change too); flags, names and
/// notes are after's.
inline LoaderStats StatsSince(const LoaderStats& before, const LoaderStats& after) {
  LoaderStats window = after;
  auto subtract = [](const auto& earlier, auto* value) {
    using T = std::remove_pointer_t<decltype(value)>;
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) *value -= earlier;
  };
#define RINGLOADER_SUBTRACT_STAT(name) subtract(before.name, &window.name);
  RINGLOADER_LOADER_STATS_FIELDS(RINGLOADER_SUBTRACT_STAT)
#undef RINGLOADER_SUBTRACT_STAT
  return window;
}

namespace stats_internal {

// Converts to any field type, so T{AnyField{}...} compiles for up to as many arguments as the
// aggregate T has fields.
struct AnyField {
  template <typename T>
  operator T() const;  // declared only: used in unevaluated checks
};

template <typename T, typename... Fields>
constexpr size_t FieldCount(Fields... fields) {
  if constexpr (requires { T{fields..., AnyField{}}; }) {
    return FieldCount<T>(fields..., AnyField{});
  } else {
    return sizeof...(Fields);
  }
}

#define RINGLOADER_STAT_NAME(name) #name,
inline constexpr const char* kStatNames[] = {RINGLOADER_LOADER_STATS_FIELDS(RINGLOADER_STAT_NAME)};
#undef RINGLOADER_STAT_NAME

static_assert(FieldCount<LoaderStats>() == std::size(kStatNames),
              "LoaderStats has a field missing from RINGLOADER_LOADER_STATS_FIELDS");

}  // namespace stats_internal
}  // namespace ringloader
