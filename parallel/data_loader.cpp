// DataLoader: where the next global batch lies in its epoch's order.
#include "parallel/data_loader.h"

#include "parallel/agreement.h"
#include "parallel/comm/process_group.h"
#include "runtime/error.h"

namespace spmd::dist {

DataLoader::DataLoader(const data::TextDataset& dataset, int64_t seq_len, int64_t global_batch,
                       int64_t dp_size, int64_t dp_rank, uint64_t seed)
    : dataset_(dataset),
      T_(seq_len),
      global_batch_(global_batch),
      dp_size_(dp_size),
      dp_rank_(dp_rank),
      windows_((dataset.size(data::Split::kTrain) - 1) / seq_len),
      seed_(seed) {
  SPMD_CHECK(global_batch % dp_size == 0, "training.global_batch ", global_batch,
             " does not divide among the ", dp_size, " data-parallel ranks");
  SPMD_CHECK(windows_ >= global_batch, "the training text holds ", windows_, " windows of ",
             seq_len + 1, " tokens, fewer than training.global_batch = ", global_batch);
}

DataLoader::DataLoader(const data::TextDataset& dataset, int64_t seq_len, int64_t global_batch,
                       ProcessGroup& dp_group, uint64_t seed)
    : DataLoader(dataset, seq_len, global_batch, dp_group.size(), dp_group.rank(), seed) {
  check_same_on_every_rank(dp_group, "DataLoader",
                           {{"seq_len", seq_len},
                            {"global_batch", global_batch},
                            {"seed", int64_t(seed)},
                            {"training tokens", dataset.size(data::Split::kTrain)}});
}

// Whole batches per epoch: the tail of an epoch's order that does not fill
// a batch is dropped, so a batch never spans two epochs.
data::Batch DataLoader::next() {
  const int64_t per_epoch = windows_ / global_batch_;
  const int64_t batch = consumed_ / global_batch_;
  const uint64_t epoch = uint64_t(batch / per_epoch);
  // One sampler over the whole order (1 replica): every rank computes it alike.
  dist::DistributedSampler order(windows_, 1, 0, /*shuffle=*/true, seed_, /*drop_last=*/false);
  order.set_epoch(epoch);
  const std::vector<int64_t> indices = order.indices();
  const int64_t first = (batch % per_epoch) * global_batch_;
  std::vector<int64_t> starts;
  for (int64_t i = dp_rank_; i < global_batch_; i += dp_size_)
    starts.push_back(indices[size_t(first + i)] * T_);
  consumed_ += global_batch_;
  return dataset_.batch_at(data::Split::kTrain, starts, T_);
}

void DataLoader::set_samples_consumed(int64_t consumed) {
  SPMD_CHECK(consumed >= 0 && consumed % global_batch_ == 0, "a data position of ", consumed,
             " samples is not a whole number of global batches of ", global_batch_);
  consumed_ = consumed;
}

}  // namespace spmd::dist
