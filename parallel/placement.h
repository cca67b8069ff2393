// Placements: how a parameter that a strategy split relates to the whole.
//
// This is the metadata half of PyTorch's DTensor, without its op dispatch.
// A split parameter is an ordinary tensor (this rank's piece) that carries a
// LayoutMeta: the mesh it was placed on, one Placement per mesh axis, and
// the global shape. Along an axis the piece is
//
//   Replicate()   the same on every rank of the axis;
//   Shard(d)      chunk `coordinate` of the global tensor's dim d, cut into
//                 as many equal chunks as the axis has ranks;
//   Shard(d, {a, b, c})  a fused tensor whose dim d is the segments a, b, c
//                 one after another (GPT-2's qkv: q, k, v), each cut evenly;
//                 the piece is the rank's chunk of every segment, in order;
//   Partial()     one term of a sum over the axis.
//
// The strategies write placements (tensor_parallel.h, FSDP); whoever needs
// the whole reads them: full_tensor() for tests and export, the global
// gradient norm for clipping, and the checkpoint (local_blocks()).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/device_mesh.h"
#include "tensor/tensor.h"

namespace spmd::dist {

struct Placement {
  enum class Kind : uint8_t { kReplicate, kShard, kPartial };
  Kind kind = Kind::kReplicate;
  int dim = 0;                    // kShard: the tensor dim that is cut
  std::vector<int64_t> segments;  // kShard of a fused tensor: the sizes of dim's segments

  static Placement replicate() { return {}; }
  static Placement shard(int dim, std::vector<int64_t> segments = {}) {
    return {Kind::kShard, dim, std::move(segments)};
  }
  static Placement partial() { return {Kind::kPartial, 0, {}}; }
  bool is_shard() const { return kind == Kind::kShard; }
  // "Replicate()", "Shard(0)", "Shard(0, 32+16+16)", "Partial()".
  std::string str() const;
};

}  // namespace spmd::dist

namespace spmd {

// What a split parameter carries (Tensor::layout_meta()).
struct LayoutMeta {
  dist::DeviceMesh mesh;
  std::vector<dist::Placement> placements;  // one per mesh axis, outermost first
  Shape global_shape;
};

}  // namespace spmd

namespace spmd::dist {

// Records that `local` is this rank's piece of a tensor of `global_shape`
// placed on `mesh` as `placements`. Checks that the local shape is the one
// the placements give (InvalidArgument naming both).
void set_placements(const Tensor& local, const DeviceMesh& mesh, std::vector<Placement> placements,
                    const Shape& global_shape);
// The layout a tensor carries; null for a tensor no strategy split.
const LayoutMeta* placements_of(const Tensor& t);

// The shape of this rank's piece, for a global shape, placements and mesh
// coordinate. Throws InvalidArgument when a sharded size does not divide.
Shape local_shape(const Shape& global_shape, const std::vector<Placement>& placements,
                  const std::vector<int64_t>& mesh_shape, const std::string& what);

// A box of the local piece and where it sits in the global tensor (the
// checkpoint's shard offsets): local[local_offset + i] = global[global_offset + i]
// for every index i < size. One block unless a fused tensor was cut by segments.
struct Block {
  Shape global_offset, local_offset, size;
};
std::vector<Block> local_blocks(const LayoutMeta& layout, const std::vector<int64_t>& coordinate);

// The whole tensor, on every rank: the pieces gathered along each sharded
// axis (and Partial ones summed). A tensor without placements comes back as
// it is. Collective over the axes the tensor is sharded or partial on.
// No gradient flows through it.
Tensor full_tensor(const Tensor& t);

// torch.nn.utils.clip_grad_norm_ over parameters that may be split: the
// squares of sharded gradients are summed over their shard axes, those of
// replicated ones counted once. Returns the global norm before clipping.
// Collective over every axis some parameter is sharded on; every rank must
// pass its parameters in the same order (as a model's parameters() gives).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);
double grad_norm(const std::vector<Tensor>& params);

}  // namespace spmd::dist
