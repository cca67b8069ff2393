// Placements: recording them, the blocks they describe, and the two readers
// that need communication (full_tensor, the global gradient norm).
#include "parallel/placement.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/grad_mode.h"
#include "autograd/optim/clip_grad.h"
#include "parallel/functional.h"
#include "tensor/ops.h"

namespace spmd::dist {

std::string Placement::str() const {
  switch (kind) {
    case Kind::kReplicate:
      return "Replicate()";
    case Kind::kPartial:
      return "Partial()";
    case Kind::kShard: {
      std::string s = str_cat("Shard(", dim);
      for (size_t i = 0; i < segments.size(); ++i) s += str_cat(i ? "+" : ", ", segments[i]);
      return s + ")";
    }
  }
  return "?";
}

Chunk chunk_bounds(int64_t size, int64_t count, int64_t index) {
  const int64_t chunk = (size + count - 1) / count;
  const int64_t offset = std::min(index * chunk, size);
  return {offset, std::min(chunk, size - offset)};
}

Shape local_shape(const Shape& global_shape, const std::vector<Placement>& placements,
                  const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& coordinate,
                  const std::string& what) {
  std::vector<int64_t> dims(global_shape.begin(), global_shape.end());
  for (size_t a = 0; a < placements.size(); ++a) {
    const Placement& p = placements[a];
    if (!p.is_shard()) continue;
    SPMD_CHECK(p.dim >= 0 && p.dim < int(dims.size()), what, ": ", p.str(),
               " names a dim outside shape ", global_shape);
    const int64_t n = mesh_shape[a];
    if (p.segments.empty()) {
      dims[p.dim] = chunk_bounds(dims[p.dim], n, coordinate[a]).length;
      continue;
    }
    int64_t total = 0;
    for (int64_t s : p.segments) {
      SPMD_CHECK(s % n == 0, what, ": segment ", s, " of ", p.str(), " does not divide into ", n,
                 " shards");
      total += s;
    }
    SPMD_CHECK(total == dims[p.dim], what, ": the segments of ", p.str(), " add up to ", total,
               ", not dim ", p.dim, " (", dims[p.dim], ")");
    dims[p.dim] /= n;
  }
  return Shape(dims);
}

void set_placements(const Tensor& local, const DeviceMesh& mesh, std::vector<Placement> placements,
                    const Shape& global_shape, std::shared_ptr<const LayoutMeta> parent) {
  SPMD_CHECK(int(placements.size()) == mesh.ndim(), "set_placements: ", placements.size(),
             " placements for a mesh of ", mesh.ndim(), " axes");
  if (parent != nullptr) {
    const Shape parent_local =
        local_shape(parent->global_shape, parent->placements, parent->mesh.shape(),
                    parent->mesh.coordinate(), "set_placements (parent)");
    SPMD_CHECK(parent_local == global_shape, "set_placements: a piece of a piece must be cut from ",
               "the parent's local shape ", parent_local, ", not ", global_shape);
  }
  const Shape expected =
      local_shape(global_shape, placements, mesh.shape(), mesh.coordinate(), "set_placements");
  SPMD_CHECK(local.shape() == expected, "set_placements: the local tensor has shape ",
             local.shape(), " but ", global_shape, " placed so gives ", expected);
  auto meta = std::make_shared<LayoutMeta>(
      LayoutMeta{mesh, std::move(placements), global_shape, std::move(parent)});
  const_cast<Tensor&>(local).set_layout_meta(std::move(meta));
}

const LayoutMeta* placements_of(const Tensor& t) { return t.layout_meta().get(); }

const Shape& whole_shape(const LayoutMeta& layout) {
  return layout.parent ? whole_shape(*layout.parent) : layout.global_shape;
}

namespace {

// The blocks of one level: each Shard cuts every block made so far along
// its dim; segments first cut the dim into its segments (only where the
// block still spans the dim). Offsets are in this level's global_shape.
std::vector<Block> own_blocks(const LayoutMeta& layout, const std::vector<int64_t>& coordinate) {
  const int nd = layout.global_shape.ndim();
  std::vector<Block> blocks{{Shape(std::vector<int64_t>(nd, 0)), Shape(std::vector<int64_t>(nd, 0)),
                             layout.global_shape}};
  for (size_t a = 0; a < layout.placements.size(); ++a) {
    const Placement& p = layout.placements[a];
    if (!p.is_shard()) continue;
    const int64_t n = layout.mesh.shape()[a], c = coordinate[a];
    const int d = p.dim;
    std::vector<Block> next;
    for (const Block& b : blocks) {
      std::vector<int64_t> parts =
          p.segments.empty() ? std::vector<int64_t>{b.size[d]} : p.segments;
      int64_t global_start = b.global_offset[d], local_start = b.local_offset[d];
      for (int64_t len : parts) {
        const Chunk mine = chunk_bounds(len, n, c);
        std::vector<int64_t> go(b.global_offset.begin(), b.global_offset.end());
        std::vector<int64_t> lo(b.local_offset.begin(), b.local_offset.end());
        std::vector<int64_t> sz(b.size.begin(), b.size.end());
        go[d] = global_start + mine.offset;
        lo[d] = local_start;
        sz[d] = mine.length;
        if (mine.length > 0) next.push_back({Shape(go), Shape(lo), Shape(sz)});
        global_start += len;
        local_start += mine.length;
      }
    }
    blocks = std::move(next);
  }
  return blocks;
}

}  // namespace

// A piece of a piece: each own block (in the parent piece's coordinates) is
// intersected with each of the parent's blocks, and moved to the parent's
// global offsets.
std::vector<Block> local_blocks(const LayoutMeta& layout, const std::vector<int64_t>& coordinate) {
  std::vector<Block> blocks = own_blocks(layout, coordinate);
  if (layout.parent == nullptr) return blocks;
  const LayoutMeta& parent = *layout.parent;
  const std::vector<Block> outer = local_blocks(parent, parent.mesh.coordinate());
  const int nd = layout.global_shape.ndim();
  std::vector<Block> out;
  for (const Block& mine : blocks) {
    for (const Block& pb : outer) {
      std::vector<int64_t> go(nd), lo(nd), sz(nd);
      bool empty = false;
      for (int d = 0; d < nd; ++d) {
        // Both boxes in the parent piece's coordinates: mine.global_*, pb.local_*.
        const int64_t lo_d = std::max(mine.global_offset[d], pb.local_offset[d]);
        const int64_t hi_d =
            std::min(mine.global_offset[d] + mine.size[d], pb.local_offset[d] + pb.size[d]);
        if (hi_d <= lo_d) {
          empty = true;
          break;
        }
        go[d] = pb.global_offset[d] + (lo_d - pb.local_offset[d]);
        lo[d] = mine.local_offset[d] + (lo_d - mine.global_offset[d]);
        sz[d] = hi_d - lo_d;
      }
      if (!empty) out.push_back({Shape(go), Shape(lo), Shape(sz)});
    }
  }
  return out;
}

std::vector<Block> local_blocks(const Tensor& t) {
  if (const LayoutMeta* layout = placements_of(t))
    return local_blocks(*layout, layout->mesh.coordinate());
  const Shape zeros(std::vector<int64_t>(size_t(t.ndim()), 0));
  return {Block{zeros, zeros, t.shape()}};
}

Tensor box_view(const Tensor& t, const Shape& offset, const Shape& size) {
  Tensor v = t;
  for (int d = 0; d < t.ndim(); ++d) v = ops::narrow(v, d, offset[d], size[d]);
  return v;
}

// --- full_tensor -----------------------------------------------------------------------------

namespace {

// Gathered along a Shard's dim over its axis: undoes the segment cut too.
// Uneven chunks are padded to the full chunk for the gather; the valid rows
// then lie at the start (only the last ranks are short).
Tensor unshard(const Tensor& piece, const Placement& p, int64_t size, ProcessGroup& g) {
  const int64_t n = g.size();
  if (p.segments.empty()) {
    const int64_t chunk = (size + n - 1) / n;
    Tensor x = piece;
    if (piece.size(p.dim) < chunk) {
      std::vector<int64_t> pad(piece.shape().begin(), piece.shape().end());
      pad[p.dim] = chunk - piece.size(p.dim);
      x = ops::cat({piece, ops::zeros(Shape(pad), {piece.dtype(), piece.device()})}, p.dim);
    }
    return ops::narrow(gather_from_group(x, p.dim, g), p.dim, 0, size);
  }
  const Tensor gathered = gather_from_group(piece, p.dim, g);  // [r0's piece | r1's | ...]
  std::vector<Tensor> out;
  int64_t seg_start = 0;  // of a segment inside one rank's piece
  for (int64_t len : p.segments) {
    for (int64_t r = 0; r < n; ++r)
      out.push_back(ops::narrow(gathered, p.dim, r * piece.size(p.dim) + seg_start, len / n));
    seg_start += len / n;
  }
  return ops::cat(out, p.dim);
}

// Innermost axis first: its cut was applied last; then the parent's.
Tensor gather_whole(Tensor x, const LayoutMeta& layout) {
  for (int a = int(layout.placements.size()) - 1; a >= 0; --a) {
    const Placement& p = layout.placements[a];
    ProcessGroup& g = layout.mesh.group(layout.mesh.axis_names()[a]);
    if (p.is_shard()) {
      // The size this axis's cut started from: the global size, less what
      // outer axes already cut away.
      const Shape before = local_shape(
          layout.global_shape,
          std::vector<Placement>(layout.placements.begin(), layout.placements.begin() + a),
          layout.mesh.shape(), layout.mesh.coordinate(), "full_tensor");
      x = ops::contiguous(unshard(x, p, before[p.dim], g));
    } else if (p.kind == Placement::Kind::kPartial) {
      x = reduce_from_group(x, g);
    }
  }
  return layout.parent ? gather_whole(x, *layout.parent) : x;
}

}  // namespace

Tensor full_tensor(const Tensor& t) {
  const LayoutMeta* layout = placements_of(t);
  if (layout == nullptr) return t;
  NoGradGuard no_grad;
  return gather_whole(ops::contiguous(t), *layout);
}

// --- The global gradient norm ------------------------------------------------------------

double grad_norm(const std::vector<Tensor>& params) {
  // Squares summed per set of shard groups, in the order the sets first
  // appear (the same on every rank), then each sum over its groups.
  std::vector<std::vector<ProcessGroup*>> keys;
  std::vector<double> sums;
  for (const Tensor& p : params) {
    std::vector<ProcessGroup*> key;  // every axis along the chain that cuts p
    for (const LayoutMeta* layout = placements_of(p); layout; layout = layout->parent.get()) {
      for (size_t a = 0; a < layout->placements.size(); ++a) {
        if (layout->placements[a].is_shard())
          key.push_back(&layout->mesh.group(layout->mesh.axis_names()[a]));
      }
    }
    size_t i = 0;
    while (i < keys.size() && keys[i] != key) ++i;
    if (i == keys.size()) keys.push_back(key), sums.push_back(0);
    sums[i] += optim::local_grad_sq_sum({p});
  }
  double total = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    Tensor s = ops::scalar_tensor(sums[i], {DType::kF64});
    for (ProcessGroup* g : keys[i])
      if (g->size() > 1) g->wait(g->all_reduce(s), OpType::kAllReduce);
    total += s.item<double>();
  }
  return std::sqrt(total);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  const double norm = grad_norm(params);
  optim::clip_grads_with_norm_(params, max_norm, norm);
  return norm;
}

}  // namespace spmd::dist
