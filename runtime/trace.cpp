// The trace recorder: a process-wide list of events behind a mutex, written
// through nlohmann-json in Chrome's Trace Event Format (JSON object form).
// A span is an "X" (complete) event: name, category, start, duration, the
// rank as pid, a small per-thread number as tid; an async interval is a "b"
// and an "e" event sharing an id. A process_name metadata event names the
// rank's row.
#include "runtime/trace.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace spmd {
namespace {

struct Event {
  std::string name, category;
  int64_t start_us, dur_us;
  int tid;
  uint64_t async_id;  // 0: a span on thread tid; else an async interval
  TraceArgs args;
};

struct Recorder {
  std::mutex mu;
  bool on = false;
  std::string dir;
  int rank = -1;  // -1: named by pid
  std::vector<Event> events;
  uint64_t next_async_id = 1;
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

// A rank stopped with SIGTERM (spmdrun stopping the others when one fails)
// still writes its file: the handler only writes a byte to a pipe, which is
// all a signal handler may safely do; a thread waiting on the pipe writes
// the file in ordinary thread context, then lets the signal take its
// default course, so the process still ends as killed by SIGTERM. Installed
// only where SIGTERM has its default action (a program's own handler is left
// alone). One killed by SIGKILL writes nothing.
int g_term_pipe[2] = {-1, -1};

void on_sigterm(int) {
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(g_term_pipe[1], &byte, 1);
}

void flush_on_sigterm() {
  struct sigaction old {};
  if (::sigaction(SIGTERM, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;
  for (int& fd : g_term_pipe) {  // a forked child's copy of its parent's pipe
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  if (::pipe2(g_term_pipe, O_CLOEXEC) != 0) return;
  std::thread([] {
    char byte;
    while (::read(g_term_pipe[0], &byte, 1) < 0 && errno == EINTR) {
    }
    trace_flush();
    ::signal(SIGTERM, SIG_DFL);
    ::raise(SIGTERM);
  }).detach();
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
}

void start_locked(Recorder& r, const std::string& dir, int rank) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) SPMD_LOG_WARN("trace: cannot create directory ", dir, ": ", ec.message());
  static bool registered = false;
  if (!registered) {
    std::atexit(trace_flush);
    flush_on_sigterm();
    // A forked child has the handler but not the thread: default again
    // there, until trace_start_child() installs its own.
    ::pthread_atfork(nullptr, nullptr, [] { ::signal(SIGTERM, SIG_DFL); });
  }
  registered = true;
  r.dir = dir;
  r.rank = rank;
  r.on = true;
  g_on.store(true);
}

void read_environment() {
  const char* dir = std::getenv("SPMD_TRACE");
  if (!dir || !*dir) return;
  const std::optional<int> rank = launcher_rank();  // RANK, or mpirun's or srun's
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.on) start_locked(r, dir, rank.value_or(-1));
}

int thread_number() {
  static std::atomic<int> next{0};
  thread_local int mine = next++;
  return mine;
}

nlohmann::json args_json(const TraceArgs& args) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : args) {
    std::visit([&out, &key](const auto& v) { out[key] = v; }, value);
  }
  return out;
}

// Chrome's events for one recorded event: one "X", or a "b" and an "e".
void append_events(nlohmann::json& out, const Event& e, int pid) {
  nlohmann::json first = {
      {"name", e.name}, {"cat", e.category}, {"ts", e.start_us}, {"pid", pid}, {"tid", e.tid}};
  if (!e.args.empty()) first["args"] = args_json(e.args);
  if (e.async_id == 0) {
    first["ph"] = "X";
    first["dur"] = e.dur_us;
    out.push_back(std::move(first));
    return;
  }
  // The id is unique in the job, not only in this process (viewers match a
  // pair by category and id across a merged file): the rank in its high bits.
  char id[32];
  std::snprintf(id, sizeof id, "0x%llx",
                static_cast<unsigned long long>((uint64_t(uint32_t(pid)) << 32) | e.async_id));
  first["ph"] = "b";
  first["id"] = id;
  nlohmann::json end = {
      {"name", e.name}, {"cat", e.category}, {"ph", "e"}, {"ts", e.start_us + e.dur_us},
      {"pid", pid},     {"tid", e.tid},      {"id", id}};
  out.push_back(std::move(first));
  out.push_back(std::move(end));
}

void write_events(std::ostream& os, const Recorder& r) {
  const int pid = r.rank >= 0 ? r.rank : static_cast<int>(::getpid());
  nlohmann::json events = nlohmann::json::array();
  events.push_back(
      {{"name", "process_name"},
       {"ph", "M"},
       {"pid", pid},
       {"args", {{"name", r.rank >= 0 ? str_cat("rank ", r.rank) : str_cat("pid ", pid)}}}});
  for (const Event& e : r.events) append_events(events, e, pid);
  const nlohmann::json doc = {{"displayTimeUnit", "ms"}, {"traceEvents", std::move(events)}};
  // Names are the program's own text: a byte that is not UTF-8 becomes U+FFFD
  // instead of failing the dump.
  os << doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
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
  flush_on_sigterm();
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
                  int64_t dur_us, TraceArgs args) {
  if (!trace_enabled()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.events.push_back({std::string(name), std::string(category), start_us, dur_us, thread_number(),
                      0, std::move(args)});
}

void trace_record_async(std::string_view name, std::string_view category, int64_t start_us,
                        int64_t dur_us, TraceArgs args) {
  if (!trace_enabled()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.events.push_back({std::string(name), std::string(category), start_us, dur_us, thread_number(),
                      r.next_async_id++, std::move(args)});
}

TraceSpan::TraceSpan(std::string_view name, std::string_view category) {
  if (!trace_enabled()) return;
  name_ = name;
  category_ = category;
  start_us_ = trace_now_us();
}

TraceSpan::~TraceSpan() { end(); }

void TraceSpan::end() {
  if (start_us_ < 0) return;
  trace_record(name_, category_, start_us_, trace_now_us() - start_us_);
  start_us_ = -1;
}

}  // namespace spmd
