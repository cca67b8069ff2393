// spmd-bench: the nccl-tests of spmd. Run under spmdrun, every rank joins the
// group, sweeps the sizes of one collective (or all of them), and rank 0
// prints nccl-tests' table: size, count, type, redop, root, time, algbw,
// busbw, #wrong, then the average busbw and the total of wrong values.
//
//   spmdrun --standalone --nproc-per-node 4 spmd-bench all_reduce -b 8 -e 256M -f 2
//   spmdrun --standalone --nproc-per-node 3 spmd-bench all -b 8 -e 64K -f 8 -d all -o all
//   spmd-bench --limits
//
// Exit codes: 0 when every checked value was right; 1 when a value was wrong
// or a collective failed; 2 for a usage error.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "bench/collectives/limits.h"
#include "bench/collectives/options.h"
#include "bench/collectives/report.h"
#include "bench/collectives/sweep.h"
#include "parallel/comm/init.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "tensor/cuda_api.h"

using namespace spmd;
using namespace spmd::bench;

namespace {

std::string title(const BenchOptions& o, int world_size) {
  std::string ops;
  for (OpKind op : o.ops) {
    if (!ops.empty()) ops += ",";
    ops += op_kind_name(op);
  }
  return str_cat("spmd-bench ", ops, ": ", world_size, " ranks, backend ",
                 dist::backend_name(o.backend), ", device ", o.cuda ? "cuda" : "cpu", ", -b ",
                 o.min_bytes, " -e ", o.max_bytes, " -f ", o.step_factor, " -n ", o.iters, " -w ",
                 o.warmup, " -c ", o.checks);
}

// The group's tensors: the CPU, or the GPU of this rank's local rank.
Device bench_device(const BenchOptions& o, int local_rank) {
  if (!o.cuda) return Device::cpu();
  const int n = cuda::device_count();
  SPMD_CHECK(n > 0, "spmd-bench --device cuda: no CUDA device is visible");
  return Device::cuda(local_rank % n);
}

int run(const BenchOptions& o) {
  const LaunchEnv env = launch_env_from_environment();
  const Device device = bench_device(o, env.local_rank);
  dist::InitOptions init;
  init.backend = o.backend;
  if (device.is_cuda()) init.device = device.index;
  auto group = dist::init_process_group(init);
  const bool printer = group->rank() == 0;
  std::unique_ptr<Report> report;
  if (printer) {
    std::string impl = "spmd-";
    impl += dist::backend_name(o.backend);
    report = std::make_unique<Report>(stdout, o.json_path, impl, group->size());
    report->header(title(o, group->size()));
  }
  int64_t wrong = 0;
  run_sweep(*group, o, device, [&](const Row& row) {
    wrong += row.wrong;
    if (report) report->row(row);
  });
  if (report) report->footer();
  dist::destroy_process_group(group);
  if (wrong > 0 && printer) {
    std::fprintf(stderr, "spmd-bench: %lld values were wrong\n", static_cast<long long>(wrong));
  }
  return wrong > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int code = 0;
  const auto options = parse_options(argc, argv, &code);
  if (!options) return code;
  try {
    if (options->limits) {
      // Once per machine: alone, or under spmdrun on rank 0 only.
      const char* rank = std::getenv("RANK");
      return (!rank || std::string(rank) == "0") ? print_limits(stdout) : 0;
    }
    return run(*options);
  } catch (const std::exception& e) {
    std::cerr << "spmd-bench: " << e.what() << "\n";
    return 1;
  }
}
