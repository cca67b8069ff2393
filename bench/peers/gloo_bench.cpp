// gloo_bench: the Gloo peer of spmd-bench. The same sweep as spmd-bench,
// through every algorithm Gloo (Debian's libgloo-dev) has for each op, over
// Gloo's own TCP transport, so that a comparison can take Gloo's *best*
// algorithm per op and size rather than the one PyTorch happens to call.
//
//   gloo_bench --nprocs 4 all_reduce -b 1M -e 256M -f 4 --json out.json
//
// It forks its own ranks; they meet through a gloo::rendezvous::FileStore in
// a fresh temporary directory and connect a full mesh of Gloo TCP pairs on
// 127.0.0.1. Each row is printed (on rank 0, spmd-bench's columns) and
// written as JSON with impl "gloo-<Algorithm>", one row per algorithm
// (gloo_algorithms.h):
//
//   all_reduce      allreduce(RING) (PyTorch's call), allreduce(BCUBE),
//                   AllreduceRing, AllreduceRingChunked,
//                   AllreduceHalvingDoubling, AllreduceBcube
//   broadcast       broadcast (binomial tree), BroadcastOneToAll
//   reduce          reduce
//   all_gather      allgather, AllgatherRing
//   reduce_scatter  ReduceScatterHalvingDoubling (in place: rank r's block
//                   lands at the front of its buffer)
//   all_to_all      alltoall
//   sendrecv        unbound buffers: send right, receive from the left
//
// Sizes, counts, bus factors and the time (mean over ranks of each rank's
// time per call, each call complete before the next; or as -a says) are
// spmd-bench's (bench/collectives/cases.h). float and sum only (what the comparison
// uses); -c checks every algorithm with spmd-bench's values. An algorithm
// object is built once per size and run for every call, as a Gloo user
// would. Not here: Gloo's CUDA algorithms, other dtypes and reductions.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/peers/gloo_algorithms.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

namespace {

using namespace gloo_peer;  // NOLINT: the peer's own algorithms and cases

const char* const kOps[] = {"all_reduce",     "broadcast",  "reduce",  "all_gather",
                            "reduce_scatter", "all_to_all", "sendrecv"};

struct Options {
  std::vector<std::string> ops;
  int nprocs = 2;
  size_t min_bytes = 32u << 20, max_bytes = 32u << 20, step_bytes = 1u << 20;
  double step_factor = 1;
  int iters = 20, warmup = 5, checks = 1, root = 0, average = 1;
  std::string json;
};

// --- Timing --------------------------------------------------------

void sum_f64(void* c, const void* a, const void* b, size_t n) { gloo::sum<double>(c, a, b, n); }
void max_f64(void* c, const void* a, const void* b, size_t n) { gloo::max<double>(c, a, b, n); }

// Sums v (or takes its maximum) over the ranks, in place.
void reduce_over_ranks(const Ctx& ctx, std::vector<double>& v, bool max) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(v.data(), v.size());
  opts.setReduceFunction(max ? &max_f64 : &sum_f64);
  gloo::allreduce(opts);
}

double bus_factor(const std::string& op, int p) {
  if (op == "all_reduce") return 2.0 * (p - 1) / p;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return double(p - 1) / p;
  return 1;
}

// Times one algorithm on one case; prints and writes the row on rank 0.
long long measure(const Ctx& ctx, const Algo& algo, Case& c, const Options& o, FILE* json) {
  Call call = algo.make(ctx, c);
  for (int i = 0; i < o.warmup; ++i) call();
  gloo::BarrierOptions barrier(ctx);
  gloo::barrier(barrier);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) call();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  const double mine = took.count() / std::max(o.iters, 1);
  // rank 0's time, the sum of times, wrong values; then the max of t and -t
  std::vector<double> sums{c.rank == 0 ? mine : 0.0, mine, 0}, extremes{mine, -mine};
  for (int i = 0; i < o.checks; ++i) {
    fill(c);
    gloo::barrier(barrier);  // Gloo's classic algorithms write into a peer's buffer unasked
    call();
    sums[2] += double(count_wrong(c));
  }
  reduce_over_ranks(ctx, sums, false);
  reduce_over_ranks(ctx, extremes, true);
  const double times[4] = {sums[0], sums[1] / c.size, -extremes[1], extremes[0]};  // -a
  const double t = times[o.average], algbw = double(c.size_bytes) / t / 1e9;
  const double busbw = algbw * bus_factor(c.op, c.size);
  const bool rooted = c.op == "broadcast" || c.op == "reduce";
  const char* redop =
      c.op == "all_reduce" || c.op == "reduce" || c.op == "reduce_scatter" ? "sum" : "none";
  if (c.rank == 0) {
    std::printf("  %10zu  %12zu  %8s  %6s  %6d  %9.1f  %7.3f  %7.3f  %6lld\n", c.size_bytes,
                c.count, "float", redop, rooted ? c.root : -1, t * 1e6, algbw, busbw,
                (long long)sums[2]);
    std::fflush(stdout);
    if (json) {
      const nlohmann::ordered_json row = {
          {"op", c.op},         {"size", c.size_bytes},
          {"count", c.count},   {"type", "float"},
          {"redop", redop},     {"root", rooted ? c.root : -1},
          {"time_us", t * 1e6}, {"algbw", algbw},
          {"busbw", busbw},     {"wrong", (long long)sums[2]},
          {"nranks", c.size},   {"impl", std::string("gloo-") + algo.name}};
      std::fprintf(json, "%s\n", row.dump().c_str());
      std::fflush(json);
    }
  }
  return (long long)sums[2];
}

// --- One rank -------------------------------------------------------------------------

std::vector<size_t> sweep_sizes(const Options& o) {
  std::vector<size_t> sizes;
  for (size_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    const size_t next = o.step_factor > 1 ? size_t(double(s) * o.step_factor) : s + o.step_bytes;
    if (next <= s) break;
    s = next;
  }
  return sizes;
}

// A fresh full mesh for each algorithm, as a Gloo user keeps one per
// long-lived algorithm: a classic algorithm destroyed after its last run
// leaves a notification in flight (its "clear to send"), which, measured,
// stalled the next algorithm's messages on the same pairs for ~0.6 s a call.
Ctx connect(int rank, int size, gloo::rendezvous::FileStore& store, const std::string& name) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(std::chrono::seconds(300));
  gloo::rendezvous::PrefixStore prefixed(name, store);
  context->connectFullMesh(prefixed, device);
  return context;
}

long long run_rank(int rank, const Options& o, const std::string& store_dir) {
  gloo::rendezvous::FileStore store(store_dir);
  int meshes = 0;
  FILE* json = rank == 0 && !o.json.empty() ? std::fopen(o.json.c_str(), "w") : nullptr;
  long long wrong = 0;
  for (const std::string& op : o.ops) {
    for (const Algo& algo : algorithms()) {
      if (algo.op != op) continue;
      if (algo.needs_power_of_two && (o.nprocs & (o.nprocs - 1)) != 0) {
        if (rank == 0)
          std::printf("# %s (gloo %s): needs a power-of-two group\n", op.c_str(), algo.name);
        std::fflush(stdout);
        continue;
      }
      if (rank == 0) std::printf("# %s (gloo %s)\n", op.c_str(), algo.name);
      std::fflush(stdout);
      const Ctx ctx = connect(rank, o.nprocs, store, "mesh" + std::to_string(meshes++));
      size_t last = 0;
      for (size_t bytes : sweep_sizes(o)) {
        Case c = make_case(op, bytes, rank, o.nprocs, o.root);
        if (c.count == 0 || c.size_bytes == last) continue;
        last = c.size_bytes;
        wrong += measure(ctx, algo, c, o, json);
      }
    }
  }
  if (json) std::fclose(json);
  return wrong;
}

// --- Options and the ranks' processes ----------------------------------------------

size_t parse_bytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  const char unit = char(std::toupper(*end));
  if (unit == 'K') v *= 1024.0;
  if (unit == 'M') v *= 1024.0 * 1024;
  if (unit == 'G') v *= 1024.0 * 1024 * 1024;
  return size_t(v + 0.5);
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "gloo_bench: %s\nusage: gloo_bench [--nprocs P] OP[,OP...|all] [-b B] [-e B] [-f F] "
               "[-i B] [-n N] [-w N] [-c N] [-r R] [-a 0..3] [-d float] [-o sum] [--json FILE]\n",
               why);
  std::exit(2);
}

void add_ops(Options& o, const std::string& list) {
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, comma - start);
    bool known = false;
    for (const char* op : kOps) {
      if (name == "all" || name == op) {
        o.ops.push_back(op);
        known = true;
      }
    }
    if (!known) usage(("unknown op '" + name + "'").c_str());
    start = comma + 1;
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a[0] != '-') {
      add_ops(o, a);
      continue;
    }
    if (i + 1 >= argc) usage(("flag " + a + " lacks its value").c_str());
    const char* v = argv[++i];
    if (a == "--nprocs")
      o.nprocs = std::atoi(v);
    else if (a == "-b" || a == "--minbytes")
      o.min_bytes = parse_bytes(v);
    else if (a == "-e" || a == "--maxbytes")
      o.max_bytes = parse_bytes(v);
    else if (a == "-i" || a == "--stepbytes")
      o.step_bytes = parse_bytes(v);
    else if (a == "-f" || a == "--stepfactor")
      o.step_factor = std::atof(v);
    else if (a == "-n" || a == "--iters")
      o.iters = std::atoi(v);
    else if (a == "-w" || a == "--warmup_iters")
      o.warmup = std::atoi(v);
    else if (a == "-c" || a == "--check")
      o.checks = std::atoi(v);
    else if (a == "-r" || a == "--root")
      o.root = std::atoi(v);
    else if (a == "-a" || a == "--average")
      o.average = std::atoi(v);
    else if (a == "--json")
      o.json = v;
    else if ((a == "-d" || a == "--datatype") && std::strcmp(v, "float") != 0)
      usage("-d: float only");
    else if ((a == "-o" || a == "--op") && std::strcmp(v, "sum") != 0)
      usage("-o: sum only");
    else if (a != "-d" && a != "--datatype" && a != "-o" && a != "--op")
      usage(("unknown flag " + a).c_str());
  }
  if (o.ops.empty()) usage("name an op (or all)");
  if (o.average < 0 || o.average > 3) usage("-a: 0 (rank 0), 1 (mean), 2 (min) or 3 (max)");
  if (o.nprocs < 1 || o.root < 0 || o.root >= o.nprocs)
    usage("need --nprocs >= 1 and 0 <= root < nprocs");
  return o;
}

// Rank r's process: its exit status says whether it finished and checked clean.
int rank_main(int rank, const Options& o, const std::string& dir) {
  try {
    return run_rank(rank, o, dir) == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_bench: rank %d failed: %s\n", rank, e.what());
    return 3;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  char dir_template[] = "/tmp/gloo_bench.XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  if (!dir) usage("cannot create a directory for the rendezvous store");
  std::printf("# gloo_bench: %d ranks, Gloo TCP, -b %zu -e %zu -f %g -n %d -w %d -c %d\n#\n",
              o.nprocs, o.min_bytes, o.max_bytes, o.step_factor, o.iters, o.warmup, o.checks);
  std::printf(
      "# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s\n#  %10s  %12s  %8s  %6s  %6s  %9s  %7s  "
      "%7s  %6s\n",
      "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "(B)",
      "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int r = 0; r < o.nprocs; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int status = rank_main(r, o, dir);
      std::fflush(stdout);
      ::_exit(status);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (size_t done = 0; done < children.size(); ++done) {
    int status = 0;
    const pid_t pid = ::wait(&status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (!failed) {  // the first failure ends the others: they would wait for it forever
      failed = WIFEXITED(status) ? WEXITSTATUS(status) : 4;
      for (pid_t c : children)
        if (c != pid) ::kill(c, SIGTERM);
    }
  }
  std::filesystem::remove_all(dir);
  if (failed == 1) std::printf("# Wrong values: FAILED\n");
  return failed;
}
