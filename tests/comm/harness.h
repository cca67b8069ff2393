// Test support for real multi-rank runs: every rank is a process (forked by
// runtime's spawn(), or by run_processes() when a rank is meant to die), and
// the ranks meet through a real store and real loopback sockets.
#pragma once

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"
#include "tensor/tensor.h"
#include "tests/scoped_env.h"

namespace spmd::dist::testing {

using spmd::testing::ScopedEnv;  // tests/scoped_env.h

// Runs fn(world) on `world_size` processes started by spawn(); each joins
// with init_process_group(env://, `backend`: TCP unless a GPU test asks for
// NCCL) and leaves with destroy_process_group. A rank fails by throwing (see
// expect()); spawn() then stops the others and this throws, naming the rank
// and its message.
void run_world(int world_size, const std::function<void(ProcessGroup& world)>& fn,
               std::chrono::milliseconds timeout = std::chrono::seconds(20),
               CommBackend backend = CommBackend::kTcp);

// What run_processes() saw of one rank.
struct RankOutcome {
  int wait_status = 0;     // waitpid()'s
  std::string report;      // what the rank wrote with report()
  bool exited_ok() const;  // exit code 0
  bool killed() const;     // died by a signal
};

// Runs fn(rank, store_path) on `world_size` forked processes that meet
// through a FileStore at store_path (file:// init, which survives any rank's
// death); unlike spawn(), a rank's death does not stop the others. Each rank
// may write one line of report with report(). Kills what is still running
// after `limit`.
std::vector<RankOutcome> run_processes(int world_size,
                                       const std::function<void(int rank, const std::string&)>& fn,
                                       std::chrono::milliseconds limit = std::chrono::seconds(20));
// Records text for the parent of run_processes() (the last call wins).
void report(const std::string& text);
// Runs `op` in a rank of run_processes() and reports "<error type>|<ms it
// took>|<message>", the type timeout, invalid or comm (or "ok").
void report_outcome(const std::function<void()>& op);
// The milliseconds of a report_outcome() report.
long reported_ms(const std::string& report);
// Joins rank `rank` of `world` through run_processes()'s FileStore at
// `store` (file:// init) with the group timeout `timeout`.
std::shared_ptr<ProcessGroup> join(int rank, int world, const std::string& store,
                                   std::chrono::milliseconds timeout);

// Whether a CUDA GPU is present, asked in a child process: the test process
// itself must not initialize CUDA, or the ranks it forks could not use it.
bool have_gpu();

// A contiguous CPU tensor of the given size and dtype (uninitialized).
Tensor cpu_tensor(int64_t numel, DType dtype);
// n f32 values, each `value`.
Tensor floats(int64_t n, float value = 1.f);

// Throws spmd::Error with the message unless cond holds: the way a rank
// fails a check (spawn() reports the rank and the message).
template <class... Args>
void expect(bool cond, Args&&... args) {
  if (!cond) throw Error(str_cat(std::forward<Args>(args)...));
}

}  // namespace spmd::dist::testing
