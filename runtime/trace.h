// A Chrome-trace recorder: named spans of compute and communication per
// rank, written as the JSON that chrome://tracing and Perfetto open. With
// SPMD_TRACE=dir every process writes dir/trace_rank<R>.json (R from RANK, or
// trace_pid<P>.json without one) at exit or at trace_flush(); each rank is a
// "process" of its own, so loading several files shows the ranks stacked on
// one timeline (wall-clock microseconds).
//
//   {
//     TraceSpan span("all_reduce", "comm");   // recorded when it ends
//     ...
//   }
//
// Recording costs a clock read and a lock per span when on, one branch when
// off. Not here: counters, flow arrows, a ring buffer (the events of a long
// run are all kept until flushed).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

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

// One complete event: `name` ran from start_us for dur_us (wall-clock
// microseconds since the epoch) on the calling thread.
void trace_record(std::string_view name, std::string_view category, int64_t start_us,
                  int64_t dur_us);
int64_t trace_now_us();

// A span from construction to destruction. Cheap when tracing is off.
class TraceSpan {
 public:
  explicit TraceSpan(std::string_view name, std::string_view category = "compute");
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  std::string name_;
  std::string category_;
  int64_t start_us_ = -1;  // -1: tracing was off at the start
};

}  // namespace spmd
