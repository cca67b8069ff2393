// spmd-shm-ceiling: what the shared-memory transport can at best reach on
// this machine (docs/shm.md):
//   - memcpy bandwidth: one core copying between two buffers of each size
//     (a ring moves every byte with two such copies: in, then out);
//   - a cache line's round trip between two cores: two threads, each on its
//     own core, bounce a counter in one line (what a small message over a
//     ring costs at least, once each way);
//   - an exchange of posts between two cores: two threads, each on its own
//     core, write 8 bytes and a stamp into a line of their own, wait for the
//     other's stamp and add the two values, over and over, in two sets of
//     lines taken in turn (what the 8-byte all_reduce of 2 ranks through the
//     posts, segment_small_all_reduce.h, costs at least: its floor).
// One line of JSON per figure on stdout, with the CPU model.
//
//   spmd-shm-ceiling [--cores A,B]
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string model, family, number;
  for (std::string line; std::getline(in, line);) {
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (model.empty() && line.rfind("model name", 0) == 0) model = value();
    if (family.empty() && line.rfind("cpu family", 0) == 0) family = value();
    if (number.empty() && line.rfind("model\t", 0) == 0) number = value();
  }
  return model + " (family " + family + ", model " + number + ")";
}

void pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

double memcpy_gbps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const int reps = int(std::max<size_t>(4, (size_t(1) << 30) / bytes));
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i)
      std::memcpy((i & 1 ? a : b).data(), (i & 1 ? b : a).data(), bytes);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, double(bytes) * reps / s / 1e9);
  }
  return best;
}

double round_trip_ns(int core_a, int core_b) {
  struct alignas(64) Line {
    std::atomic<uint64_t> v{0};
  };
  Line line;
  constexpr uint64_t kTrips = 200000;
  std::thread echo([&] {
    pin(core_b);
    for (uint64_t i = 1; i <= kTrips; ++i) {
      while (line.v.load(std::memory_order_acquire) != 2 * i - 1) {
      }
      line.v.store(2 * i, std::memory_order_release);
    }
  });
  pin(core_a);
  const auto t0 = Clock::now();
  for (uint64_t i = 1; i <= kTrips; ++i) {
    line.v.store(2 * i - 1, std::memory_order_release);
    while (line.v.load(std::memory_order_acquire) != 2 * i) {
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  echo.join();
  return ns / kTrips;
}

double exchange_ns(int core_a, int core_b) {
  struct alignas(64) Post {
    std::atomic<uint64_t> stamp{0};
    double value = 0;
  };
  Post posts[2][2];  // [set][thread]
  constexpr uint64_t kExchanges = 200000;
  auto run = [&](int me, int core, double* sum) {
    pin(core);
    double v = me + 1;
    for (uint64_t s = 1; s <= kExchanges; ++s) {
      Post& mine = posts[s & 1][me];
      const Post& theirs = posts[s & 1][1 - me];
      mine.value = v;
      mine.stamp.store(s, std::memory_order_release);
      while (theirs.stamp.load(std::memory_order_acquire) != s) {
      }
      v = (mine.value + theirs.value) * 0.5;
    }
    *sum = v;
  };
  double other = 0, mine = 0;
  std::thread peer(run, 1, core_b, &other);
  const auto t0 = Clock::now();
  run(0, core_a, &mine);
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  peer.join();
  return ns / kExchanges;
}

}  // namespace

int main(int argc, char** argv) {
  int a = 0, b = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cores") == 0 && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d,%d", &a, &b) != 2) {
        std::fprintf(stderr, "--cores A,B: two core numbers\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: spmd-shm-ceiling [--cores A,B]\n");
      return 2;
    }
  }
  const std::string cpu = cpu_model();
  using nlohmann::ordered_json;  // the fields in the order written
  for (size_t mib : {1, 4, 16, 64}) {
    const ordered_json line = {
        {"figure", "memcpy"}, {"bytes", mib << 20}, {"gbps", memcpy_gbps(mib << 20)}, {"cpu", cpu}};
    std::printf("%s\n", line.dump().c_str());
  }
  const ordered_json trip = {{"figure", "cache_line_round_trip"},
                             {"cores", {a, b}},
                             {"ns", round_trip_ns(a, b)},
                             {"cpu", cpu}};
  std::printf("%s\n", trip.dump().c_str());
  const ordered_json exchange = {
      {"figure", "post_exchange"}, {"cores", {a, b}}, {"ns", exchange_ns(a, b)}, {"cpu", cpu}};
  std::printf("%s\n", exchange.dump().c_str());
  return 0;
}
