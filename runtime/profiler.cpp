// The op profiler: a stack of open scopes per thread (for self times) and one
// table of per-op sums behind a mutex, filled as scopes close. SPMD_PROFILE=1
// starts it before main and prints the table to stderr at exit.
#include "runtime/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "runtime/logging.h"
#include "runtime/trace.h"

namespace spmd {
namespace profiler {
namespace detail {
std::atomic<bool> g_on{false};
}

namespace {

struct Table {
  std::mutex mu;
  std::map<std::pair<std::string, int>, OpStats> rows;  // by (name, phase)
};

// Never destroyed, so scopes closing in static destructors still find it.
Table& table() {
  static Table* t = new Table;
  return *t;
}

thread_local ProfileScope* t_innermost = nullptr;
thread_local ProfilePhase t_phase = ProfilePhase::kForward;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void print_at_exit() {
  std::string text = report();
  std::fprintf(stderr, "%s", text.c_str());
}

// SPMD_PROFILE=1 (or any value but 0 and empty) starts the profiler before main.
const bool g_from_environment = [] {
  const char* v = std::getenv("SPMD_PROFILE");
  if (!v || !*v || std::string_view(v) == "0") return false;
  detail::g_on.store(true);
  std::atexit(print_at_exit);
  return true;
}();

std::string format_row(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

}  // namespace

void start() { detail::g_on.store(true); }
void stop() { detail::g_on.store(false); }

void reset() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.rows.clear();
}

std::vector<OpStats> key_averages() {
  std::vector<OpStats> out;
  {
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    for (const auto& [key, row] : t.rows) out.push_back(row);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const OpStats& a, const OpStats& b) { return a.self_ns > b.self_ns; });
  return out;
}

std::string report(int max_rows) {
  const std::vector<OpStats> rows = key_averages();
  int64_t self_sum = 0;
  for (const OpStats& r : rows) self_sum += r.self_ns;
  const double all = self_sum > 0 ? double(self_sum) : 1.0;
  std::string s = format_row("%-40s %-9s %7s %10s %10s %10s %8s %9s %8s\n", "Name", "Phase",
                             "Self %", "Self ms", "Total ms", "Avg us", "Calls", "MB", "GFLOP/s");
  s += std::string(117, '-') + "\n";
  int shown = 0;
  int64_t rest_ns = 0, rest_calls = 0;
  for (const OpStats& r : rows) {
    if (shown++ >= max_rows) {
      rest_ns += r.self_ns;
      rest_calls += r.calls;
      continue;
    }
    const double gflops = r.flops > 0 && r.total_ns > 0 ? r.flops / double(r.total_ns) : 0;
    s += format_row("%-40.40s %-9s %6.1f%% %10.3f %10.3f %10.2f %8lld %9.2f %8.2f\n",
                    r.name.c_str(), phase_name(r.phase), 100.0 * double(r.self_ns) / all,
                    r.self_ns / 1e6, r.total_ns / 1e6, r.total_ns / 1e3 / double(r.calls),
                    static_cast<long long>(r.calls), r.bytes / 1e6, gflops);
  }
  if (rest_calls > 0)
    s += format_row("%-40s %-9s %6.1f%% %10.3f %10s %10s %8lld\n",
                    str_cat("(", rows.size() - size_t(max_rows), " more)").c_str(), "",
                    100.0 * double(rest_ns) / all, rest_ns / 1e6, "", "",
                    static_cast<long long>(rest_calls));
  s += format_row("Self time total: %.3f ms\n", self_sum / 1e6);
  return s;
}

}  // namespace profiler

const char* phase_name(ProfilePhase p) {
  switch (p) {
    case ProfilePhase::kForward:
      return "forward";
    case ProfilePhase::kBackward:
      return "backward";
    case ProfilePhase::kOptimizer:
      return "optimizer";
  }
  return "?";
}

void ProfileScope::open(std::string_view name) {
  open_ = true;
  name_ = name;
  parent_ = profiler::t_innermost;
  profiler::t_innermost = this;
  if (trace_enabled()) trace_start_us_ = trace_now_us();
  start_ns_ = profiler::now_ns();
}

void ProfileScope::close() {
  const int64_t total = profiler::now_ns() - start_ns_;
  profiler::t_innermost = parent_;
  if (parent_) parent_->child_ns_ += total;
  const ProfilePhase phase = profiler::t_phase;
  if (trace_start_us_ >= 0) {
    static constexpr const char* kCategory[] = {"op/forward", "op/backward", "op/optimizer"};
    trace_record(name_, kCategory[int(phase)], trace_start_us_, trace_now_us() - trace_start_us_);
  }
  profiler::Table& t = profiler::table();
  std::lock_guard<std::mutex> lock(t.mu);
  profiler::OpStats& row = t.rows[{std::string(name_), int(phase)}];
  if (row.calls == 0) {
    row.name = name_;
    row.phase = phase;
  }
  row.calls += 1;
  row.total_ns += total;
  row.self_ns += std::max<int64_t>(0, total - child_ns_);
  row.bytes += bytes_;
  row.flops += flops_;
}

ProfilePhaseGuard::ProfilePhaseGuard(ProfilePhase phase) : saved_(profiler::t_phase) {
  profiler::t_phase = phase;
  if (profiler::enabled() && trace_enabled()) trace_start_us_ = trace_now_us();
}

ProfilePhaseGuard::~ProfilePhaseGuard() {
  if (trace_start_us_ >= 0)
    trace_record(phase_name(profiler::t_phase), "phase", trace_start_us_,
                 trace_now_us() - trace_start_us_);
  profiler::t_phase = saved_;
}

}  // namespace spmd
