// 02_spawn_and_store: the SPMD picture (chapter 16.1.1 and 16.1.3). One
// program runs as several processes; each learns its place in the job (the
// world size, its rank, its local rank on this machine) and the processes
// meet through a key-value store before any communicator exists.
//
// Two ways to start the same ranks:
//   02_spawn_and_store --nprocs 4
//       spawn() forks 4 children and sets their environment, as
//       torch.multiprocessing.spawn does from one Python process;
//   spmdrun --standalone --nproc-per-node 4 02_spawn_and_store
//       the launcher starts 4 copies of the program, as torchrun does.
// Either way every rank runs run_rank() below: the program is the same on
// every rank (Single Program), only the data each touches differs (Multiple
// Data), chosen by its rank.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/env.h"
#include "runtime/flag_checks.h"
#include "runtime/rendezvous.h"
#include "runtime/spawn.h"
#include "runtime/store.h"

using namespace spmd;

namespace {

constexpr auto kTimeout = std::chrono::seconds(30);

void run_rank() {
  // 1. Who am I? The launcher (or spawn) told us through the environment:
  //    RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
  const LaunchEnv env = launch_env_from_environment();
  std::printf("rank %d of %d (local rank %d of %d on this machine), pid %d\n", env.rank,
              env.world_size, env.local_rank, env.local_world_size, int(::getpid()));
  std::fflush(stdout);

  // 2. Meet the others. env:// means: a TCPStore at MASTER_ADDR:MASTER_PORT,
  //    hosted by rank 0 (or by spmdrun's agent); every rank connects, and
  //    rendezvous() returns once all WORLD_SIZE ranks have joined.
  const Rendezvous rv = rendezvous("env://", -1, -1, kTimeout);
  Store& store = *rv.store;

  // 3. Exchange something through the store: each rank publishes a key...
  store.set("hello/" + std::to_string(rv.rank), "greetings from pid " + std::to_string(::getpid()));
  // ...and an atomic counter tells each rank in which order it arrived.
  const int64_t arrival = store.add("arrivals", 1);
  std::printf("rank %d arrived %lld%s at the store\n", rv.rank, (long long)arrival,
              arrival == 1   ? "st"
              : arrival == 2 ? "nd"
              : arrival == 3 ? "rd"
                             : "th");
  std::fflush(stdout);

  // 4. Rank 0 waits for every rank's key, then reads them all: a gather
  //    built from set/get, the way NCCL ids and socket addresses travel.
  if (rv.rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < rv.world_size; ++r) keys.push_back("hello/" + std::to_string(r));
    store.wait(keys, kTimeout);
    for (int r = 0; r < rv.world_size; ++r) {
      const Bytes value = store.get(keys[size_t(r)]);
      std::printf("rank 0 read hello/%d = \"%s\"\n", r,
                  std::string(value.begin(), value.end()).c_str());
    }
    std::fflush(stdout);
  }

  // 5. A barrier: nobody leaves before everyone has arrived (rank 0 hosts the
  //    store under spawn, so it must not exit while others still use it).
  store_barrier(store, "done", rv.rank, rv.world_size, kTimeout);
  if (rv.rank == 0) std::printf("all %d ranks met through the store\n", rv.world_size);
}

}  // namespace

int main(int argc, char** argv) {
  int nprocs = 2;
  CLI::App app{"Start ranks with spawn() or spmdrun, and let them meet through a TCPStore."};
  app.add_option("--nprocs", nprocs, "processes to spawn (ignored under spmdrun)")
      ->check(spmd::flags::count(1));
  CLI11_PARSE(app, argc, argv);
  try {
    if (launched()) {
      run_rank();  // started by a launcher (spmdrun, mpirun, srun): we are one rank already
    } else {
      std::printf("spawning %d processes\n", nprocs);
      std::fflush(stdout);
      spawn(nprocs, [](int) { run_rank(); });  // each child runs run_rank()
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "02_spawn_and_store: %s\n", e.what());
    return 1;
  }
  return 0;
}
