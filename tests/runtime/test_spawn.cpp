// spawn() and rendezvous() with real processes: children see their rank in
// the environment and find each other; the first failure is reported with
// its rank and how it died, and the other children do not outlive the call.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <thread>

#include "runtime/file_store.h"
#include "runtime/hash_store.h"
#include "runtime/rendezvous.h"
#include "runtime/spawn.h"

using namespace spmd;
using namespace std::chrono_literals;

namespace {

std::string temp_path(const char* tag) {
  return "/tmp/spmd_test_" + std::string(tag) + "_" + std::to_string(::getpid()) + "_" +
         std::to_string(std::rand());
}

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

SpawnOptions quick() {
  SpawnOptions o;
  o.timeout = 30s;
  o.grace = 2s;
  return o;
}

}  // namespace

TEST_CASE("spawn: every child gets its rank and the job's variables", "[spawn]") {
  std::string path = temp_path("spawn_env");
  spawn(
      4,
      [&](int rank) {
        SPMD_CHECK(getenv_str("RANK") == std::to_string(rank), "RANK=", getenv_str("RANK"));
        SPMD_CHECK(getenv_str("LOCAL_RANK") == std::to_string(rank), "bad LOCAL_RANK");
        SPMD_CHECK(getenv_str("WORLD_SIZE") == "4", "bad WORLD_SIZE");
        SPMD_CHECK(getenv_str("MASTER_ADDR") == "127.0.0.1", "bad MASTER_ADDR");
        SPMD_CHECK(std::atoi(getenv_str("MASTER_PORT").c_str()) > 0, "bad MASTER_PORT");
        FileStore log(path, 4, 5s);
        log.add("ranks_seen", 1);
        log.add("rank_sum", rank);
      },
      quick());
  // The last FileStore to close deleted the file: every child ran to the end.
  CHECK(::access(path.c_str(), F_OK) != 0);
}

TEST_CASE("spawn: env:// rendezvous serves on the socket the parent bound", "[spawn]") {
  spawn(
      3,
      [](int rank) {
        Rendezvous rv = rendezvous("env://", -1, -1, 10s);
        SPMD_CHECK(rv.rank == rank && rv.world_size == 3, "rendezvous gave rank ", rv.rank);
        rv.store->set(str_cat("r", rank), std::to_string(rank + 100));
        for (int r = 0; r < 3; ++r)
          SPMD_CHECK(rv.store->get_string(str_cat("r", r)) == std::to_string(r + 100), "rank ",
                     rank, " read a bad value from rank ", r);
        store_barrier(*rv.store, "done", rank, 3, 10s);
      },
      quick());
}

TEST_CASE("spawn: an exit code is reported with the rank", "[spawn]") {
  try {
    spawn(
        3,
        [](int rank) {
          if (rank == 2) std::exit(7);
        },
        quick());
    FAIL("spawn returned although rank 2 exited with 7");
  } catch (const ProcessFailedError& e) {
    CHECK(e.rank() == 2);
    CHECK(std::string(e.what()) == "spawn: rank 2 exited with code 7");
  }
}

TEST_CASE("spawn: an exception's message comes back to the parent", "[spawn]") {
  CHECK_THROWS_WITH(spawn(
                        2,
                        [](int rank) {
                          if (rank == 1) SPMD_THROW(InvalidArgument, "bad input on rank ", rank);
                        },
                        quick()),
                    "spawn: rank 1 exited with code 1: bad input on rank 1");
}

TEST_CASE("spawn: a signal is reported by name, the others are stopped", "[spawn]") {
  std::string path = temp_path("spawn_pids");
  auto t0 = std::chrono::steady_clock::now();
  try {
    spawn(
        4,
        [&](int rank) {
          FileStore pids(path, -1, 5s);
          pids.set("pid" + std::to_string(rank), std::to_string(::getpid()));
          if (rank != 1) std::this_thread::sleep_for(60s);  // would outlive the test
          pids.wait({"pid0", "pid2", "pid3"}, 5s);
          ::raise(SIGKILL);
        },
        quick());
    FAIL("spawn returned although rank 1 was killed");
  } catch (const ProcessFailedError& e) {
    CHECK(e.rank() == 1);
    CHECK(std::string(e.what()) == "spawn: rank 1 was killed by signal 9 (SIGKILL)");
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  FileStore pids(path, 1, 1s);
  for (int r : {0, 2, 3}) {
    pid_t pid = std::stoi(pids.get_string("pid" + std::to_string(r)));
    CHECK(::kill(pid, 0) != 0);  // gone (and reaped: not even a zombie)
    CHECK(errno == ESRCH);
  }
}

TEST_CASE("spawn: the first failure is the one reported", "[spawn]") {
  try {
    spawn(
        4,
        [](int rank) {
          if (rank == 3) std::exit(3);
          std::this_thread::sleep_for(300ms);
          if (rank == 0) std::exit(10);
        },
        quick());
    FAIL("spawn returned although ranks failed");
  } catch (const ProcessFailedError& e) {
    CHECK(e.rank() == 3);
  }
}

TEST_CASE("spawn: a job past its timeout is stopped", "[spawn]") {
  SpawnOptions o = quick();
  o.timeout = 300ms;
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(spawn(
                        2, [](int) { std::this_thread::sleep_for(60s); }, o),
                    Catch::Contains("rank(s) 0, 1 still running after 300 ms"));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK_THROWS_AS(spawn(0, [](int) {}), InvalidArgument);
}

TEST_CASE("rendezvous: tcp:// and file:// with ranks in the URL or the arguments", "[rendezvous]") {
  std::string file = temp_path("rdzv");
  spawn(
      3,
      [&](int rank) {
        std::string port = getenv_str("MASTER_PORT");
        // tcp:// with the rank as an argument and the world size in the URL.
        Rendezvous a = rendezvous("tcp://127.0.0.1:" + port + "?world_size=3", rank, -1, 10s);
        SPMD_CHECK(a.rank == rank && a.world_size == 3, "tcp:// rank ", a.rank);
        Rendezvous b = rendezvous("file://" + file + "?rank=" + std::to_string(rank), -1, 3, 10s);
        SPMD_CHECK(b.rank == rank && b.world_size == 3, "file:// rank ", b.rank);
        SPMD_CHECK(b.store->add("sum", rank) >= rank, "add");
        store_barrier(*b.store, "end", rank, 3, 10s);
        SPMD_CHECK(b.store->add("sum", 0) == 0 + 1 + 2, "file:// sum");
        store_barrier(*a.store, "end", rank, 3, 10s);  // rank 0 hosts a's server
      },
      quick());
}

TEST_CASE("rendezvous: a barrier names the ranks that never arrived", "[rendezvous]") {
  CHECK_THROWS_WITH(
      spawn(
          3,
          [](int rank) {
            Rendezvous rv = rendezvous("env://", -1, -1, 10s);
            if (rank == 2) return;  // skips the barrier below
            // Rank 1 gives up first (rank 0, the host, would take the
            // store down with it and blur which error comes first).
            store_barrier(*rv.store, "step", rank, 3, rank == 1 ? 300ms : 10s);
          },
          quick()),
      Catch::Contains(
          "spawn: rank 1 exited with code 1: barrier 'step': only 2 of 3 ranks arrived") &&
          Catch::Contains("missing rank(s) 2"));
}

TEST_CASE("rendezvous: bad init methods are clear errors", "[rendezvous]") {
  CHECK_THROWS_WITH(rendezvous("node0:29500"), Catch::Contains("is not one of env://"));
  CHECK_THROWS_WITH(rendezvous("smb://x", 0, 1), Catch::Contains("unknown scheme 'smb'"));
  CHECK_THROWS_WITH(rendezvous("tcp://127.0.0.1:1234", -1, 2),
                    Catch::Contains("the rank is unknown"));
  CHECK_THROWS_WITH(rendezvous("tcp://127.0.0.1:1234?rank=2&world_size=2"),
                    Catch::Contains("rank 2 is not below the world size 2"));
  CHECK_THROWS_WITH(rendezvous("tcp://127.0.0.1:1234?rank=x", -1, 2),
                    Catch::Contains("rank='x' is not a non-negative integer"));
  CHECK_THROWS_WITH(rendezvous("tcp://127.0.0.1:1234?rank=1", 0, 2),
                    Catch::Contains("rank 0 disagrees with the URL's 1"));
  CHECK_THROWS_WITH(rendezvous("tcp://127.0.0.1", 0, 1), Catch::Contains("no port in '127.0.0.1'"));
  CHECK_THROWS_WITH(rendezvous("tcp://127.0.0.1:0", 0, 1), Catch::Contains("not in 1..65535"));
}

TEST_CASE("rendezvous: env:// for a world of one needs no server", "[rendezvous]") {
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  Rendezvous rv = rendezvous("env://", -1, -1, 1s);
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  CHECK(rv.world_size == 1);
  CHECK(dynamic_cast<HashStore*>(rv.store.get()) != nullptr);
}

TEST_CASE("store_barrier: reusable, and nobody leaves before everyone arrived", "[rendezvous]") {
  HashStore store(5s);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      for (int round = 0; round < 5; ++round) {
        std::string key = "arrived" + std::to_string(round);
        store.add(key, 1);
        store_barrier(store, "b", r, 4, 5s);
        if (store.add(key, 0) != 4) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}
