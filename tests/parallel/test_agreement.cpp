// What every rank must share, checked at construction over real ranks (3
// processes on loopback): a DistributedSampler built over a group refuses
// ranks that pass different seeds or sizes, naming the ranks and values; a
// text (a config) that differs is named by its first differing line; equal
// values pass and the shards stay disjoint.
#include <catch2/catch.hpp>
#include <set>

#include "harness.h"
#include "parallel/agreement.h"
#include "parallel/sampler.h"
#include "tensor/ops.h"

using namespace spmd;
using namespace spmd::dist;
using spmd::dist::testing::expect;
using spmd::dist::testing::run_world;

TEST_CASE("agreement: equal sampler arguments pass, shards disjoint", "[agreement]") {
  run_world(3, [](ProcessGroup& world) {
    DistributedSampler s(30, world, /*shuffle=*/true, /*seed=*/5);
    expect(s.num_samples() == 10, "num_samples ", s.num_samples());
    // Gather every rank's indices: 3 x 10 distinct values cover 0..29.
    const std::vector<int64_t> mine = s.indices();
    Tensor all = ops::empty({30}, {DType::kI64});
    world.all_gather(all, ops::from_vector(mine, {10})).wait();
    const std::vector<int64_t> got = ops::to_vector<int64_t>(all);
    expect(std::set<int64_t>(got.begin(), got.end()).size() == 30, "the shards overlap");
  });
}

TEST_CASE("agreement: a rank with another seed is named", "[agreement]") {
  CHECK_THROWS_WITH(run_world(3,
                              [](ProcessGroup& world) {
                                const uint64_t seed = world.rank() == 2 ? 7 : 1;
                                DistributedSampler s(30, world, true, seed);
                              }),
                    Catch::Contains("DistributedSampler: the ranks disagree on seed: rank 0 has "
                                    "1, rank 2 has 7"));
}

TEST_CASE("agreement: a rank with another dataset size is named", "[agreement]") {
  CHECK_THROWS_WITH(
      run_world(3,
                [](ProcessGroup& world) {
                  DistributedSampler s(world.rank() == 0 ? 30 : 31, world, true, 1);
                }),
      Catch::Contains("disagree on dataset_size: rank 0 has 30, rank 1 has 31, rank 2 has 31"));
}

TEST_CASE("agreement: the first differing line of a text", "[agreement]") {
  run_world(2, [](ProcessGroup& world) {
    check_same_text_on_every_rank(world, "the config", "a = 1\nb = 2\n");
  });
  CHECK_THROWS_WITH(run_world(2,
                              [](ProcessGroup& world) {
                                const std::string b = world.rank() == 1 ? "b = 3" : "b = 2";
                                check_same_text_on_every_rank(world, "the config",
                                                              "a = 1\n" + b + "\nc = 4\n");
                              }),
                    Catch::Contains("the config differs between ranks: rank 0 has 'b = 2', rank "
                                    "1 has 'b = 3'"));
}
