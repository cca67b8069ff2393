// Multi-process test support (see harness.h).
#include "harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "parallel/comm/init.h"
#include "runtime/spawn.h"
#include "tensor/cuda_api.h"
#include "tensor/factory.h"

namespace spmd::dist::testing {
namespace {
std::string g_report_path;  // set in each child of run_processes()
}  // namespace

void run_world(int world_size, const std::function<void(ProcessGroup& world)>& fn,
               std::chrono::milliseconds timeout, CommBackend backend) {
  SpawnOptions options;
  options.timeout = timeout * 3;
  options.grace = std::chrono::seconds(1);
  spawn(
      world_size,
      [&](int) {
        InitOptions init;
        init.init_method = "env://";
        init.timeout = timeout;
        init.backend = backend;
        std::shared_ptr<ProcessGroup> world = init_process_group(init);
        fn(*world);
        destroy_process_group(world);
      },
      options);
}

bool have_gpu() {
  static const bool present = [] {
    auto outcome = run_processes(
        1, [](int, const std::string&) { report(cuda::is_available() ? "yes" : "no"); });
    return outcome[0].report == "yes";
  }();
  return present;
}

bool RankOutcome::exited_ok() const {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}
bool RankOutcome::killed() const { return WIFSIGNALED(wait_status); }

void report(const std::string& text) { std::ofstream(g_report_path, std::ios::trunc) << text; }

void report_outcome(const std::function<void()>& op) {
  const auto start = std::chrono::steady_clock::now();
  auto ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start)
        .count();
  };
  try {
    op();
    report("ok");
  } catch (const TimeoutError& e) {
    report(str_cat("timeout|", ms(), "|", e.what()));
  } catch (const InvalidArgument& e) {
    report(str_cat("invalid|", ms(), "|", e.what()));
  } catch (const CommError& e) {
    report(str_cat("comm|", ms(), "|", e.what()));
  }
}

long reported_ms(const std::string& report) {
  const size_t a = report.find('|');
  return std::stol(report.substr(a + 1, report.find('|', a + 1) - a - 1));
}

std::vector<RankOutcome> run_processes(int world_size,
                                       const std::function<void(int, const std::string&)>& fn,
                                       std::chrono::milliseconds limit) {
  char dir_template[] = "/tmp/spmd_comm_test_XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const std::string store = dir + "/store";
  std::vector<pid_t> pids;
  std::cout.flush();
  std::cerr.flush();
  for (int r = 0; r < world_size; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      g_report_path = dir + "/report." + std::to_string(r);
      int code = 0;
      try {
        fn(r, store);
      } catch (const std::exception& e) {
        report(str_cat("uncaught: ", e.what()));
        code = 1;
      }
      std::_Exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<RankOutcome> outcomes(world_size);
  std::vector<bool> done(world_size, false);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int left = world_size; left > 0;) {
    for (int r = 0; r < world_size; ++r) {
      if (!done[r] && ::waitpid(pids[r], &outcomes[r].wait_status, WNOHANG) == pids[r]) {
        done[r] = true;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (!done[r]) ::kill(pids[r], SIGKILL);
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < world_size; ++r) {
    std::ifstream in(dir + "/report." + std::to_string(r));
    std::stringstream text;
    text << in.rdbuf();
    outcomes[r].report = text.str();
  }
  std::filesystem::remove_all(dir);
  return outcomes;
}

Tensor cpu_tensor(int64_t numel, DType dtype) { return ops::empty(Shape{numel}, {dtype}); }

Tensor floats(int64_t n, float value) {
  Tensor t = cpu_tensor(n, DType::kF32);
  std::fill_n(static_cast<float*>(t.raw_data()), n, value);
  return t;
}

std::shared_ptr<ProcessGroup> join(int rank, int world, const std::string& store,
                                   std::chrono::milliseconds timeout) {
  InitOptions init;
  init.init_method = "file://" + store;
  init.rank = rank;
  init.world_size = world;
  init.timeout = timeout;
  return init_process_group(init);
}

}  // namespace spmd::dist::testing
