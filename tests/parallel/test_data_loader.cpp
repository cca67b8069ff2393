// dist::DataLoader against the two things it must equal: each rank's
// batches are what a DistributedSampler over the ranks (drop_last, a new
// epoch when a rank's shard cannot fill a batch) deals that rank, worked out
// here with the sampler alone; and the ranks' rows of a step, interleaved,
// are the one-process loader's batch, so DDP sees what one process would.
// Then, over real processes, the group constructor: equal arguments give
// the same batches as the plain one, a rank with another seed is named.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "harness.h"
#include "parallel/data_loader.h"
#include "parallel/sampler.h"
#include "runtime/error.h"
#include "tensor/ops.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

// 1000 bytes of text: 900 train tokens, (900 - 1) / 8 = 112 windows of 8 + 1.
const data::TextDataset& text() {
  static const data::TextDataset ds([] {
    std::string s;
    for (int i = 0; i < 1000; ++i) s += char('a' + (i * 7 + i / 26) % 26);
    return s;
  }());
  return ds;
}
constexpr int64_t kT = 8;

std::vector<int64_t> rows(const data::Batch& b) { return ops::to_vector<int64_t>(b.x); }

// Rank r's first `steps` batches of B windows, from a DistributedSampler.
std::vector<std::vector<int64_t>> sampler_batches(int n, int r, int64_t B, int steps,
                                                  uint64_t seed) {
  const data::TextDataset& ds = text();
  DistributedSampler sampler((ds.size(data::Split::kTrain) - 1) / kT, n, r, true, seed, true);
  std::vector<int64_t> indices;
  size_t pos = 0;
  uint64_t epoch = 0;
  std::vector<std::vector<int64_t>> out;
  for (int s = 0; s < steps; ++s) {
    if (pos + size_t(B) > indices.size()) {
      sampler.set_epoch(epoch++);
      indices = sampler.indices();
      pos = 0;
    }
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < B; ++b) starts.push_back(indices[pos++] * kT);
    out.push_back(rows(ds.batch_at(data::Split::kTrain, starts, kT)));
  }
  return out;
}

}  // namespace

TEST_CASE("DataLoader: each rank gets its sampler's shard, across epochs", "[data]") {
  for (int n : {1, 2, 3}) {
    const int64_t B = 5;  // 112 windows: 22 steps an epoch for n = 1, 11 for 2, 7 for 3
    for (int r = 0; r < n; ++r) {
      DataLoader loader(text(), kT, n * B, n, r, 9);
      const auto want = sampler_batches(n, r, B, 30, 9);  // past the end of the first epochs
      for (size_t s = 0; s < want.size(); ++s) {
        INFO("n " << n << " rank " << r << " step " << s);
        CHECK(rows(loader.next()) == want[s]);
      }
    }
  }
}

TEST_CASE("DataLoader: the ranks' rows of a step, interleaved, are one process's batch", "[data]") {
  const int n = 3;
  const int64_t B = 2;
  DataLoader whole(text(), kT, n * B, 1, 0, 4);
  std::vector<DataLoader> ranks;
  for (int r = 0; r < n; ++r) ranks.emplace_back(text(), kT, n * B, n, r, 4);
  for (int step = 0; step < 40; ++step) {
    const std::vector<int64_t> all = rows(whole.next());
    std::vector<std::vector<int64_t>> parts;
    for (DataLoader& l : ranks) parts.push_back(rows(l.next()));
    for (int64_t i = 0; i < n * B; ++i)  // row i of the step is rank i % n's row i / n
      for (int64_t t = 0; t < kT; ++t)
        REQUIRE(all[size_t(i * kT + t)] == parts[size_t(i % n)][size_t(i / n * kT + t)]);
  }
}

TEST_CASE("DataLoader over a group: the same batches, and a differing seed named", "[data][comm]") {
  REQUIRE_NOTHROW(run_world(2, [](ProcessGroup& g) {
    DataLoader grouped(text(), kT, 4, g, 7);
    DataLoader plain(text(), kT, 4, g.size(), g.rank(), 7);
    for (int s = 0; s < 3; ++s)
      expect(rows(grouped.next()) == rows(plain.next()), "step ", s, " differs");
    try {
      DataLoader odd(text(), kT, 4, g, g.rank() == 1 ? 8 : 7);
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      expect(msg.find("DataLoader: the ranks disagree on seed: rank 0 has 7, rank 1 has 8") !=
                 std::string::npos,
             "unclear message: ", msg);
      return;
    }
    expect(false, "no error for ranks with different seeds");
  }));
}
