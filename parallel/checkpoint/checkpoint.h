// A sharded checkpoint, as torch.distributed.checkpoint: every rank saves the
// blocks of the tensors it holds, an index records where each block sits in
// its whole tensor, and loading fills any layout from whichever blocks
// overlap it. A model split over 4 ranks resumes on 2, or in one process.
//
//   <dir>/shard_rank<R>.safetensors   rank R's blocks (a rank with none writes none)
//   <dir>/index.json                  every tensor's whole shape, dtype and blocks
//
// The blocks come from the tensors' placements (parallel/placement.h:
// local_blocks). A block that several ranks hold alike (along Replicate
// axes that no level of a nested layout cuts) is written once, by the ranks
// at coordinate 0 of those axes; a tensor without placements is written by
// rank 0 alone, whole. docs/checkpoint.md has the format.
//
// Not here: the train state (step, schedule, RNG), optimizer state as such
// (pass its tensors in `state` under their own names) and a `latest`
// pointer: the trainer writes those. Every file is synced before the
// rename, and the folders around it after (runtime/durable_file.h); every
// block carries CRC-32C checksums in the index. Loading reads each needed
// file's header, then only the rows of the saved blocks that overlap the
// rank's pieces, with the checksum chunks they lie in, checked.
#pragma once

#include <map>
#include <string>

#include "parallel/comm/process_group.h"
#include "tensor/safetensors.h"

namespace spmd::dist {

// Saves `state` (this rank's tensors: pieces with placements, or whole
// tensors) as a checkpoint at `dir`. Writes to "<dir>.tmp" and renames it to
// `dir` once every rank's file and the index are written, so `dir` is always
// either absent, the previous checkpoint, or the whole new one.
// Collective over `world`: every rank calls it with the same `dir`, with
// the same names for the tensors that have placements. The ranks meet
// through world's store, each wait bounded by world's timeout; a failure on
// any rank makes every rank throw, naming it.
// `files` (rank 0's: name -> content) are written into the folder beside
// the index, before the rename, so they are in it from the moment it has
// its name (the trainer's train_state.json).
// REQUIRES: `dir` on a filesystem every rank sees; no Partial() placements
// (reduce the tensor first).
void save_sharded(const TensorMap& state, const std::string& dir, ProcessGroup& world,
                  const std::map<std::string, std::string>& files = {});

// Fills every tensor of `state` in place with its values in the checkpoint at
// `dir`, whatever layout and world size saved it: a tensor with placements
// gets the boxes its own placements describe, one without gets the whole
// tensor. No communication. Throws InvalidArgument naming what is wrong: a
// name the checkpoint lacks, a whole shape or dtype that differs, a region
// no saved block covers, a missing file or key.
void load_sharded(const TensorMap& state, const std::string& dir);

// The folder that holds the checkpoint saved at `dir`: `dir` itself, or,
// when a save over an older checkpoint there was cut between its two renames
// (on a filesystem that cannot exchange them, save_sharded's fallback),
// "<dir>.old", the older checkpoint set aside whole. `dir` when neither is
// there (the caller's check names it).
std::string saved_folder(const std::string& dir);

// Whether `path` is what a save cut short leaves beside its checkpoint:
// "<dir>.tmp" (a save that never finished), or "<dir>.old" (set aside) while
// `dir` is not the checkpoint still in use (`in_use`, a name in the same
// folder). Safe to delete when no save of this job is in flight.
bool save_leftover(const std::string& path, const std::string& in_use);

}  // namespace spmd::dist
