// Zero-copy collectives (parallel/comm/shm/zero_copy.h) in real processes:
// with every rank's tensor in a shareable block, each rank maps its peers'
// blocks (seen in its own /proc/self/maps) and the four collectives give the
// hand-worked values, in place too and for views at an offset into a block,
// and an all_reduce of many pieces and uneven parts sums and averages;
// one rank's tensor in memory it cannot share sends every rank down the
// staged path (nothing mapped, values right), and so does one rank that
// cannot map its peers' blocks (out of descriptors), with no hang; limits on
// the cached mappings too small for one collective never unmap what it uses;
// copies of 8 MiB and more at unaligned addresses (the non-temporal stores)
// are right; no rank returns while a peer still reads or writes its buffer;
// a block freed and a new one under the same descriptor number is told apart
// by its serial; a rank
// killed in a zero-copy all_reduce fails the others fast, naming it, with
// nothing left in /dev/shm. The whole collective table runs zero-copy too
// (test_comm_collectives_zerocopy).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <thread>
#include <utility>

#include "harness.h"
#include "parallel/comm/init.h"
#include "survivors.h"
#include "tensor/cpu/allocator.h"
#include "tensor/views.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

// Zero copy from 4 KiB for one test case (the forked ranks inherit it).
struct SmallZeroCopy : ScopedEnv {
  SmallZeroCopy() : ScopedEnv("SPMD_SHM_ZERO_COPY_BYTES", "4096") {}
};

// The shareable tensor blocks of other processes this process maps: memory
// files named spmd-tensor that are not this process's own blocks.
int peer_mappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:spmd-tensor") == std::string::npos) continue;
    const uintptr_t start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    cpu::ShareableBlock b;
    if (!cpu::find_shareable_block(reinterpret_cast<void*>(start), &b)) ++n;
  }
  return n;
}

bool shareable(const Tensor& t) {
  cpu::ShareableBlock b;
  return cpu::find_shareable_block(t.raw_data(), &b);
}

// A tensor in memory the allocator never saw (so not shareable).
Tensor malloc_tensor(int64_t n) {
  const size_t bytes = size_t(n) * sizeof(float);
  auto storage =
      std::make_shared<Storage>(DataPtr(std::malloc(bytes), std::free), bytes, Device::cpu());
  return Tensor(storage, Shape{n}, Shape{1}, 0, DType::kF32);
}

float* f32(const Tensor& t) { return static_cast<float*>(t.raw_data()); }

// Rank r's element i: small integers, so every sum is exact.
float value(int r, int64_t i) { return float(r * 1000 + i % 997); }

void fill_rank(const Tensor& t, int r) {
  for (int64_t i = 0; i < t.numel(); ++i) f32(t)[i] = value(r, i);
}

// The sum over p ranks of value(., i).
float sum_of(int p, int64_t i) { return float(1000 * p * (p - 1) / 2 + p * (i % 997)); }

void expect_values(const Tensor& t, const std::function<float(int64_t)>& want,
                   const std::string& what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    expect(f32(t)[i] == want(i), what, ": element ", i, " is ", f32(t)[i], ", not ", want(i));
  }
}

constexpr int64_t kN = 5003;  // 20 KiB of f32, an odd count: uneven parts

// The four collectives on tensors made by `make`, checked by hand.
void four_collectives(ProcessGroup& g, const std::function<Tensor(int64_t)>& make) {
  const int p = g.size(), r = g.rank();
  Tensor t = make(kN);
  fill_rank(t, r);
  g.all_reduce(t).wait();
  expect_values(
      t, [&](int64_t i) { return sum_of(p, i); }, "all_reduce");

  Tensor b = make(kN);
  fill_rank(b, r);
  g.broadcast(b, 1).wait();
  expect_values(
      b, [&](int64_t i) { return value(1, i); }, "broadcast from rank 1");

  Tensor in = make(kN), out = make(kN * p);
  fill_rank(in, r);
  g.all_gather(out, in).wait();
  expect_values(
      out, [&](int64_t i) { return value(int(i / kN), i % kN); }, "all_gather");

  Tensor whole = make(kN * p), mine = make(kN);
  fill_rank(whole, r);
  g.reduce_scatter(mine, whole).wait();
  expect_values(
      mine, [&](int64_t i) { return sum_of(p, r * kN + i); }, "reduce_scatter");
}

}  // namespace

TEST_CASE("zero-copy collectives read the peers' own tensors and get the values", "[comm][shm]") {
  SmallZeroCopy on;
  for (int world : {2, 3}) {
    REQUIRE_NOTHROW(run_world(world, [](ProcessGroup& g) {
      const int before = peer_mappings();
      four_collectives(g, [](int64_t n) {
        Tensor t = cpu_tensor(n, DType::kF32);
        expect(shareable(t), "a tensor of ", n, " f32 is not in a shareable block");
        return t;
      });
      expect(peer_mappings() >= before + g.size() - 1, "rank ", g.rank(), " mapped ",
             peer_mappings() - before, " peer blocks: the collectives did not go zero-copy");
    }));
  }
}

TEST_CASE("zero-copy all_reduce over many pieces and uneven parts: sum and average",
          "[comm][shm]") {
  // 3 ranks, 300,007 f32 (1.2 MiB): each rank's part is three 128 KiB pieces
  // and a partial one, the parts one element apart; every reduced piece is
  // pushed to the peers, after the average's division.
  REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    const int64_t n = 300007;
    Tensor t = cpu_tensor(n, DType::kF32);
    expect(shareable(t), "not shareable");
    fill_rank(t, r);
    g.all_reduce(t).wait();
    expect(peer_mappings() >= p - 1, "rank ", r, " mapped ", peer_mappings(),
           " peer blocks: the all_reduce was not zero-copy");
    expect_values(
        t, [&](int64_t i) { return sum_of(p, i); }, "all_reduce sum");
    fill_rank(t, r);
    g.all_reduce(t, ReduceOp::kAvg).wait();
    expect_values(
        t, [&](int64_t i) { return sum_of(p, i) / float(p); }, "all_reduce avg");
  }));
}

TEST_CASE("zero-copy in place and on views at an offset into a block", "[comm][shm]") {
  SmallZeroCopy on;
  REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    // A view in the middle of a block, with sentinels on both sides.
    Tensor block = cpu_tensor(3 * kN, DType::kF32);
    std::fill_n(f32(block), 3 * kN, -1.f);
    Tensor middle = ops::narrow(block, 0, kN, kN);
    fill_rank(middle, r);
    g.all_reduce(middle).wait();
    expect_values(
        middle, [&](int64_t i) { return sum_of(p, i); }, "all_reduce of a view");
    expect(f32(block)[kN - 1] == -1.f && f32(block)[2 * kN] == -1.f,
           "all_reduce of a view wrote outside it");

    Tensor out = cpu_tensor(kN * p, DType::kF32);  // all_gather in place: input = block r
    Tensor in = ops::narrow(out, 0, r * kN, kN);
    fill_rank(in, r);
    g.all_gather(out, in).wait();
    expect_values(
        out, [&](int64_t i) { return value(int(i / kN), i % kN); }, "all_gather in place");

    Tensor whole = cpu_tensor(kN * p, DType::kF32);  // reduce_scatter in place: output = block r
    fill_rank(whole, r);
    Tensor own = ops::narrow(whole, 0, r * kN, kN);
    g.reduce_scatter(own, whole).wait();
    expect_values(
        own, [&](int64_t i) { return sum_of(p, r * kN + i); }, "reduce_scatter in place");
  }));
}

TEST_CASE("zero-copy copies of 8 MiB and more (non-temporal stores), at unaligned addresses",
          "[comm][shm]") {
  REQUIRE_NOTHROW(run_world(2, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    const int64_t n = (int64_t(8) << 20) / 4 + 7;  // a little over 8 MiB of f32, per block
    Tensor block = cpu_tensor(p * n + 2, DType::kF32);
    Tensor out = ops::narrow(block, 0, 1, p * n);  // 4 bytes past the block's start
    Tensor in = cpu_tensor(n + 1, DType::kF32);
    Tensor mine = ops::narrow(in, 0, 1, n);
    expect(shareable(out) && shareable(mine), "not shareable");
    fill_rank(mine, r);
    g.all_gather(out, mine).wait();
    expect(peer_mappings() >= p - 1, "rank ", r, " mapped ", peer_mappings(),
           " peer blocks: the all_gather was not zero-copy");
    expect_values(
        out, [&](int64_t i) { return value(int(i / n), i % n); }, "all_gather");
    Tensor b = ops::narrow(block, 0, 1, 2 * n);
    fill_rank(b, r);
    g.broadcast(b, 0).wait();
    expect_values(
        b, [&](int64_t i) { return value(0, i); }, "broadcast");
  }));
}

TEST_CASE("no rank returns while a peer still reads or writes its buffer", "[comm][shm]") {
  SmallZeroCopy on;
  REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    const int64_t n = 64 << 10;  // 256 KiB of f32 per rank
    Tensor t = cpu_tensor(n * p, DType::kF32), in = cpu_tensor(n, DType::kF32),
           out = cpu_tensor(n * p, DType::kF32);
    for (int k = 0; k < 20; ++k) {
      fill_rank(t, r + k);  // all_reduce: the peers read and write parts of this rank's tensor
      g.all_reduce(t).wait();
      const std::vector<float> sum(f32(t), f32(t) + n * p);
      std::fill_n(f32(t), n * p, -1.f);  // at once: a peer still reading would see it
      for (int64_t i = 0; i < n * p; ++i) {
        const float want = sum_of(p, i) + float(1000 * p * k);
        expect(sum[i] == want, "all_reduce ", k, ": element ", i, " is ", sum[i], ", not ", want);
      }
      fill_rank(in, r + k);  // all_gather: the peers write blocks q != r of this rank's output
      g.all_gather(out, in).wait();
      // At once: a peer still writing would leave part of a block unwritten
      // (last round's -1s, or the first round's zeros).
      expect_values(
          out, [&](int64_t i) { return value(int(i / n) + k, i % n); }, str_cat("all_gather ", k));
      std::fill_n(f32(out), n * p, -1.f);
    }
  }));
}

TEST_CASE("the mappings one collective uses are never evicted before it ends", "[comm][shm]") {
  SmallZeroCopy on;
  // Limits so small that every collective on 3 ranks needs more than they
  // allow: each must keep its own mappings, and evict the last one's.
  for (const auto& [name, setting] :
       {std::pair{"SPMD_SHM_MAX_MAPPINGS", "1"}, std::pair{"SPMD_SHM_MAX_MAPPED_BYTES", "4096"}}) {
    INFO(name << "=" << setting);
    ScopedEnv tiny(name, setting);
    REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
      const int p = g.size(), r = g.rank();
      std::vector<Tensor> kept;  // alive, so that each round's tensors are new blocks
      for (int k = 0; k < 3; ++k) {
        four_collectives(g, [&](int64_t n) {
          kept.push_back(cpu_tensor(n, DType::kF32));
          return kept.back();
        });
        Tensor in = cpu_tensor(kN, DType::kF32), out = cpu_tensor(kN * p, DType::kF32);
        kept.push_back(in);
        kept.push_back(out);
        fill_rank(in, r + k);
        g.all_gather(out, in).wait();
        expect_values(
            out, [&](int64_t i) { return value(int(i / kN) + k, i % kN); },
            str_cat("all_gather ", k));
        expect(peer_mappings() == p - 1, "rank ", r, " maps ", peer_mappings(),
               " peer blocks after an all_gather: the earlier ones were not evicted");
      }
    }));
  }
}

TEST_CASE("one rank's tensor not shareable: every rank takes the staged path", "[comm][shm]") {
  SmallZeroCopy on;
  REQUIRE_NOTHROW(run_world(2, [](ProcessGroup& g) {
    const int before = peer_mappings();
    four_collectives(g, [&](int64_t n) {
      return g.rank() == 1 ? malloc_tensor(n) : cpu_tensor(n, DType::kF32);
    });
    expect(peer_mappings() == before, "rank ", g.rank(), " mapped a peer's block");
  }));
}

// While alive, every descriptor number this process may use is taken, so
// open() fails with EMFILE: a peer's block cannot be mapped.
class NoFreeDescriptors {
 public:
  NoFreeDescriptors() {
    ::getrlimit(RLIMIT_NOFILE, &old_);
    int highest = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      highest = std::max(highest, std::atoi(e.path().filename().c_str()));
    }
    rlimit low = old_;
    low.rlim_cur = rlim_t(highest) + 1;
    ::setrlimit(RLIMIT_NOFILE, &low);
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers_.push_back(fd);
    expect(errno == EMFILE, "open() did not run out of descriptors: ", std::strerror(errno));
  }
  ~NoFreeDescriptors() {
    for (int fd : fillers_) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &old_);
  }

 private:
  rlimit old_{};
  std::vector<int> fillers_;
};

TEST_CASE("one rank cannot map its peers' blocks: every rank takes the staged path, no hang",
          "[comm][shm]") {
  SmallZeroCopy on;
  REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank(), failing = 2;  // not broadcast's root (rank 1)
    std::vector<Tensor> made;  // made first: no new descriptor is to be had later
    for (int64_t n : {kN, kN, kN, kN * p, kN * p, kN}) made.push_back(cpu_tensor(n, DType::kF32));
    const int before = peer_mappings();
    {
      std::unique_ptr<NoFreeDescriptors> none;
      if (r == failing) none = std::make_unique<NoFreeDescriptors>();
      size_t next = 0;
      four_collectives(g, [&](int64_t n) {
        expect(made[next].numel() == n, "the tensors were made in another order");
        return made[next++];
      });
      if (r == failing) {
        expect(peer_mappings() == before, "rank ", r, " mapped a peer's block with no descriptor");
      }
    }
    // The failure was this collective's only: with descriptors again, zero copy.
    Tensor t = cpu_tensor(kN, DType::kF32);
    fill_rank(t, r);
    g.all_reduce(t).wait();
    expect_values(
        t, [&](int64_t i) { return sum_of(p, i); }, "all_reduce after");
    expect(peer_mappings() >= before + p - 1, "rank ", r, " did not go zero-copy again");
  }));
}

TEST_CASE("a freed block's descriptor number reused by a new block: the serial tells them apart",
          "[comm][shm]") {
  SmallZeroCopy on;
  REQUIRE_NOTHROW(run_world(2, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    Tensor in = cpu_tensor(kN, DType::kF32);
    Tensor first = cpu_tensor(kN * p, DType::kF32);
    fill_rank(in, r);
    g.all_gather(first, in).wait();  // each peer maps `first`, the output it writes into
    cpu::ShareableBlock a, b;
    expect(cpu::find_shareable_block(first.raw_data(), &a), "not shareable");
    first = Tensor();
    cpu::empty_host_cache();  // `first`'s block unmapped, its descriptor closed
    Tensor second = cpu_tensor(kN * p, DType::kF32);
    expect(cpu::find_shareable_block(second.raw_data(), &b), "not shareable");
    expect(a.fd == b.fd && a.serial != b.serial, "the new block has descriptor ", b.fd,
           " (the freed one had ", a.fd, "): the case is not made");
    fill_rank(in, r + 10);
    g.all_gather(second, in).wait();
    expect_values(
        second, [&](int64_t i) { return value(int(i / kN) + 10, i % kN); },
        "all_gather into a new block under an old descriptor number");
  }));
}

TEST_CASE("a rank killed in a zero-copy all_reduce fails the others fast, naming it",
          "[comm][shm][failure]") {
  const int world = 3, victim = 1;
  auto outcomes = run_processes(world, [&](int rank, const std::string& store) {
    auto g = join(rank, world, store, std::chrono::seconds(10));
    g->barrier().wait();
    Tensor big = floats(4 << 20, 1.f);  // 16 MiB: zero-copy
    if (!shareable(big)) return report("the tensor is not shareable: not zero-copy");
    if (rank == victim) {  // dies while every rank loops on all_reduces, whatever their speed
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ::kill(::getpid(), SIGKILL);
      }).detach();
    }
    // Until one fails; the group's timeout (10 s) bounds each, this loop all.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    report_outcome([&] {
      while (std::chrono::steady_clock::now() < until) g->all_reduce(big).wait();
    });
  });
  check_survivors_failed(outcomes, victim, {"all_reduce #", "in group world", "rank 1"});
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("spmd-", 0) != 0) continue;
    const int pid = std::atoi(name.c_str() + 5);
    CHECK_FALSE((pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH));  // left by a dead rank
  }
}
