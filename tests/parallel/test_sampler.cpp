// DistributedSampler against PyTorch's rules, worked out by hand: the
// shards of all ranks are disjoint (apart from the padding, which repeats
// the head of the order) and together cover the dataset, for sizes that do
// and do not divide, with and without drop_last; the order changes with the
// epoch and is the same on every rank; the permutation is a permutation and
// looks uniform.
#include <catch2/catch.hpp>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "parallel/sampler.h"
#include "runtime/error.h"

using spmd::dist::DistributedSampler;
using spmd::dist::random_permutation;

namespace {

// Every rank's indices for one epoch, rank by rank.
std::vector<std::vector<int64_t>> shards(int64_t n, int replicas, bool shuffle, bool drop_last,
                                         uint64_t epoch, uint64_t seed = 3) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler s(n, replicas, r, shuffle, seed, drop_last);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

// Interleaves the shards back into the global order (rank r took positions
// r, r + R, ...).
std::vector<int64_t> interleave(const std::vector<std::vector<int64_t>>& parts) {
  std::vector<int64_t> order;
  for (size_t i = 0; i < parts[0].size(); ++i)
    for (const auto& p : parts) order.push_back(p[i]);
  return order;
}

}  // namespace

TEST_CASE("no shuffle: PyTorch's worked example of 10 items on 3 replicas", "[sampler]") {
  // Order 0..9 padded with its head to 12: 0 1 2 3 4 5 6 7 8 9 0 1.
  const auto s = shards(10, 3, /*shuffle=*/false, /*drop_last=*/false, 0);
  CHECK(s[0] == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(s[1] == std::vector<int64_t>{1, 4, 7, 0});
  CHECK(s[2] == std::vector<int64_t>{2, 5, 8, 1});
  // drop_last: 9 = 3 x 3 items, the tail (9) is dropped.
  const auto d = shards(10, 3, false, /*drop_last=*/true, 0);
  CHECK(d[0] == std::vector<int64_t>{0, 3, 6});
  CHECK(d[1] == std::vector<int64_t>{1, 4, 7});
  CHECK(d[2] == std::vector<int64_t>{2, 5, 8});
  // A dataset smaller than the padding repeats itself: 2 items on 5 replicas.
  const auto tiny = shards(2, 5, false, false, 0);
  CHECK(interleave(tiny) == std::vector<int64_t>{0, 1, 0, 1, 0});
}

TEST_CASE("shards are disjoint and cover the dataset, divisible or not", "[sampler]") {
  for (int64_t n : {12, 13, 17, 100, 101}) {
    for (int replicas : {1, 2, 3, 4, 5}) {
      for (bool drop_last : {false, true}) {
        for (bool shuffle : {false, true}) {
          CAPTURE(n, replicas, drop_last, shuffle);
          const auto s = shards(n, replicas, shuffle, drop_last, 1);
          const int64_t per_rank = drop_last ? n / replicas : (n + replicas - 1) / replicas;
          for (const auto& part : s) REQUIRE(int64_t(part.size()) == per_rank);
          const std::vector<int64_t> order = interleave(s);
          const int64_t distinct = std::min<int64_t>(n, per_rank * replicas);
          // The first `distinct` positions are distinct items of the dataset...
          std::set<int64_t> seen(order.begin(), order.begin() + distinct);
          CHECK(int64_t(seen.size()) == distinct);
          for (int64_t i : seen) CHECK((i >= 0 && i < n));
          // ...without drop_last they are all of it, and the rest repeats the head.
          if (!drop_last) {
            CHECK(int64_t(seen.size()) == n);
            for (size_t i = size_t(n); i < order.size(); ++i)
              CHECK(order[i] == order[i - size_t(n)]);
          }
        }
      }
    }
  }
}

TEST_CASE("the shuffled order depends on seed + epoch only", "[sampler]") {
  const auto e0 = interleave(shards(50, 2, true, false, 0, /*seed=*/5));
  const auto e1 = interleave(shards(50, 2, true, false, 1, 5));
  CHECK(e0 != e1);                                            // a new epoch, a new order
  CHECK(e0 == interleave(shards(50, 2, true, false, 0, 5)));  // the same on every call
  CHECK(e1 == interleave(shards(50, 2, true, false, 0, 6)));  // seed 5 + epoch 1 = seed 6 + 0
  // Every rank computes the same global order on its own: rank 1's shard of
  // a 2-way split equals the odd positions of rank 0's order computed on 1 replica.
  const auto whole = shards(50, 1, true, false, 2, 9)[0];
  const auto half = shards(50, 2, true, false, 2, 9);
  for (size_t i = 0; i < half[1].size(); ++i) CHECK(half[1][i] == whole[2 * i + 1]);
}

TEST_CASE("random_permutation is a permutation and close to uniform", "[sampler]") {
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    std::vector<int64_t> p = random_permutation(n, 42);
    std::sort(p.begin(), p.end());
    std::vector<int64_t> want(static_cast<size_t>(n));
    std::iota(want.begin(), want.end(), int64_t{0});
    CHECK(p == want);
  }
  // Where item 0 lands, over 6000 seeds of a 6-item shuffle: 1000 per slot
  // expected; a chi-square with 5 degrees of freedom above 25 has p < 1e-4.
  std::map<int64_t, int> where;
  for (uint64_t seed = 0; seed < 6000; ++seed) {
    const auto p = random_permutation(6, seed);
    where[std::find(p.begin(), p.end(), 0) - p.begin()] += 1;
  }
  double chi2 = 0;
  for (int64_t slot = 0; slot < 6; ++slot)
    chi2 += (where[slot] - 1000.0) * (where[slot] - 1000.0) / 1000.0;
  CHECK(chi2 < 25);
}

TEST_CASE("bad arguments are clear errors", "[sampler]") {
  CHECK_THROWS_WITH(DistributedSampler(10, 2, 2), Catch::Contains("rank 2 is outside [0, 2)"));
  CHECK_THROWS_WITH(DistributedSampler(10, 0, 0), Catch::Contains("num_replicas 0"));
  CHECK_THROWS_WITH(DistributedSampler(-1, 2, 0), Catch::Contains("dataset_size -1"));
  CHECK_THROWS_WITH(DistributedSampler(3, 4, 0, true, 0, /*drop_last=*/true),
                    Catch::Contains("gives nothing"));
}
