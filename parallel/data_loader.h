// DataLoader: a data-parallel rank's batches of a text. The training text
// is cut into windows of T + 1 tokens (window i starts at token i * T), one
// shuffled order per epoch (seeded by the seed and the epoch, the same on
// every rank), and each step the next global_batch windows of that order
// are dealt over the dp ranks as a DistributedSampler (sampler.h) deals
// them: dp rank r takes every dp_size-th window starting at r. Ranks that
// differ only in their tp coordinate have the same dp rank and so the same
// windows. Used by spmd-train and by the examples (05_ddp, 09_device_mesh).
//
// The position is the number of windows the whole job has consumed
// (samples_consumed): a resumed run sets it and sees exactly the windows the
// uninterrupted run would have, none twice, none skipped.
#pragma once

#include <cstdint>

#include "autograd/data/text_dataset.h"
#include "parallel/sampler.h"

namespace spmd::dist {

class ProcessGroup;

class DataLoader {
 public:
  // REQUIRES: global_batch divides by dp_size; the text holds at least
  // global_batch windows (checked, naming both).
  DataLoader(const data::TextDataset& dataset, int64_t seq_len, int64_t global_batch,
             int64_t dp_size, int64_t dp_rank, uint64_t seed);
  // The dp ranks are the ranks of `dp_group`. Collective: checks, once,
  // that every rank passes the same seq_len, global_batch, seed and text
  // length (InvalidArgument naming the value and the ranks), since ranks
  // that disagree would draw overlapping batches without a word.
  DataLoader(const data::TextDataset& dataset, int64_t seq_len, int64_t global_batch,
             ProcessGroup& dp_group, uint64_t seed);

  // This rank's rows of the next global batch: (global_batch / dp_size, T).
  data::Batch next();
  int64_t samples_consumed() const { return consumed_; }
  // Moves to a position a previous run reached (a multiple of global_batch).
  void set_samples_consumed(int64_t consumed);
  int64_t windows_per_epoch() const { return windows_; }

 private:
  const data::TextDataset& dataset_;
  int64_t T_, global_batch_, dp_size_, dp_rank_, windows_;
  uint64_t seed_;
  int64_t consumed_ = 0;
};

}  // namespace spmd::dist
