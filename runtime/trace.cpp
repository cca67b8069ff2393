// The trace recorder: a process-wide list of events behind a mutex, written
// in Chrome's Trace Event Format (JSON object form). Events are "X" (complete) events: name,
// category, start, duration, the rank as pid, a small per-thread number as tid.
#include "runtime/trace.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace spmd {
namespace {

struct Event {
  std::string name, category;
  int64_t start_us, dur_us;
  int tid;
};

struct Recorder {
  std::mutex mu;
  bool on = false;
  std::string dir;
  int rank = -1;  // -1: named by pid
  std::vector<Event> events;
};

// Never destroyed, so spans in static destructors and atexit still find it.
Recorder& recorder() {
  static Recorder* r = new Recorder;
  return *r;
}

std::atomic<bool> g_on{false};
std::once_flag g_env_once;

std::string file_name(const Recorder& r) {
  std::string leaf = r.rank >= 0 ? str_cat("trace_rank", r.rank, ".json")
                                 : str_cat("trace_pid", ::getpid(), ".json");
  return (std::filesystem::path(r.dir) / leaf).string();
}

void start_locked(Recorder& r, const std::string& dir, int rank) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) SPMD_LOG_WARN("trace: cannot create directory ", dir, ": ", ec.message());
  static bool registered = false;
  if (!registered) std::atexit(trace_flush);
  registered = true;
  r.dir = dir;
  r.rank = rank;
  r.on = true;
  g_on.store(true);
}

void read_environment() {
  const char* dir = std::getenv("SPMD_TRACE");
  if (!dir || !*dir) return;
  const char* rank = std::getenv("RANK");
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.on) start_locked(r, dir, rank && *rank ? std::atoi(rank) : -1);
}

int thread_number() {
  static std::atomic<int> next{0};
  thread_local int mine = next++;
  return mine;
}

void write_json_string(std::ostream& os, std::string_view s) {
  os << '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      os << '\\' << c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      os << buf;
    } else {
      os << c;
    }
  }
  os << '"';
}

void write_events(std::ostream& os, const Recorder& r) {
  int pid = r.rank >= 0 ? r.rank : static_cast<int>(::getpid());
  os << "{\"traceEvents\":[\n";
  os << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << pid << ",\"args\":{\"name\":";
  write_json_string(os, r.rank >= 0 ? str_cat("rank ", r.rank) : str_cat("pid ", pid));
  os << "}}";
  for (const Event& e : r.events) {
    os << ",\n{\"name\":";
    write_json_string(os, e.name);
    os << ",\"cat\":";
    write_json_string(os, e.category);
    os << ",\"ph\":\"X\",\"ts\":" << e.start_us << ",\"dur\":" << e.dur_us << ",\"pid\":" << pid
       << ",\"tid\":" << e.tid << "}";
  }
  os << "\n],\"displayTimeUnit\":\"ms\"}\n";
}

}  // namespace

bool trace_enabled() {
  std::call_once(g_env_once, read_environment);
  return g_on.load(std::memory_order_relaxed);
}

void trace_start(const std::string& dir, int rank) {
  std::call_once(g_env_once, [] {});  // an explicit start wins over SPMD_TRACE
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  start_locked(r, dir, rank);
}

void trace_start_child(int rank) {
  if (!trace_enabled()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.events.clear();
  r.rank = rank;
}

std::string trace_path() {
  if (!trace_enabled()) return {};
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  return file_name(r);
}

void trace_flush() {
  if (!g_on.load()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string path = file_name(r);
  std::string tmp = path + ".tmp";
  {
    std::ofstream os(tmp, std::ios::trunc);
    write_events(os, r);
    if (!os) {
      SPMD_LOG_WARN("trace: cannot write ", tmp);
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);  // readers never see half a file
  if (ec) SPMD_LOG_WARN("trace: cannot rename ", tmp, " to ", path, ": ", ec.message());
}

int64_t trace_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void trace_record(std::string_view name, std::string_view category, int64_t start_us,
                  int64_t dur_us) {
  if (!trace_enabled()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.events.push_back({std::string(name), std::string(category), start_us, dur_us, thread_number()});
}

TraceSpan::TraceSpan(std::string_view name, std::string_view category) {
  if (!trace_enabled()) return;
  name_ = name;
  category_ = category;
  start_us_ = trace_now_us();
}

TraceSpan::~TraceSpan() {
  if (start_us_ < 0) return;
  trace_record(name_, category_, start_us_, trace_now_us() - start_us_);
}

}  // namespace spmd
