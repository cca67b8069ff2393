// Placements: recording them, the blocks they describe, and the two readers
// that need communication (full_tensor, the global gradient norm).
#include "parallel/placement.h"

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

Shape local_shape(const Shape& global_shape, const std::vector<Placement>& placements,
                  const std::vector<int64_t>& mesh_shape, const std::string& what) {
  std::vector<int64_t> dims(global_shape.begin(), global_shape.end());
  for (size_t a = 0; a < placements.size(); ++a) {
    const Placement& p = placements[a];
    if (!p.is_shard()) continue;
    SPMD_CHECK(p.dim >= 0 && p.dim < int(dims.size()), what, ": ", p.str(),
               " names a dim outside shape ", global_shape);
    const int64_t n = mesh_shape[a];
    if (p.segments.empty()) {
      SPMD_CHECK(dims[p.dim] % n == 0, what, ": dim ", p.dim, " of ", global_shape, " (",
                 dims[p.dim], ") does not divide into ", n, " shards");
      dims[p.dim] /= n;
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
                    const Shape& global_shape) {
  SPMD_CHECK(int(placements.size()) == mesh.ndim(), "set_placements: ", placements.size(),
             " placements for a mesh of ", mesh.ndim(), " axes");
  const Shape expected = local_shape(global_shape, placements, mesh.shape(), "set_placements");
  SPMD_CHECK(local.shape() == expected, "set_placements: the local tensor has shape ",
             local.shape(), " but ", global_shape, " placed so gives ", expected);
  auto meta = std::make_shared<LayoutMeta>(LayoutMeta{mesh, std::move(placements), global_shape});
  const_cast<Tensor&>(local).set_layout_meta(std::move(meta));
}

const LayoutMeta* placements_of(const Tensor& t) { return t.layout_meta().get(); }

// Each Shard cuts every block made so far along its dim; segments first
// cut the dim into its segments (only where the block still spans the dim).
std::vector<Block> local_blocks(const LayoutMeta& layout, const std::vector<int64_t>& coordinate) {
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
        Block piece = b;
        std::vector<int64_t> go(b.global_offset.begin(), b.global_offset.end());
        std::vector<int64_t> lo(b.local_offset.begin(), b.local_offset.end());
        std::vector<int64_t> sz(b.size.begin(), b.size.end());
        go[d] = global_start + c * (len / n);
        lo[d] = local_start;
        sz[d] = len / n;
        piece.global_offset = Shape(go), piece.local_offset = Shape(lo), piece.size = Shape(sz);
        next.push_back(piece);
        global_start += len;
        local_start += len / n;
      }
    }
    blocks = std::move(next);
  }
  return blocks;
}

// --- full_tensor -----------------------------------------------------------------------------

namespace {

// Gathered along a Shard's dim over its axis: undoes the segment cut too.
Tensor unshard(const Tensor& piece, const Placement& p, ProcessGroup& g) {
  const Tensor gathered = gather_from_group(piece, p.dim, g);  // [r0's piece | r1's | ...]
  if (p.segments.empty()) return gathered;
  const int64_t n = g.size();
  std::vector<Tensor> out;
  int64_t seg_start = 0;  // of a segment inside one rank's piece
  for (int64_t len : p.segments) {
    for (int64_t r = 0; r < n; ++r)
      out.push_back(ops::narrow(gathered, p.dim, r * piece.size(p.dim) + seg_start, len / n));
    seg_start += len / n;
  }
  return ops::cat(out, p.dim);
}

}  // namespace

Tensor full_tensor(const Tensor& t) {
  const LayoutMeta* layout = placements_of(t);
  if (layout == nullptr) return t;
  NoGradGuard no_grad;
  Tensor x = ops::contiguous(t);
  // Innermost axis first: its cut was applied last.
  for (int a = int(layout->placements.size()) - 1; a >= 0; --a) {
    const Placement& p = layout->placements[a];
    ProcessGroup& g = layout->mesh.group(layout->mesh.axis_names()[a]);
    if (p.is_shard()) {
      x = unshard(x, p, g);
    } else if (p.kind == Placement::Kind::kPartial) {
      x = reduce_from_group(x, g);
    }
  }
  return x;
}

// --- The global gradient norm ------------------------------------------------------------

double grad_norm(const std::vector<Tensor>& params) {
  // Squares summed per set of shard groups, in the order the sets first
  // appear (the same on every rank), then each sum over its groups.
  std::vector<std::vector<ProcessGroup*>> keys;
  std::vector<double> sums;
  for (const Tensor& p : params) {
    std::vector<ProcessGroup*> key;
    if (const LayoutMeta* layout = placements_of(p)) {
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
