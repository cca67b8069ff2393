// What spmd-train checks before it builds anything, so that a bad value is
// refused in the config's words (the key, its value, the limit, why) at
// start, never found out by the first save, the first metrics line or an
// allocation that cannot succeed:
//
//   check_run     the layout against the world (check_layout), the same
//                 config on every rank, AdamW; training.threads against
//                 the CPUs this process may run on; checkpoint.folder and
//                 metrics.run_folder made (if absent) and writable, and
//                 locked by rank 0 for the run (runtime/folder_lock.h: a
//                 second job pointed at them is refused, naming the holder)
//   (the memory plan, train/memory_plan.h: the bytes the config implies
//   against the machine's budget)
//   load_dataset  the data read, and long enough for one global batch of
//                 windows of model.seq_len + 1 tokens (and one eval batch
//                 when evals are asked for)
//
// Not here: what load_config() checks in one config alone (types, ranges,
// choices; train/config.h), and a checkpoint's own files, checked as they
// are loaded (train/train_checkpoint.h).
#pragma once

#include <vector>

#include "autograd/data/text_dataset.h"
#include "parallel/comm/process_group.h"
#include "runtime/folder_lock.h"
#include "train/config.h"

namespace spmd::train {

// Collective over `world`: every rank checks the same config. Makes
// checkpoint.folder (when set) and metrics.run_folder; rank 0 locks them
// (one lock when they are the same folder), and the run keeps the returned
// locks while it writes there. Throws InvalidArgument naming the key.
std::vector<FolderLock> check_run(const TrainConfig& config, dist::ProcessGroup& world);

// Throws on every rank the refusal of the first rank whose `why` is not
// empty ("rank 1: ..." on the others); returns when every `why` is empty.
// So a check that one rank alone can fail (its folder, its piece of a
// checkpoint) stops every rank, none left waiting in a later collective
// for a rank that stopped. Collective over `world`.
void refuse_together(dist::ProcessGroup& world, const std::string& why);

// The CPUs this process may run on (its affinity mask, as `nproc` counts
// them): the most training.threads may be, and OpenMP's default.
int cpus_available();

// The text's bytes (data.tokenizer = "byte"; data.path = "": the embedded
// text) or the token file's tokens ("bpe"). Throws naming data.path, its
// token count and the tokens needed when it holds fewer windows of
// model.seq_len + 1 tokens than training.global_batch, or no eval batch
// while metrics.eval_every asks for evals.
data::TextDataset load_dataset(const TrainConfig& config);

}  // namespace spmd::train
