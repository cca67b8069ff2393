// spmd-bench -J FILE: the whole run as one JSON document, with the keys and
// nesting of nccl-tests' -J (its document version 2), so that a script that
// reads nccl-tests' documents reads these:
//
//   {"version": 2, "start_time": "2026-12-01 10:00:00", "args": [...],
//    "env": [...], "impl": "spmd-tcp", "nranks": 2,
//    "config": {"minimum_bytes", "maximum_bytes", "step_factor" | "step_bytes",
//               "warmup_iters", "iterations", "validation", "blocking_collectives",
//               "per_iter_timing", "average", "timeout", "devices": [{"rank",
//               "group", "pid", "hostname", "device", "links"}, ...],
//               "algorithm"},
//    "results": [{"op", "size", "count", "type", "redop", "root",
//                 "out_of_place": {"time", "alg_bw", "bus_bw", "nwrong"} | null,
//                 "in_place": ... | null, "out_of_place_per_iter": {...} (-I),
//                 "in_place_per_iter": {...} (-I), "algorithm",
//                 "actual_iterations", "experiment_name"}, ...],
//    "out_of_bounds": {"count", "okay"},
//    "average_bus_bandwidth": {"bandwidth", "okay": "unchecked"},
//    "errors": [...], "end_time": "..."}
//
// What differs: each result names its "op" (one run sweeps several) and the
// "algorithm" that ran it on rank 0 ("ring", "hierarchical", ...: "" where
// the backend does not say), the config the group's "algorithm" summary and
// each device its "links"; a set
// spmd's API has no form for is null; values are typed (root a number,
// booleans true/false, where nccl-tests writes strings); "env" holds only
// the variables that place a rank (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR/PORT, CUDA_VISIBLE_DEVICES and the SPMD_, NCCL_, OMPI_COMM_WORLD_
// and SLURM_ ones), not the whole environment. As nccl-tests does, an
// existing FILE is not overwritten: the document goes to FILE.0, FILE.1, ...
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/collectives/options.h"
#include "bench/collectives/sweep.h"

namespace spmd::bench {

// Where one rank runs, for the "devices" list and the "# Using devices" lines.
struct RankInfo {
  int rank = 0;
  int pid = 0;
  std::string hostname;
  std::string device;  // "cpu", "cuda:0"
  std::string links;   // links_summary() of its peer_links(): "shm:1 tcp:2-3"; "" if none
};

class JsonDocument {
 public:
  // Picks the file (`path`, or the first free `path`.N) and starts the
  // document. Throws Error when the file cannot be created.
  // `algorithm`: the group's algorithm_summary().
  JsonDocument(const std::string& path, const BenchOptions& o, const std::string& impl,
               const std::vector<RankInfo>& ranks, const std::string& algorithm);

  const std::string& path() const { return path_; }
  void add(const Row& r, int iters);
  // Closes the document with the footer's figures and any error, and writes it.
  void finish(int failed_checks, double average_busbw, const std::string& error);

 private:
  std::string path_;
  nlohmann::ordered_json doc_;
};

}  // namespace spmd::bench
