// What one TransformerBlock keeps from its forward for its backward, per
// token, under each way of checkpointing it: the activation term of a
// memory plan. tests/autograd/test_selective_checkpoint.cpp holds these
// lists to the allocator's bytes after a forward, exactly.
//
// Counted in elements per token, of the block as one process builds it
// (under tensor parallelism the projections' outputs are a tp-th of these;
// not counted here). In f32 training each element is 4 bytes; under bf16
// autocast the products' outputs are 2. Dense blocks only: an MoE block
// keeps its router's and its experts' tensors, which depend on the routing.
//
// Not counted: what a checkpointed block holds while its backward runs.
// Its recomputation rebuilds the block's kNone set (kFull) or the part of it
// that kSelective does not keep, one block at a time: a memory plan adds one
// block's kNone set to its peak.
#pragma once

#include <string>
#include <vector>

#include "autograd/nn/transformer.h"

namespace spmd::nn {

enum class BlockCheckpointing {
  kNone,       // not checkpointed: every op's saved tensors
  kFull,       // CheckpointPolicy::kRecomputeAll: the block's input
  kSelective,  // CheckpointPolicy::kSaveProducts: the input and the products' outputs
};

struct KeptTensor {
  std::string what;   // "attn.wo's output"
  int64_t per_token;  // elements per token
};

// The tensors, in forward order, of a block that runs on `device`. Dropout
// masks count when config.dropout > 0 (training). On the CPU attention's
// output holds the heads side by side (tensor/attention.h), so merging them
// for attn.wo is a view; elsewhere, and under context parallelism's ring
// attention, it is a copy that kNone keeps too (C more; the ring's case is
// not counted here). REQUIRES: config.n_experts == 0 (InvalidArgument
// otherwise).
std::vector<KeptTensor> kept_for_backward(const TransformerConfig& config, BlockCheckpointing mode,
                                          const Device& device = Device::cpu());

// Their sum: elements per token per block.
int64_t kept_per_token(const TransformerConfig& config, BlockCheckpointing mode,
                       const Device& device = Device::cpu());

}  // namespace spmd::nn
