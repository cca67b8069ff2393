// FSDP's two views of a model's state, as torch.distributed.checkpoint's
// state_dict helpers.
//
//   sharded: model.state_dict() as it is between steps: every parameter is
//            this rank's shard and carries its placements, so each rank
//            saves its own piece with its offsets, with no communication
//            (parallel/checkpoint writes such maps to disk and reads them
//            back under any other layout).
//   full:    every tensor whole (gathered along its shard axes, and those of
//            tensor parallelism), as one process would have it: what a plain
//            model loads, or a safetensors file for export.
#pragma once

#include "autograd/nn/module.h"

namespace spmd::dist {

// Every parameter and buffer whole, on every rank (save it from one).
// Collective over every axis some parameter is split on (all ranks call it,
// in step); one tensor is gathered at a time, so the peak is the whole model
// plus one tensor.
TensorMap full_state_dict(const nn::Module& model);

// Loads whole tensors (a full state dict, or a plain model's state_dict())
// into a model whose parameters may be sharded: each rank copies the blocks
// its pieces hold. No communication. strict: the names must match both ways.
// Throws InvalidArgument naming a missing name or a whole shape that differs.
void load_full_state_dict(nn::Module& model, const TensorMap& full, bool strict = true);

}  // namespace spmd::dist
