// spmd-bench's command line (CLI11), with nccl-tests' flag names.
#include "bench/collectives/options.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "runtime/error.h"
#include "runtime/flag_checks.h"

namespace spmd::bench {

size_t parse_bytes(const std::string& text, const char* flag) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    SPMD_THROW(InvalidArgument, flag, " '", text, "' is not a size (use e.g. 8, 4K, 64M, 1G)");
  }
  std::string suffix = text.substr(pos);
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1 << 10;
  if (suffix == "M" || suffix == "m") scale = 1 << 20;
  if (suffix == "G" || suffix == "g") scale = 1 << 30;
  SPMD_CHECK(suffix.empty() || scale > 1, flag, " '", text,
             "' has an unknown suffix (K, M and G are powers of 1024)");
  SPMD_CHECK(value >= 0, flag, " '", text, "' is negative");
  return size_t(std::llround(value * scale));
}

std::vector<size_t> sweep_sizes(const BenchOptions& o) {
  std::vector<size_t> sizes;
  for (size_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    const size_t next = o.step_factor > 1 ? size_t(double(s) * o.step_factor) : s + o.step_bytes;
    if (next <= s) break;  // a factor that rounds to no growth, or a zero step
    s = next;
  }
  return sizes;
}

std::vector<dist::ReduceOp> parse_redops(const std::string& text) {
  using dist::ReduceOp;
  const std::vector<ReduceOp> all = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax,
                                     ReduceOp::kMin, ReduceOp::kAvg};
  if (text == "all") return all;
  for (ReduceOp op : all) {
    if (dist::reduce_op_name(op) == text) return {op};
  }
  SPMD_THROW(InvalidArgument, "-o/--op '", text, "': expected sum, prod, max, min, avg or all");
}

std::string_view type_name(DType dt) {
  switch (dt) {
    case DType::kF32:
      return "float";
    case DType::kF64:
      return "double";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "half";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    default:
      return dtype_name(dt);
  }
}

std::vector<DType> parse_dtypes(const std::string& text) {
  const std::vector<DType> all = {DType::kF32, DType::kF64, DType::kBF16,
                                  DType::kF16, DType::kI32, DType::kI64};
  if (text == "all") return all;
  for (DType dt : all) {
    if (type_name(dt) == text) return {dt};
  }
  DType dt;
  try {
    dt = parse_dtype(text);  // f32, float32, bf16, ...
  } catch (const Error&) {
    dt = DType::kU8;
  }
  SPMD_CHECK(dist::is_comm_dtype(dt), "-d/--datatype '", text,
             "': expected float, double, bfloat16, half, int32, int64 (or f32, bf16, ...) or all");
  return {dt};
}

namespace {

// nccl-tests' flags that spmd-bench has no counterpart for. Each is accepted
// at nccl-tests' default (its feature off) and refused otherwise, saying what
// it does in nccl-tests and what to do here instead.
struct ForeignFlag {
  const char* names;  // CLI11's "-G,--cudagraph"
  const char* off;    // nccl-tests' default: the one value taken
  const char* why;    // follows "spmd-bench: -G/--cudagraph N: "
};
constexpr ForeignFlag kForeignFlags[] = {
    {"-G,--cudagraph", "0",
     "nccl-tests captures the timed calls in a CUDA graph and replays it that many times; spmd "
     "issues every call through its process group, without graph capture: pass -G 0"},
    {"-C,--report_cputime", "0",
     "nccl-tests then reports the host time spent issuing the calls instead of the time "
     "until they complete; spmd-bench reports the time until completion only (-z 2 waits "
     "for each call, -I gives each call's time): pass -C 0"},
    {"-p,--parallel_init", "0",
     "nccl-tests then initialises the communicators of its threads concurrently; spmd "
     "runs one rank per process, each initialising its own group: pass -p 0"},
    {"-N,--run_cycles", "1",
     "nccl-tests repeats the whole sweep that many times (0: until stopped); run spmd-bench again "
     "instead (a shell loop, or -n for more timed calls per size): pass -N 1"},
    {"-u,--unalign", "0",
     "nccl-tests offsets its send and receive buffers by that many elements to measure unaligned "
     "transfers; spmd's tensors start where its allocator aligns them (64 bytes) and "
     "spmd-bench has no offset: pass -u 0"},
    {"-R,--local_register", "0",
     "nccl-tests registers its buffers with NCCL (ncclMemAlloc, ncclCommRegister) for "
     "zero-copy transfers; spmd does not register user buffers: pass -R 0"},
    {"-S,--report_timestamps", "0",
     "nccl-tests adds a timestamp to each row; spmd-bench's rows have none (-J FILE records "
     "the run's start_time and end_time): pass -S 0"},
    {"-y,--stream_null", "0",
     "nccl-tests then issues on CUDA's default (null) stream; spmd's NCCL backend runs "
     "collectives on a stream of its own, ordered after the caller's current stream: pass "
     "-y 0"},
};

struct RawFlags {
  std::string op, min = "32M", max = "32M", step = "1M", redop = "sum", dtype = "float";
  std::string backend = "tcp", device = "cpu";
  // nccl-tests' flags for several devices or threads in one process (-t, -g)
  // and for aggregated launches (-m): spmd runs one rank per process on one
  // device, so only their value 1 (nccl-tests' default) has a meaning here.
  int nthreads = 1, ngpus = 1, agg_iters = 1;
  // kForeignFlags' values, in the table's order (its default when not given).
  std::vector<std::string> foreign;
};

void add_flags(CLI::App& app, BenchOptions& o, RawFlags& raw) {
  app.add_option("op", raw.op,
                 "all_reduce, broadcast, reduce, all_gather, reduce_scatter, gather, scatter, "
                 "all_to_all, all_to_allv, sendrecv, all, or a comma-separated list");
  app.add_option("-b,--minbytes", raw.min, "Smallest size (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", raw.max, "Largest size");
  app.add_option("-f,--stepfactor", o.step_factor, "Multiply the size by this each step")
      ->check(flags::number(1, 1024));
  app.add_option("-i,--stepbytes", raw.step, "Add this each step (when -f is 1)");
  app.add_option("-n,--iters", o.iters, "Timed calls per size")->check(flags::count(1));
  app.add_option("-w,--warmup_iters", o.warmup, "Untimed calls before them")
      ->check(flags::count(0));
  app.add_option("-c,--check", o.checks, "Checked calls after the timed ones (0: no check)")
      ->check(flags::count(0));
  app.add_option("-o,--op", raw.redop, "Reduction: sum, prod, max, min, avg or all");
  app.add_option("-d,--datatype", raw.dtype, "float, double, bfloat16, half, int32, int64 or all");
  app.add_option("-r,--root", o.root, "Root of broadcast, reduce, gather and scatter")
      ->check(flags::count(0));
  app.add_option("-a,--average", o.average,
                 "A row's time from the ranks': 0 rank 0's, 1 mean, 2 min, 3 max")
      ->check(flags::count(0, 3));
  app.add_option("-z,--blocking", o.blocking,
                 "0: issue the timed calls at once, then wait; 1: wait for each, then a barrier; "
                 "2: wait for each")
      ->check(flags::count(0, 2));
  app.add_option("-I,--per_iter_timing", o.per_iter,
                 "1: each call's duration, and i_min, i_max, i_p99, i_cv% per column set")
      ->check(flags::count(0, 1));
  app.add_option("-T,--timeout", o.timeout_s,
                 "Fail any collective that takes longer than this many seconds (0: the group's "
                 "default, SPMD_PG_TIMEOUT_S or 5 minutes)")
      ->check(flags::count(0, int64_t(flags::kMaxTimeoutSeconds)));
  app.add_option("-J,--output_file", o.document_path,
                 "Write one JSON document (nccl-tests' shape) to this file");
  app.add_option("-t,--nthreads", raw.nthreads,
                 "Threads per process (nccl-tests); spmd runs one rank per process: only 1");
  app.add_option("-g,--ngpus", raw.ngpus,
                 "GPUs per thread (nccl-tests); spmd uses one device per process: only 1");
  app.add_option("-m,--agg_iters", raw.agg_iters,
                 "Calls aggregated into one launch (nccl-tests); spmd issues them one by one: "
                 "only 1");
  raw.foreign.resize(std::size(kForeignFlags));
  for (size_t i = 0; i < std::size(kForeignFlags); ++i) {
    raw.foreign[i] = kForeignFlags[i].off;
    app.add_option(
        kForeignFlags[i].names, raw.foreign[i],
        std::string("nccl-tests' flag, taken only at its default, ") + kForeignFlags[i].off);
  }
  app.add_option("--backend", raw.backend, "tcp or nccl");
  app.add_option("--device", raw.device, "cpu or cuda (this rank's GPU: its local rank)");
  app.add_option("--json", o.json_path, "Also write one JSON object per row to this file");
  app.add_flag("--limits", o.limits,
               "Print the machine's bounds (loopback TCP between two processes, memcpy) and exit");
}

// nccl-tests runs several ranks in one process (-t threads, each driving -g
// GPUs); spmd runs one rank per process, so the same job is N processes,
// each with one device. nccl-tests' other flags without a counterpart here
// (kForeignFlags) are refused unless at their default.
void check_nccl_tests_flags(const RawFlags& raw) {
  SPMD_CHECK(raw.nthreads == 1, "spmd-bench: -t/--nthreads ", raw.nthreads,
             ": spmd runs one rank per process; start ", raw.nthreads,
             " processes instead (spmdrun --nproc-per-node ", raw.nthreads, ") and pass -t 1");
  SPMD_CHECK(raw.ngpus == 1, "spmd-bench: -g/--ngpus ", raw.ngpus,
             ": spmd uses one device per process; start one process per GPU (spmdrun "
             "--nproc-per-node ",
             raw.ngpus, " spmd-bench ... -g 1) instead");
  SPMD_CHECK(raw.agg_iters == 1, "spmd-bench: -m/--agg_iters ", raw.agg_iters,
             ": spmd issues each call on its own (no grouped launch); pass -m 1");
  for (size_t i = 0; i < std::size(kForeignFlags); ++i) {
    const ForeignFlag& f = kForeignFlags[i];
    const std::string& value = raw.foreign[i];
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 0);
    if (!value.empty() && *end == '\0' && v == std::strtol(f.off, nullptr, 0)) continue;
    std::string names = f.names;  // "-G,--cudagraph" -> "-G/--cudagraph"
    names[names.find(',')] = '/';
    SPMD_THROW(InvalidArgument, "spmd-bench: ", names, " ", value, ": ", f.why);
  }
}

// Turns the raw strings into options; throws InvalidArgument on bad values.
void resolve(BenchOptions& o, const RawFlags& raw) {
  if (!o.limits) {
    SPMD_CHECK(!raw.op.empty(), "spmd-bench: name an op (or all), or pass --limits");
    std::stringstream list(raw.op);  // one op, a comma-separated list, or all
    for (std::string name; std::getline(list, name, ',');) {
      if (name == "all") {
        o.ops.insert(o.ops.end(), all_op_kinds().begin(), all_op_kinds().end());
        continue;
      }
      auto op = parse_op_kind(name);
      SPMD_CHECK(op.has_value(), "spmd-bench: unknown op '", name,
                 "': expected all_reduce, broadcast, reduce, all_gather, reduce_scatter, gather, "
                 "scatter, all_to_all, all_to_allv, sendrecv or all");
      o.ops.push_back(*op);
    }
  }
  check_nccl_tests_flags(raw);
  o.min_bytes = parse_bytes(raw.min, "-b/--minbytes");
  o.max_bytes = parse_bytes(raw.max, "-e/--maxbytes");
  o.step_bytes = parse_bytes(raw.step, "-i/--stepbytes");
  SPMD_CHECK(o.min_bytes <= o.max_bytes, "spmd-bench: -b ", raw.min, " is larger than -e ",
             raw.max);
  SPMD_CHECK(o.step_factor >= 1, "spmd-bench: -f/--stepfactor ", o.step_factor, " is below 1");
  SPMD_CHECK(o.min_bytes > 0 || o.min_bytes == o.max_bytes || o.step_factor == 1,
             "spmd-bench: -b 0 with -f ", o.step_factor, " never grows: start at -b 1 or more");
  o.redops = parse_redops(raw.redop);
  o.dtypes = parse_dtypes(raw.dtype);
  o.backend = dist::parse_backend(raw.backend);
  SPMD_CHECK(raw.device == "cpu" || raw.device == "cuda", "spmd-bench: --device '", raw.device,
             "': expected cpu or cuda");
  o.cuda = raw.device == "cuda";
  SPMD_CHECK(o.backend != dist::CommBackend::kNccl || o.cuda,
             "spmd-bench: --backend nccl carries CUDA tensors only: add --device cuda");
}

}  // namespace

std::optional<BenchOptions> parse_options(int argc, char** argv, int* exit_code) {
  CLI::App app{
      "spmd-bench: the bandwidth and latency of each collective, as nccl-tests measures them.\n"
      "Run it under spmdrun: spmdrun --standalone --nproc-per-node 4 spmd-bench all_reduce "
      "-b 8 -e 256M -f 2"};
  BenchOptions o;
  RawFlags raw;
  add_flags(app, o, raw);
  o.args.assign(argv, argv + argc);
  try {
    app.parse(argc, argv);
    resolve(o, raw);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return std::nullopt;
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    *exit_code = 2;
    return std::nullopt;
  }
  return o;
}

}  // namespace spmd::bench
