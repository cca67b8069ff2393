// spmd-preflight: the checks `spmdrun --preflight` runs on every rank before
// the user's program starts. It is a worker program like any other (spmdrun
// starts it with the same environment, then the real program once it has
// passed), which is why it may link the communicator while spmdrun itself
// links only runtime/. Each check prints one line; the first failure names
// the rank and the check and exits 1:
//
//   store     the store spmdrun hosts is reachable (init_process_group)
//   gpu       with SPMD_PREFLIGHT_GPUS=1: this node has a GPU for every local
//             rank, and this rank binds its own (LOCAL_RANK)
//   tcp       an all_reduce of (rank + 1) over the TCP backend, f32 and i64,
//             checked against n(n+1)/2
//   clock     after a barrier, every rank's wall clock; the spread between
//             nodes must stay under SPMD_PREFLIGHT_MAX_SKEW_MS (default 2000)
//   versions  the compiler, C library and NCCL each rank was built with and
//             runs on agree across ranks, with SPMD_PREFLIGHT_VERSIONS (any
//             text a job adds: its code's commit, its data's version)
//
// The group it uses is named "preflight", so its keys never meet the
// program's.
#include <gnu/libc-version.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "parallel/comm/init.h"
#include "runtime/error.h"
#include "tensor/cuda_api.h"
#include "tensor/factory.h"
#if SPMD_WITH_NCCL
#include <nccl.h>
#endif

using namespace spmd;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

[[noreturn]] void fail(int rank, const std::string& check, const std::string& why) {
  std::printf("preflight: rank %d: %s: FAILED: %s\n", rank, check.c_str(), why.c_str());
  std::fflush(stdout);
  std::exit(1);
}

std::string versions() {
  std::string v = str_cat("compiler ", __VERSION__, "; glibc ", gnu_get_libc_version());
#if SPMD_WITH_NCCL
  int nccl = 0;
  ncclGetVersion(&nccl);
  v += str_cat("; nccl ", nccl);
#else
  v += "; nccl none";
#endif
  if (const char* extra = std::getenv("SPMD_PREFLIGHT_VERSIONS")) v += str_cat("; ", extra);
  return v;
}

void check_gpu(int rank) {
  if (env_int("SPMD_PREFLIGHT_GPUS", 0) != 1) return;
  const int local_rank = env_int("LOCAL_RANK", 0), local_world = env_int("LOCAL_WORLD_SIZE", 1);
  const int n = cuda::device_count();
  if (n < local_world)
    fail(rank, "gpu", str_cat(local_world, " local ranks but this node has ", n, " GPU(s)"));
  cuda::set_device(local_rank);
  if (cuda::current_device() != local_rank)
    fail(rank, "gpu", str_cat("could not bind GPU ", local_rank));
  std::printf("preflight: rank %d: gpu: ok (cuda:%d of %d)\n", rank, local_rank, n);
}

void check_all_reduce(dist::ProcessGroup& g) {
  const int n = g.size();
  Tensor f = ops::full({3}, double(g.rank() + 1), {DType::kF32});
  Tensor i = ops::full({3}, double(g.rank() + 1), {DType::kI64});
  g.all_reduce(f).wait();
  g.all_reduce(i).wait();
  const double want = n * (n + 1) / 2.0;
  for (int k = 0; k < 3; ++k) {
    if (f.data<float>()[k] != float(want) || i.data<int64_t>()[k] != int64_t(want))
      fail(g.rank(), "tcp",
           str_cat("all_reduce gave ", f.data<float>()[k], " and ", i.data<int64_t>()[k],
                   ", expected ", want));
  }
}

// Rank 0: the spread of the ranks' clocks, per node, just after a barrier.
void check_clock(dist::ProcessGroup& g) {
  g.barrier().wait();
  const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  Tensor mine = ops::full({2}, 0.0, {DType::kI64});
  mine.data<int64_t>()[0] = now;
  mine.data<int64_t>()[1] = env_int("GROUP_RANK", 0);
  Tensor all = ops::empty({2 * g.size()}, {DType::kI64});
  g.all_gather(all, mine).wait();
  if (g.rank() != 0) return;
  std::map<int64_t, int64_t> node_clock;  // node -> its first rank's clock
  for (int r = 0; r < g.size(); ++r)
    node_clock.emplace(all.data<int64_t>()[2 * r + 1], all.data<int64_t>()[2 * r]);
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (auto& [node, t] : node_clock) lo = std::min(lo, t), hi = std::max(hi, t);
  const double skew_ms = (hi - lo) / 1000.0;
  const int limit = env_int("SPMD_PREFLIGHT_MAX_SKEW_MS", 2000);
  if (skew_ms > limit)
    fail(0, "clock",
         str_cat("the nodes' clocks differ by ", skew_ms, " ms (limit ", limit,
                 " ms, SPMD_PREFLIGHT_MAX_SKEW_MS): timestamps in logs and flight "
                 "records will not line up"));
  std::printf("preflight: clock: ok (%zu node(s), spread %.1f ms)\n", node_clock.size(), skew_ms);
}

void check_versions(dist::ProcessGroup& g) {
  Store& store = *g.store_ptr();
  const std::string mine = versions();
  store.set(str_cat("preflight/versions/", g.rank()), std::string_view(mine));
  g.barrier().wait();
  if (g.rank() != 0) return;
  for (int r = 1; r < g.size(); ++r) {
    const Bytes b = store.get(str_cat("preflight/versions/", r));
    const std::string theirs(b.begin(), b.end());
    if (theirs != mine)
      fail(r, "versions", str_cat("rank ", r, " runs ", theirs, " but rank 0 runs ", mine));
  }
  std::printf("preflight: versions: ok (%s)\n", mine.c_str());
}

}  // namespace

int main() {
  const int rank = env_int("RANK", 0);
  std::shared_ptr<dist::ProcessGroup> g;
  try {
    dist::InitOptions init;
    init.group_name = "preflight";
    init.timeout = std::chrono::milliseconds(env_int("SPMD_PREFLIGHT_TIMEOUT_MS", 30000));
    g = dist::init_process_group(init);
  } catch (const std::exception& e) {
    fail(rank, "store", e.what());
  }
  std::printf("preflight: rank %d: store: ok\n", rank);
  try {
    check_gpu(rank);
    check_all_reduce(*g);
    if (rank == 0) std::printf("preflight: tcp: ok (all_reduce of %d ranks)\n", g->size());
    check_clock(*g);
    check_versions(*g);
    dist::destroy_process_group(g);
  } catch (const std::exception& e) {
    fail(rank, "tcp", e.what());
  }
  return 0;
}
