// spmd-bench: the nccl-tests of spmd. Run under spmdrun (or mpirun, srun),
// every rank joins the group, sweeps the sizes of one collective (or all of
// them), and rank 0 prints nccl-tests' output: the run's parameters and
// devices (with each rank's links: which peers it reaches over shared
// memory, which over TCP, and the group's algorithms: hierarchical across
// hosts or flat), then per size the out-of-place and in-place
// column sets (time, algbw, busbw, #wrong), then the failed checks and the
// average busbw.
//
//   spmdrun --standalone --nproc-per-node 4 spmd-bench all_reduce -b 8 -e 256M -f 2
//   spmdrun --standalone --nproc-per-node 3 spmd-bench all -b 8 -e 64K -f 8 -d all -o all
//   spmd-bench --limits
//
// Exit codes: 0 when every checked value was right; 1 when a value was wrong
// or a collective failed; 2 for a usage error.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>

#include "bench/collectives/json_document.h"
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

std::string op_list(const BenchOptions& o) {
  std::string ops;
  for (OpKind op : o.ops) {
    if (!ops.empty()) ops += ",";
    ops += op_kind_name(op);
  }
  return ops;
}

// The group's tensors: the CPU, or the GPU of this rank's local rank.
Device bench_device(const BenchOptions& o, int local_rank) {
  if (!o.cuda) return Device::cpu();
  const int n = cuda::device_count();
  SPMD_CHECK(n > 0, "spmd-bench --device cuda: no CUDA device is visible");
  return Device::cuda(local_rank % n);
}

// Every rank's pid, host, device and links to its peers, on rank 0 (through
// the group's store).
std::vector<RankInfo> rank_infos(dist::ProcessGroup& group, Device device) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string device_name = device.is_cuda() ? str_cat("cuda:", device.index) : "cpu";
  Store& store = *group.store_ptr();
  const std::string key = "spmd-bench/" + group.name() + "/rank/";
  store.set(key + std::to_string(group.rank()), str_cat(::getpid(), " ", host, " ", device_name,
                                                        " ", links_summary(group.peer_links())));
  std::vector<RankInfo> infos;
  if (group.rank() != 0) return infos;
  for (int r = 0; r < group.size(); ++r) {
    std::istringstream in(store.get_string(key + std::to_string(r)));
    RankInfo info;
    info.rank = r;
    in >> info.pid >> info.hostname >> info.device >> std::ws;
    std::getline(in, info.links);  // the rest of the line: "shm:1 tcp:2-3"
    infos.push_back(info);
  }
  return infos;
}

// The lines above the table, in nccl-tests' words where spmd has the same
// parameter.
std::vector<std::string> preamble(const BenchOptions& o, const std::string& impl,
                                  const std::vector<RankInfo>& ranks,
                                  const std::string& algorithm) {
  std::vector<std::string> lines = {
      str_cat("spmd-bench: impl ", impl, ", device ", o.cuda ? "cuda" : "cpu", ", ", ranks.size(),
              " ranks"),
      str_cat("Collective test starting: spmd-bench ", op_list(o)),
      str_cat(
          "minBytes ", o.min_bytes, " maxBytes ", o.max_bytes, " step: ",
          o.step_factor > 1 ? str_cat(o.step_factor, "(factor)") : str_cat(o.step_bytes, "(bytes)"),
          " warmup iters: ", o.warmup, " iters: ", o.iters, " validation: ", o.checks,
          " average: ", o.average, " timeout: ", o.timeout_s)};
  if (o.blocking == 1) {
    lines.push_back("Blocking Enabled: wait for completion and barrier after each collective");
  }
  if (o.blocking == 2) {
    lines.push_back("Blocking Enabled: wait for completion after each collective (no barrier)");
  }
  if (o.per_iter) {
    lines.push_back("Per-Iteration Report: completion times; i_* uses max over process rows");
  }
  lines.push_back("");
  lines.push_back("Using devices");
  for (const RankInfo& r : ranks) {
    char line[512];
    std::snprintf(line, sizeof line, " Rank %2d Group %2d Pid %6d on %10s device %s", r.rank, 0,
                  r.pid, r.hostname.c_str(), r.device.c_str());
    // After nccl-tests' fields: how this rank reaches the others (shm, tcp).
    lines.push_back(r.links.empty() ? std::string(line) : str_cat(line, " links ", r.links));
  }
  // Which algorithms the group's collectives take (hierarchical or flat).
  if (!algorithm.empty()) lines.push_back(str_cat("Algorithm ", algorithm));
  return lines;
}

int run(const BenchOptions& o) {
  const LaunchEnv env = launch_env_from_environment();
  const Device device = bench_device(o, env.local_rank);
  dist::InitOptions init;
  init.backend = o.backend;
  if (device.is_cuda()) init.device = device.index;
  if (o.timeout_s > 0) init.timeout = std::chrono::seconds(o.timeout_s);
  // Known from the environment, so refused before any rank connects.
  SPMD_CHECK(o.root < env.world_size, "-r/--root ", o.root, " is not a rank of the ",
             env.world_size, " ranks");
  SPMD_CHECK(count_rows(o, env.world_size) > 0, "no size from -b ", o.min_bytes, " to -e ",
             o.max_bytes, " bytes gives the ", env.world_size,
             " ranks an element each: nothing to measure (raise -b and -e)");
  auto group = dist::init_process_group(init);
  const std::string impl = str_cat("spmd-", dist::backend_name(o.backend));
  const std::vector<RankInfo> ranks = rank_infos(*group, device);
  std::unique_ptr<Report> report;
  std::unique_ptr<JsonDocument> document;
  if (group->rank() == 0) {
    report = std::make_unique<Report>(stdout, o.json_path, impl, group->size(), o.per_iter,
                                      o.ops.size() > 1);
    if (!o.document_path.empty()) {
      document = std::make_unique<JsonDocument>(o.document_path, o, impl, ranks,
                                                group->algorithm_summary());
      std::printf("# Writing JSON output to %s\n", document->path().c_str());
    }
    report->header(preamble(o, impl, ranks, group->algorithm_summary()));
  }
  int failed = 0;  // checks that found a wrong value, over all ranks
  try {
    run_sweep(*group, o, device, [&](const Row& row) {
      for (const auto* c : {&row.out_of_place, &row.in_place})
        failed += *c ? (*c)->failed_checks : 0;
      if (report) report->row(row);
      if (document) document->add(row, o.iters);
    });
  } catch (const std::exception& e) {
    if (document) document->finish(report->failed_checks(), report->average_busbw(), e.what());
    throw;
  }
  if (report) report->footer("spmd-bench " + op_list(o));
  if (document) document->finish(report->failed_checks(), report->average_busbw(), "");
  dist::destroy_process_group(group);
  if (failed > 0 && report) {
    std::fprintf(stderr, "spmd-bench: %d checks found wrong values\n", failed);
  }
  return failed > 0 ? 1 : 0;
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
