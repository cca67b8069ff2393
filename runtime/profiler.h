// The op profiler: where a training step's time goes, op by op, as
// torch.profiler's key_averages().table() shows it. Every op the tensor
// backends run (and every autograd node the engine runs) opens a
// ProfileScope; the profiler keeps, per op name and phase (forward, backward,
// optimizer), the number of calls, the total time, the self time (total less
// the scopes opened inside it) and the bytes moved and FLOPs done where the
// op knows them.
//
//   SPMD_PROFILE=1 ./spmd-train ...     // the table on stderr at exit
//
//   profiler::start();
//   ... steps ...
//   profiler::stop();
//   std::cout << profiler::report();     // sorted by self time
//
// With SPMD_TRACE on as well, every op is also a span of the Chrome trace
// (category "op/forward", "op/backward" or "op/optimizer"), and each phase a
// span of category "phase" around them.
//
// Cost: one relaxed atomic load and a branch per op when off; a clock read
// at each end and a lock at the close of each scope when on. Self times are
// of the thread that opened the scope (the OpenMP workers a BLAS call uses
// are inside its caller's scope). Not here: memory profiling, call stacks,
// GPU kernel times (a CUDA op's scope measures its launch).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spmd {

// What part of a training step an op ran in. An op is in the phase of the
// innermost ProfilePhase open on its thread; kForward when none is.
enum class ProfilePhase { kForward, kBackward, kOptimizer };
const char* phase_name(ProfilePhase p);  // "forward", "backward", "optimizer"

namespace profiler {

namespace detail {
extern std::atomic<bool> g_on;
}

// Whether ops are being recorded (SPMD_PROFILE=1 at start-up, or start()).
inline bool enabled() { return detail::g_on.load(std::memory_order_relaxed); }

// Records from now on (keeping what was recorded before; reset() clears).
void start();
// Stops recording; what was recorded stays for report() and key_averages().
void stop();
// Forgets every recorded op.
void reset();

// One row of the table: every call of one op name in one phase.
struct OpStats {
  std::string name;
  ProfilePhase phase = ProfilePhase::kForward;
  int64_t calls = 0;
  int64_t self_ns = 0;   // total less the time of scopes opened inside it
  int64_t total_ns = 0;  // from open to close, summed over the calls
  double bytes = 0;      // read and written, where the op knows; 0 otherwise
  double flops = 0;      // floating-point operations, where the op knows; 0 otherwise
};

// Every row recorded so far, the largest self time first.
std::vector<OpStats> key_averages();

// The rows as a table (at most max_rows of them, then one line for the rest),
// with a header and a total line: name, phase, self %, self ms, total ms,
// average us per call, calls, MB, GFLOP/s.
std::string report(int max_rows = 30);

}  // namespace profiler

// Times one op on the calling thread from construction to destruction.
// Scopes nest (an op that runs other ops); `name` must outlive the scope
// (a string literal, or a string the caller keeps).
class ProfileScope {
 public:
  explicit ProfileScope(std::string_view name) {
    if (profiler::enabled()) open(name);
  }
  ~ProfileScope() {
    if (open_) close();
  }
  // Adds to the work the op did (bytes read and written, FLOPs).
  void add_work(double bytes, double flops) {
    bytes_ += bytes;
    flops_ += flops;
  }
  bool active() const { return open_; }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  void open(std::string_view name);
  void close();

  bool open_ = false;
  std::string_view name_;
  int64_t start_ns_ = 0;
  int64_t child_ns_ = 0;  // the nested scopes' total time
  double bytes_ = 0, flops_ = 0;
  ProfileScope* parent_ = nullptr;
  int64_t trace_start_us_ = -1;
};

// Marks the ops of the calling thread as being in `phase` until destroyed
// (the autograd engine opens kBackward, the optimizers kOptimizer).
class ProfilePhaseGuard {
 public:
  explicit ProfilePhaseGuard(ProfilePhase phase);
  ~ProfilePhaseGuard();
  ProfilePhaseGuard(const ProfilePhaseGuard&) = delete;
  ProfilePhaseGuard& operator=(const ProfilePhaseGuard&) = delete;

 private:
  ProfilePhase saved_;
  int64_t trace_start_us_ = -1;
};

}  // namespace spmd
