// What a spmd-bench run measures, parsed from nccl-tests' flags:
//
//   spmd-bench OP [-b MIN] [-e MAX] [-f FACTOR | -i STEP] [-n ITERS] [-w WARMUP]
//              [-c CHECKS] [-o REDOP] [-d DTYPE] [-r ROOT] [-a AVERAGE]
//              [-z BLOCKING] [-I 0|1] [-T SECONDS] [-J FILE]
//              [-t 1] [-g 1] [-m 1] [-G 0] [-C 0] [-p 0] [-N 1] [-u 0] [-R 0]
//              [-S 0] [-y 0]
//              [--backend tcp|nccl] [--device cpu|cuda] [--json FILE]
//   spmd-bench --limits
//
// OP is all_reduce, broadcast, reduce, all_gather, reduce_scatter, gather,
// scatter, all_to_all, all_to_allv, sendrecv, all, or a comma-separated list
// of them. Sizes take K, M and G suffixes (powers of 1024). -o and -d also
// accept `all`, as in nccl-tests. The defaults are nccl-tests' own: one size
// of 32 MiB, 1 warm-up and 20 timed calls issued back to back (-z 0), f32,
// sum, one check. -t (threads), -g (GPUs per thread) and -m (aggregated
// calls) are accepted at nccl-tests' default of 1 and refused otherwise,
// naming the flag: spmd runs one rank per process, on one device. So are
// nccl-tests' -G -C -p -N -u -R -S -y at their defaults (0; -N 1), each
// refused otherwise with what it does there and what to do here.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "bench/collectives/cases.h"
#include "parallel/comm/types.h"
#include "tensor/dtype.h"

namespace spmd::bench {

struct BenchOptions {
  std::vector<OpKind> ops;
  size_t min_bytes = size_t(32) << 20;
  size_t max_bytes = size_t(32) << 20;
  double step_factor = 1;               // > 1: multiply the size by it
  size_t step_bytes = size_t(1) << 20;  // factor 1: add this instead
  int iters = 20;
  int warmup = 1;
  int checks = 1;  // checked iterations after the timed ones (0: no check)
  // How the timed calls are issued (nccl-tests' -z): 0 all at once, then
  // waited together; 1 each waited, then a barrier; 2 each waited.
  int blocking = 0;
  bool per_iter = false;  // -I: each call's duration, and their statistics
  int timeout_s = 0;      // -T: bounds every collective (0: the group's default)
  std::vector<dist::ReduceOp> redops{dist::ReduceOp::kSum};
  std::vector<DType> dtypes{DType::kF32};
  int root = 0;
  // How the ranks' times per call make a row's time (nccl-tests' -a):
  // 0 rank 0's, 1 the mean, 2 the fastest rank's, 3 the slowest rank's.
  // The slowest rank's is the time until every rank is done: for broadcast
  // and reduce, the root may run ahead of the others by what the socket
  // buffers hold, which a mean counts as speed.
  int average = 1;
  dist::CommBackend backend = dist::CommBackend::kTcp;
  bool cuda = false;
  std::string json_path;          // --json: one object per row (empty: none)
  std::string document_path;      // -J: one JSON document in nccl-tests' shape (empty: none)
  std::vector<std::string> args;  // the command line, for the document
  bool limits = false;            // --limits: the machine's bounds, no process group
};

// Parses argv. Returns the options, or nullopt after printing help or a
// usage error (then *exit_code is what main should return).
std::optional<BenchOptions> parse_options(int argc, char** argv, int* exit_code);

// "64M" -> 67108864; throws InvalidArgument naming the flag otherwise.
size_t parse_bytes(const std::string& text, const char* flag);

// The sizes of the sweep, from min to max inclusive.
std::vector<size_t> sweep_sizes(const BenchOptions& o);

// "sum" / "all"; "float", "f32", "bfloat16", "all", ...
std::vector<dist::ReduceOp> parse_redops(const std::string& text);
std::vector<DType> parse_dtypes(const std::string& text);

// nccl-tests' name of a dtype: float, double, bfloat16, half, int32, int64.
std::string_view type_name(DType dt);

}  // namespace spmd::bench
