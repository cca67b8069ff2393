// Placements: how a parameter that a strategy split relates to the whole.
//
// This is the metadata half of PyTorch's DTensor, without its op dispatch.
// A split parameter is an ordinary tensor (this rank's piece) that carries a
// LayoutMeta: the mesh it was placed on, one Placement per mesh axis, and
// the global shape. Along an axis the piece is
//
//   Replicate()   the same on every rank of the axis;
//   Shard(d)      chunk `coordinate` of the global tensor's dim d, cut as
//                 torch.chunk cuts it: chunks of ceil(size / ranks), so when
//                 the size does not divide the last ranks hold less (or
//                 nothing: 5 rows over 4 ranks are 2, 2, 1, 0);
//   Shard(d, {a, b, c})  a fused tensor whose dim d is the segments a, b, c
//                 one after another (GPT-2's qkv: q, k, v), each cut evenly;
//                 the piece is the rank's chunk of every segment, in order;
//   Partial()     one term of a sum over the axis.
//
// A piece of a piece: FSDP shards the piece that tensor parallelism left on
// a rank. Its LayoutMeta then has a `parent`, the layout of that TP piece,
// and its own global_shape is the parent piece's local shape; the readers
// below follow the chain.
//
// The strategies write placements (parallel/tensor_parallel, parallel/fsdp);
// whoever needs the whole reads them: full_tensor() for tests and export,
// the global gradient norm for clipping, and a checkpoint (local_blocks()).
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
  std::vector<dist::Placement> placements;   // one per mesh axis, outermost first
  Shape global_shape;                        // of the whole tensor, or of the parent's local piece
  std::shared_ptr<const LayoutMeta> parent;  // null unless this is a piece of a piece
};

}  // namespace spmd

namespace spmd::dist {

// Records that `local` is this rank's piece of a tensor of `global_shape`
// placed on `mesh` as `placements`. Checks that the local shape is the one
// the placements give (InvalidArgument naming both). With a `parent`,
// global_shape must be the parent's local shape (the piece being cut again).
void set_placements(const Tensor& local, const DeviceMesh& mesh, std::vector<Placement> placements,
                    const Shape& global_shape, std::shared_ptr<const LayoutMeta> parent = nullptr);
// The layout a tensor carries; null for a tensor no strategy split.
const LayoutMeta* placements_of(const Tensor& t);
// The shape of the whole tensor: the global shape at the end of the chain.
const Shape& whole_shape(const LayoutMeta& layout);

// Where chunk `index` of `count` starts along a dim of `size`, and how long
// it is, as torch.chunk cuts: chunks of ceil(size / count), the last ones
// shorter or empty.
struct Chunk {
  int64_t offset, length;
};
Chunk chunk_bounds(int64_t size, int64_t count, int64_t index);

// The shape of this rank's piece, for a global shape, placements, the mesh's
// shape and this rank's coordinate in it. Throws InvalidArgument when a
// segment does not divide by its axis (a plain Shard may be uneven).
Shape local_shape(const Shape& global_shape, const std::vector<Placement>& placements,
                  const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& coordinate,
                  const std::string& what);

// A box of the local piece and where it sits in the global tensor (the
// checkpoint's shard offsets): local[local_offset + i] = global[global_offset + i]
// for every index i < size. One block unless a fused tensor was cut by
// segments. `coordinate` is the rank's in layout.mesh; a parent's blocks are
// taken at this rank's coordinate in the parent's mesh, and the offsets are
// in the whole tensor.
struct Block {
  Shape global_offset, local_offset, size;
};
std::vector<Block> local_blocks(const LayoutMeta& layout, const std::vector<int64_t>& coordinate);
// This rank's blocks of t: those of its placements (at this rank's
// coordinate), or, for a tensor no strategy split, the whole tensor.
std::vector<Block> local_blocks(const Tensor& t);
// t[offset : offset + size] along every dim, as a view.
Tensor box_view(const Tensor& t, const Shape& offset, const Shape& size);

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
