// Tensor-parallel styles: how one module is split over the ranks of a "tp"
// mesh axis (16.5.2), as PyTorch's ParallelStyle.
//
// A style does two things to an unchanged module: it replaces the module's
// parameters by this rank's slices (recording their placements), and it
// hangs forward hooks on the module that move activations between layouts
// with the differentiable collectives of parallel/functional.h. The model's
// own forward() runs as written, on smaller matrices.
//
// Activations between modules are in one of three layouts along tp:
//   kReplicate   every rank holds the whole (B, T, C);
//   kShardSeq    rank r holds tokens [r T/tp, (r+1) T/tp): (B, T/tp, C), the
//                layout of sequence parallelism (norms and dropout on shards);
//   kShardLast   rank r holds a slice of the last dim (a column-parallel
//                output, or vocab-sharded logits).
//
// Megatron's MLP, the chapter's example, is a column-parallel w1 (each rank
// computes a slice of the hidden units, no communication) followed by a
// row-parallel w2 (each rank multiplies its slice of the hidden units by its
// rows of w2 and gets a partial sum of the output, summed by one all_reduce).
// The backward mirrors it: f, the identity forward, sums the input gradient.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/nn/module.h"
#include "parallel/device_mesh.h"

namespace spmd::dist::tp {

enum class Layout { kReplicate, kShardSeq, kShardLast };
const char* layout_name(Layout layout);

class ParallelStyle {
 public:
  virtual ~ParallelStyle() = default;
  // Splits `module` (found at `path` in the model) over the 1-D `mesh`.
  // Throws InvalidArgument naming the module when it is of the wrong type or
  // its sizes do not divide. Needs no communication.
  virtual void apply(nn::Module& module, const std::string& path, const DeviceMesh& mesh) const = 0;
  virtual std::string name() const = 0;
};

// A Linear split along its output features: weight (out, in) -> (out/tp, in),
// bias likewise, so the output is kShardLast. `segments`: a fused weight
// (GPT-2's qkv) whose output features are these consecutive parts, each split
// separately so that every rank gets whole heads of q, k and v.
struct ColwiseOptions {
  // What arrives: kReplicate (f is applied: the gradient is summed here),
  // kShardSeq (gathered along T, its gradient reduce-scattered back), or
  // prepared: a PrepareModuleInput on an enclosing module already did either.
  enum class Input { kReplicate, kShardSeq, kPrepared };
  Input input = Input::kReplicate;
  Layout output = Layout::kShardLast;  // or kReplicate: gathered along the last dim
  std::vector<int64_t> segments = {};
};

struct ColwiseParallel : ParallelStyle {
  using Input = ColwiseOptions::Input;
  explicit ColwiseParallel(ColwiseOptions options = {}) : options(std::move(options)) {}
  ColwiseOptions options;

  void apply(nn::Module& module, const std::string& path, const DeviceMesh& mesh) const override;
  std::string name() const override { return "ColwiseParallel"; }
};

// A Linear split along its input features: weight (out, in) -> (out, in/tp),
// bias replicated. Each rank's product is a partial sum: all_reduced
// (output kReplicate) or reduce-scattered along T (kShardSeq); the bias is
// added once, after the sum.
struct RowwiseOptions {
  Layout input = Layout::kShardLast;  // or kReplicate: this rank's slice is taken first
  Layout output = Layout::kReplicate;
};

struct RowwiseParallel : ParallelStyle {
  explicit RowwiseParallel(RowwiseOptions options = {}) : options(options) {}
  RowwiseOptions options;

  void apply(nn::Module& module, const std::string& path, const DeviceMesh& mesh) const override;
  std::string name() const override { return "RowwiseParallel"; }
};

// An Embedding split along the vocabulary: weight (V, C) -> (V/tp, C). Each
// rank looks up the ids it holds and writes zeros for the others; the sum
// over ranks (all_reduce, or reduce_scatter along T for kShardSeq) is the
// lookup. A head tied to this weight then computes vocab-sharded logits.
struct VocabParallelEmbedding : ParallelStyle {
  explicit VocabParallelEmbedding(Layout output = Layout::kReplicate) : output(output) {}
  Layout output;

  void apply(nn::Module& module, const std::string& path, const DeviceMesh& mesh) const override;
  std::string name() const override { return "VocabParallelEmbedding"; }
};

// The input of a module made replicated for what it contains: from
// kReplicate by f, from kShardSeq by an all_gather along T. Once per
// attention or MLP, where its projections (ColwiseParallel, kPrepared) share
// one input: one collective each way instead of one per projection.
struct PrepareModuleInput : ParallelStyle {
  explicit PrepareModuleInput(Layout from = Layout::kReplicate) : from(from) {}
  Layout from;

  void apply(nn::Module& module, const std::string& path, const DeviceMesh& mesh) const override;
  std::string name() const override { return "PrepareModuleInput"; }
};

// The same conversion on a module's output: the final norm's output, before
// a head whose weight is vocab-sharded.
struct PrepareModuleOutput : ParallelStyle {
  explicit PrepareModuleOutput(Layout from = Layout::kReplicate) : from(from) {}
  Layout from;

  void apply(nn::Module& module, const std::string& path, const DeviceMesh& mesh) const override;
  std::string name() const override { return "PrepareModuleOutput"; }
};

// Sequence parallelism for a module that works token by token (LayerNorm,
// RMSNorm): it runs as it is on kShardSeq activations. Its parameters stay
// replicated but each rank's gradient covers only its tokens, so a gradient
// hook sums it over tp.
struct SequenceParallel : ParallelStyle {
  void apply(nn::Module& module, const std::string& path, const DeviceMesh& mesh) const override;
  std::string name() const override { return "SequenceParallel"; }
};

// Dropout on kShardSeq activations with the masks of the unsplit model: the
// mask is drawn for the whole (B, T, C) from the same generator (so every
// draw advances it as the unsplit model's does) and this rank keeps its tokens.
struct SequenceParallelDropout : ParallelStyle {
  void apply(nn::Module& module, const std::string& path, const DeviceMesh& mesh) const override;
  std::string name() const override { return "SequenceParallelDropout"; }
};

// Learned positions under sequence parallelism: the (T, C) table's output
// cut to this rank's tokens (scatter_to_group along T; its backward gathers
// the table's gradient, whole on every rank).
struct SequenceParallelPositions : ParallelStyle {
  void apply(nn::Module& module, const std::string& path, const DeviceMesh& mesh) const override;
  std::string name() const override { return "SequenceParallelPositions"; }
};

}  // namespace spmd::dist::tp
