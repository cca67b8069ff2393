// Tensor-parallel styles: each apply() slices the module's parameters to
// this rank's piece (shard()), then hangs the hooks that convert the layouts
// of its input and output (to_replicated() and the collectives of
// functional.h). Slicing needs no communication: every rank built the same
// model from the same seed and keeps its own piece of each weight.
#include "parallel/tensor_parallel/style.h"

#include "autograd/grad_mode.h"
#include "autograd/nn/layers.h"
#include "autograd/tensor_ops.h"
#include "autograd/variable.h"
#include "parallel/functional.h"
#include "parallel/placement.h"
#include "tensor/ops.h"

namespace spmd::dist::tp {

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kReplicate:
      return "Replicate";
    case Layout::kShardSeq:
      return "Shard(1)";
    case Layout::kShardLast:
      return "Shard(-1)";
  }
  return "?";
}

namespace {

using GroupPtr = std::shared_ptr<ProcessGroup>;

GroupPtr tp_group(const DeviceMesh& mesh) {
  SPMD_CHECK(mesh.ndim() == 1, "tensor parallel: expected the 1-D tp mesh (mesh[\"tp\"]), got ",
             mesh.describe());
  return mesh.group_ptr(mesh.axis_names()[0]);
}

template <class M>
M& expect_module(nn::Module& module, const std::string& path, const char* style,
                 const char* expected) {
  auto* m = dynamic_cast<M*>(&module);
  SPMD_CHECK(m != nullptr, style, ": \"", path, "\" is a ", module.type_name(), ", not a ",
             expected);
  return *m;
}

// Replaces `slot` (a whole parameter) by this rank's piece along `dim` and
// records the placement. The piece is a fresh leaf that requires grad.
void shard(Tensor& slot, int dim, const std::vector<int64_t>& segments, const DeviceMesh& mesh,
           const std::string& what) {
  const Placement p = Placement::shard(dim, segments);
  const Shape global = slot.shape();
  // Tensor parallelism cuts evenly (its ranks must do equal work).
  SPMD_CHECK(!segments.empty() || global[dim] % mesh.shape()[0] == 0, what, ": dim ", dim, " of ",
             global, " (", global[dim], ") does not divide into ", mesh.shape()[0], " shards");
  local_shape(global, {p}, mesh.shape(), mesh.coordinate(), what);  // checks the segments
  const LayoutMeta layout{mesh, {p}, global, nullptr};
  std::vector<Tensor> pieces;
  for (const Block& b : local_blocks(layout, mesh.coordinate()))
    pieces.push_back(ops::narrow(slot, dim, b.global_offset[dim], b.size[dim]));
  NoGradGuard no_grad;
  // A copy, even of rows that are contiguous already: a view would keep
  // the whole parameter's storage (and, on the meta device, would make the
  // rank materialize the whole of it).
  Tensor local = pieces.size() == 1 ? ops::clone(pieces[0]) : ops::cat(pieces, dim);
  local.requires_grad_();
  set_placements(local, mesh, {p}, global);
  slot = local;
}

// A replicated parameter whose gradient each rank computes from its tokens
// only: the gradient that flows in is summed over tp before it accumulates.
void sum_grad_over(const Tensor& param, GroupPtr g) {
  if (!param.defined()) return;
  register_hook(param, [g](const Tensor& grad) {
    Tensor total = ops::clone(grad);
    g->wait(g->all_reduce(total), OpType::kAllReduce);
    return total;
  });
}

// f (from kReplicate) or an all_gather along T (from kShardSeq): the tensor
// becomes whole on every rank, its gradient summed back.
Tensor to_replicated(const Tensor& x, Layout from, ProcessGroup& g, const char* style) {
  if (from == Layout::kReplicate) return copy_to_group(x, g);
  SPMD_CHECK(from == Layout::kShardSeq, style, ": cannot prepare an input from ",
             layout_name(from));
  return all_gather(x, 1, g);
}

}  // namespace

// --- Column- and row-parallel Linear ------------------------------------------------------

void ColwiseParallel::apply(nn::Module& module, const std::string& path,
                            const DeviceMesh& mesh) const {
  auto& lin = expect_module<nn::Linear>(module, path, "ColwiseParallel", "Linear");
  SPMD_CHECK(options.output == Layout::kShardLast || options.output == Layout::kReplicate,
             "ColwiseParallel (", path, "): the output is Shard(-1) or Replicate, not ",
             layout_name(options.output));
  GroupPtr g = tp_group(mesh);
  shard(lin.weight, 0, options.segments, mesh, "ColwiseParallel (" + path + ".weight)");
  if (lin.bias.defined())
    shard(lin.bias, 0, options.segments, mesh, "ColwiseParallel (" + path + ".bias)");
  if (options.input == Input::kReplicate) {
    lin.register_forward_pre_hook([g](nn::Module&, Tensor& x) { x = copy_to_group(x, *g); });
  } else if (options.input == Input::kShardSeq) {
    lin.register_forward_pre_hook([g](nn::Module&, Tensor& x) { x = all_gather(x, 1, *g); });
  }
  if (options.output == Layout::kReplicate) {
    lin.register_forward_hook(
        [g](nn::Module&, const Tensor&, Tensor& y) { y = gather_from_group(y, -1, *g); });
  }
}

// Linear::forward would add the bias on every rank, tp times in the sum; so
// the pre-hook lends the bias out of the module for the call and the
// post-hook adds it to the reduced output (the parameter itself, so its
// gradient accumulates where the optimizer looks).
void RowwiseParallel::apply(nn::Module& module, const std::string& path,
                            const DeviceMesh& mesh) const {
  auto& lin = expect_module<nn::Linear>(module, path, "RowwiseParallel", "Linear");
  SPMD_CHECK(options.input == Layout::kShardLast || options.input == Layout::kReplicate,
             "RowwiseParallel (", path, "): the input is Shard(-1) or Replicate, not ",
             layout_name(options.input));
  SPMD_CHECK(options.output == Layout::kReplicate || options.output == Layout::kShardSeq,
             "RowwiseParallel (", path, "): the output is Replicate or Shard(1), not ",
             layout_name(options.output));
  GroupPtr g = tp_group(mesh);
  shard(lin.weight, 1, {}, mesh, "RowwiseParallel (" + path + ".weight)");
  auto lent_bias = std::make_shared<Tensor>();
  const Layout in = options.input, out = options.output;
  lin.register_forward_pre_hook([g, in, lent_bias](nn::Module& m, Tensor& x) {
    if (in == Layout::kReplicate) x = scatter_to_group(x, -1, *g);
    auto& l = static_cast<nn::Linear&>(m);
    std::swap(*lent_bias, l.bias);  // l.bias is now undefined: forward adds none
  });
  lin.register_forward_hook([g, out, lent_bias](nn::Module& m, const Tensor&, Tensor& y) {
    auto& l = static_cast<nn::Linear&>(m);
    std::swap(*lent_bias, l.bias);  // the bias is back in its slot
    y = out == Layout::kReplicate ? reduce_from_group(y, *g) : reduce_scatter(y, 1, *g);
    if (l.bias.defined()) y = add(y, l.bias);
  });
  if (options.output == Layout::kShardSeq)
    sum_grad_over(lin.bias, g);  // added to this rank's tokens only
}

// --- Vocabulary-parallel embedding ----------------------------------------------------------

void VocabParallelEmbedding::apply(nn::Module& module, const std::string& path,
                                   const DeviceMesh& mesh) const {
  auto& emb = expect_module<nn::Embedding>(module, path, "VocabParallelEmbedding", "Embedding");
  SPMD_CHECK(output == Layout::kReplicate || output == Layout::kShardSeq,
             "VocabParallelEmbedding (", path, "): the output is Replicate or Shard(1), not ",
             layout_name(output));
  GroupPtr g = tp_group(mesh);
  const int64_t vocab = emb.weight.size(0);
  shard(emb.weight, 0, {}, mesh, "VocabParallelEmbedding (" + path + ".weight)");
  const int64_t rows = emb.weight.size(0), first = mesh.coordinate()[0] * rows;
  auto held = std::make_shared<Tensor>();  // bool (..., 1): the ids this rank holds
  emb.register_forward_pre_hook([first, rows, vocab, held](nn::Module&, Tensor& ids) {
    if (ids.numel() > 0) {  // an id no rank holds would otherwise look up zeros, silently
      const double lo = ops::amin(ids).item<double>(), hi = ops::amax(ids).item<double>();
      SPMD_CHECK(lo >= 0 && hi < double(vocab), "VocabParallelEmbedding: ids must lie in [0, ",
                 vocab, "), got ids from ", lo, " to ", hi);
    }
    const Tensor mine =
        ops::logical_and(ops::ge(ids, double(first)), ops::lt(ids, double(first + rows)));
    *held = ops::unsqueeze(mine, -1);
    ids = ops::mul(ops::sub(ids, double(first)), ops::to(mine, ids.dtype()));  // others: row 0
  });
  const Layout out = output;
  emb.register_forward_hook([g, out, held](nn::Module&, const Tensor&, Tensor& y) {
    y = mul(y, ops::to(*held, y.dtype()));  // zeros for ids another rank holds
    *held = Tensor();
    y = out == Layout::kReplicate ? reduce_from_group(y, *g) : reduce_scatter(y, 1, *g);
  });
}

// --- Layout conversions at module boundaries ------------------------------------------------

void PrepareModuleInput::apply(nn::Module& module, const std::string& path,
                               const DeviceMesh& mesh) const {
  GroupPtr g = tp_group(mesh);
  const Layout f = from;
  module.register_forward_pre_hook(
      [g, f](nn::Module&, Tensor& x) { x = to_replicated(x, f, *g, "PrepareModuleInput"); });
}

void PrepareModuleOutput::apply(nn::Module& module, const std::string& path,
                                const DeviceMesh& mesh) const {
  GroupPtr g = tp_group(mesh);
  const Layout f = from;
  module.register_forward_hook([g, f](nn::Module&, const Tensor&, Tensor& y) {
    y = to_replicated(y, f, *g, "PrepareModuleOutput");
  });
}

// --- Sequence parallelism --------------------------------------------------------------------

void SequenceParallel::apply(nn::Module& module, const std::string& path,
                             const DeviceMesh& mesh) const {
  GroupPtr g = tp_group(mesh);
  if (auto* ln = dynamic_cast<nn::LayerNorm*>(&module)) {
    sum_grad_over(ln->weight, g);
    sum_grad_over(ln->bias, g);
  } else if (auto* rms = dynamic_cast<nn::RMSNorm*>(&module)) {
    sum_grad_over(rms->weight, g);
  } else {
    SPMD_THROW(InvalidArgument, "SequenceParallel: \"", path, "\" is a ", module.type_name(),
               ", not a LayerNorm or RMSNorm");
  }
}

void SequenceParallelDropout::apply(nn::Module& module, const std::string& path,
                                    const DeviceMesh& mesh) const {
  auto* drop = dynamic_cast<nn::Dropout*>(&module);
  SPMD_CHECK(drop != nullptr, "SequenceParallelDropout: \"", path, "\" is a ", module.type_name(),
             ", not a Dropout");
  const int64_t n = mesh.shape()[0], r = mesh.coordinate()[0];
  auto lent_p = std::make_shared<double>(0);
  drop->register_forward_pre_hook([lent_p](nn::Module& m, Tensor&) {
    std::swap(*lent_p, static_cast<nn::Dropout&>(m).p);  // forward is the identity
  });
  drop->register_forward_hook([lent_p, n, r](nn::Module& m, const Tensor&, Tensor& y) {
    auto& d = static_cast<nn::Dropout&>(m);
    std::swap(*lent_p, d.p);
    if (!d.is_training() || d.p == 0) return;
    // spmd::dropout's mask for the whole (B, T, C), then this rank's tokens.
    std::vector<int64_t> whole(y.shape().begin(), y.shape().end());
    whole[1] *= n;
    const Tensor u = ops::rand(Shape(whole), {y.dtype(), y.device()});
    const Tensor scale = ops::mul(ops::to(ops::ge(u, d.p), y.dtype()), 1.0 / (1.0 - d.p));
    y = mul(y, ops::contiguous(ops::narrow(scale, 1, r * y.size(1), y.size(1))));
  });
}

void SequenceParallelPositions::apply(nn::Module& module, const std::string& path,
                                      const DeviceMesh& mesh) const {
  expect_module<nn::Embedding>(module, path, "SequenceParallelPositions", "Embedding");
  GroupPtr g = tp_group(mesh);
  module.register_forward_hook(
      [g](nn::Module&, const Tensor&, Tensor& y) { y = scatter_to_group(y, 0, *g); });
}

}  // namespace spmd::dist::tp
