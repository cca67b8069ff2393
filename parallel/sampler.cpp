// DistributedSampler: one shared order of the dataset (shuffled by seed +
// epoch, or not), padded or cut to a multiple of the replica count, then
// dealt out round-robin. Every rank computes the whole order and keeps its
// share; no communication is needed because the seed is the same everywhere.
#include "parallel/sampler.h"

#include <array>
#include <numeric>
#include <utility>

#include "parallel/agreement.h"
#include "runtime/error.h"
#include "tensor/random.h"

namespace spmd::dist {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  SPMD_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size ", dataset_size, " is negative");
  SPMD_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas ", num_replicas,
             " must be at least 1");
  SPMD_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
             " is outside [0, ", num_replicas, ")");
  // drop_last: the largest multiple of R not above n; else the smallest not below it.
  num_samples_ =
      drop_last ? dataset_size / num_replicas : (dataset_size + num_replicas - 1) / num_replicas;
  SPMD_CHECK(!drop_last || num_samples_ > 0, "DistributedSampler: with drop_last, a dataset of ",
             dataset_size, " examples gives nothing to each of ", num_replicas, " replicas");
}

DistributedSampler::DistributedSampler(int64_t dataset_size, ProcessGroup& group, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : DistributedSampler(dataset_size, group.size(), group.rank(), shuffle, seed, drop_last) {
  check_same_on_every_rank(group, "DistributedSampler",
                           {{"dataset_size", dataset_size},
                            {"seed", int64_t(seed)},
                            {"shuffle", shuffle},
                            {"drop_last", drop_last}});
}

std::vector<int64_t> DistributedSampler::indices() const {
  // 1. One order of the whole dataset, the same on every rank.
  std::vector<int64_t> order;
  if (shuffle_) {
    order = random_permutation(dataset_size_, seed_ + epoch_);
  } else {
    order.resize(size_t(dataset_size_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  // 2. Pad with the order's own head (repeatedly, if the dataset is smaller
  // than the padding), or cut the tail, to total_size().
  const size_t total = size_t(total_size());
  if (order.size() > total) {
    order.resize(total);
  } else if (!order.empty()) {
    for (size_t i = 0; order.size() < total; ++i) order.push_back(order[i]);
  }
  // 3. Deal round-robin: this rank takes positions rank, rank + R, rank + 2R, ...
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (size_t i = size_t(rank_); i < order.size(); i += size_t(num_replicas_)) {
    mine.push_back(order[i]);
  }
  return mine;
}

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> perm(size_t(n > 0 ? n : 0));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  // Fisher-Yates from the back: swap position i with a uniform j in [0, i].
  // Step s uses the 64 bits of Philox lanes (2(s%2), 2(s%2)+1) of counter s/2;
  // j = floor(u64 * (i+1) / 2^64), whose bias, (i+1) / 2^64, is far below
  // anything a dataset could show.
  std::array<uint32_t, 4> lanes{};
  for (int64_t i = n - 1, step = 0; i > 0; --i, ++step) {
    if (step % 2 == 0) lanes = philox4x32(seed, uint64_t(step / 2));
    const int lane = int(step % 2) * 2;
    const uint64_t u = (uint64_t(lanes[size_t(lane)]) << 32) | lanes[size_t(lane) + 1];
    const auto j = int64_t((static_cast<unsigned __int128>(u) * uint64_t(i + 1)) >> 64);
    std::swap(perm[size_t(i)], perm[size_t(j)]);
  }
  return perm;
}

}  // namespace spmd::dist
