// A Chrome-trace recorder: named spans of compute and communication per
// rank, written as the JSON that chrome://tracing and Perfetto open. With
// SPMD_TRACE=dir every process writes dir/trace_rank<R>.json (R from RANK, or
// trace_pid<P>.json without one) at exit, when stopped by SIGTERM (where the
// program has no SIGTERM handler of its own), or at trace_flush(); each rank is a
// "process" of its own, so several files laid together (spmdrun merges a
// job's into dir/trace.json) show the ranks stacked on one timeline
// (wall-clock microseconds since the epoch, the same clock on every rank of
// a host).
//
//   {
//     TraceSpan span("forward");   // recorded when it ends
//     ...
//   }
//
// Two kinds of event: a span on the calling thread (Chrome's complete
// event, "X"), which nests with the thread's other spans; and an interval
// that overlaps them (an async pair, "b"/"e"), as a collective does from its
// issue to its completion while the caller computes: Perfetto draws those
// on rows of their own under the rank. Either may carry args, named values
// shown in Perfetto's details pane ({"op": "all_reduce", "bytes": 4096}).
//
// Recording costs a clock read and a lock per span when on, one branch when
// off. Not here: counters, flow arrows, a ring buffer (the events of a long
// run are all kept until flushed).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace spmd {

// Whether spans are being recorded: SPMD_TRACE named a directory (read at the
// first call), or trace_start() was called.
bool trace_enabled();
// Records from now on into dir/trace_rank<rank>.json, creating dir.
void trace_start(const std::string& dir, int rank);
// In a child after fork(): drops the parent's events and records as `rank`
// into the same directory. Does nothing when tracing is off.
void trace_start_child(int rank);
// Writes the file now (events so far; it is rewritten at each flush and at exit).
void trace_flush();
// The file the recorder writes; empty when tracing is off.
std::string trace_path();

// An event's args: names and integer or text values, in order.
using TraceArgs = std::vector<std::pair<std::string, std::variant<int64_t, std::string>>>;

// One complete event: `name` ran from start_us for dur_us (wall-clock
// microseconds since the epoch) on the calling thread.
void trace_record(std::string_view name, std::string_view category, int64_t start_us,
                  int64_t dur_us, TraceArgs args = {});
// An interval that may overlap the thread's spans (an async begin/end pair
// with an id of its own): `name` was in flight from start_us for dur_us.
void trace_record_async(std::string_view name, std::string_view category, int64_t start_us,
                        int64_t dur_us, TraceArgs args = {});
int64_t trace_now_us();

// A span from construction to destruction. Cheap when tracing is off.
class TraceSpan {
 public:
  explicit TraceSpan(std::string_view name, std::string_view category = "compute");
  ~TraceSpan();
  // Ends the span now (the destructor then records nothing).
  void end();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  std::string name_;
  std::string category_;
  int64_t start_us_ = -1;  // -1: tracing was off at the start
};

}  // namespace spmd
