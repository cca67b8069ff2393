// DistributedSampler: each rank's share of a dataset, as
// torch.utils.data.distributed.DistributedSampler. Data parallelism only
// helps when the ranks train on different examples: the sampler cuts one
// ordering of the dataset's indices into num_replicas disjoint shards of
// equal length, and rank r keeps every num_replicas-th index starting at r.
//
//   dataset 0..9, 3 replicas, no shuffle, keep the tail (drop_last = false):
//     order   0 1 2 3 4 5 6 7 8 9 0 1      (padded with its head to 12 = 3 x 4)
//     rank 0  0     3     6     9
//     rank 1    1     4     7     0
//     rank 2      2     5     8     1
//
// With shuffle, the order is a permutation seeded by seed + epoch, the same
// on every rank (they all compute it; nothing is communicated), so calling
// set_epoch(e) before each epoch gives every epoch a new order. PyTorch draws
// that permutation with torch.randperm; here it is a Fisher-Yates shuffle
// driven by spmd's Philox generator (tensor/random.h), so the shards have
// PyTorch's structure and guarantees but not its exact indices.
//
// drop_last = false pads the order with its own head until it divides
// evenly (a few examples are seen twice per epoch); drop_last = true drops
// the tail instead (a few are not seen this epoch). Either way every rank
// gets the same number of indices, so every rank runs the same number of
// steps and their collectives stay matched.
#pragma once

#include <cstdint>
#include <vector>

namespace spmd::dist {

class ProcessGroup;

class DistributedSampler {
 public:
  // REQUIRES: dataset_size >= 0, num_replicas >= 1, 0 <= rank < num_replicas;
  // with drop_last, dataset_size >= num_replicas (else no rank gets anything).
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);
  // The replicas are the ranks of `group` (PyTorch's default: the world).
  // Collective: every rank of the group calls it, and it checks there, once,
  // that all pass the same dataset_size, shuffle, seed and drop_last
  // (InvalidArgument naming the value and the ranks that differ), since
  // ranks that disagree would draw overlapping shards without a word.
  DistributedSampler(int64_t dataset_size, ProcessGroup& group, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  // The indices of this rank for the current epoch, in the order to visit them.
  std::vector<int64_t> indices() const;
  // Chooses the epoch whose permutation indices() returns (call it at the
  // start of every epoch, with the same value on every rank).
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }
  // How many indices each rank gets per epoch: ceil(n / R), or floor(n / R)
  // with drop_last.
  int64_t num_samples() const { return num_samples_; }
  // num_samples() * num_replicas: the length of the padded or cut order.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  uint64_t epoch_ = 0;
  int64_t num_samples_;
};

// A uniformly random permutation of 0..n-1 drawn from Philox with this seed
// (Fisher-Yates). The same seed gives the same permutation on every machine.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

}  // namespace spmd::dist
