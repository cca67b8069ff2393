// A mixture-of-experts feed-forward block (nn::MoE), usable in place of the
// dense MLP of a TransformerBlock (chapter 16.8.2).
//
//   x (N, C) -> router (Linear C -> E) -> softmax -> p (N, E)
//            -> top-k experts per token, gates g (N, k) from p
//            -> the tokens grouped by expert (a permutation of rows)
//            -> expert e, an MLP of its own, on its rows
//            -> the rows back in token order, y_n = sum_j g_nj expert_{e_nj}(x_n)
//
// Gates: k = 1 keeps Switch's gate p_e (renormalized over one expert it
// would be 1 and the router would learn nothing from the loss); k >= 2
// renormalizes over the chosen k (Mixtral, GShard's top-2): g = p_e / sum p.
// Ties in top-k go to the lower expert index.
//
// Capacity: with capacity_factor > 0 each expert takes at most
// ceil(capacity_factor * N * k / E) of this call's token-expert assignments,
// first-choice assignments before second choices, tokens in order within
// each (GShard's priority); the rest are dropped: their gate counts for
// nothing and a token whose every assignment was dropped leaves the block
// as zeros, i.e. passes through on the residual. capacity_factor = 0: no
// limit, nothing is dropped. stats() counts both.
//
// The auxiliary load-balancing loss (Switch Transformer's), of the last forward:
//   aux = E * sum_e f_e * P_e
//   f_e = the share of the N*k assignments that chose e (before capacity),
//   P_e = the mean over tokens of p_e (differentiable: the router learns from it).
// It is 1 when the router spreads tokens evenly, E when it sends all to one.
// (Hugging Face's Mixtral sums f over the k choices, which gives k times
// this.) The trainer adds coef * aux to its loss (Switch: coef = 0.01).
//
// The experts are stored stacked, one tensor per weight with the expert as
// dim 0 (w1 (E, H, C): expert e's w1 is w1[e], a Linear's (out, in)), so a
// strategy that places experts on different ranks shards dim 0. The module
// knows nothing of ranks: where the grouped rows are computed is a
// Dispatcher's business; the default runs every expert here, and
// parallel/expert_parallel installs one that moves rows to the ranks that
// hold their experts.
//
// Not here: noisy or expert-choice routing, shared experts, the router
// z-loss, grouped GEMM kernels (each expert is its own matmul).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/nn/layers.h"

namespace spmd::nn {

struct MoEOptions {
  int64_t d_model = 0;         // C
  int64_t hidden = 0;          // each expert's hidden width H
  int64_t n_experts = 8;       // E
  int64_t top_k = 2;           // k: 1 (Switch) or more (Mixtral: 2)
  bool swiglu = false;         // experts w2(silu(w1 x) * w3 x); else w2(gelu(w1 x))
  bool bias = false;           // expert biases b1 (E, H), b2 (E, C), b3 (E, H) for SwiGLU
  double capacity_factor = 0;  // 0: no limit
};

// What the last forward routed, on this rank.
struct RoutingStats {
  std::vector<int64_t> tokens_per_expert;  // assignments each expert took (after capacity), E
  int64_t tokens = 0;                      // N
  int64_t dropped = 0;                     // assignments over capacity
  int64_t capacity = 0;                    // per expert; 0: no limit
};

class MoE;

// Where MoE's grouped rows are computed. The module routes and groups; a
// dispatcher takes the rows to their experts and brings the outputs back.
class MoEDispatcher {
 public:
  virtual ~MoEDispatcher() = default;
  // x (M, C): rows grouped by expert, counts[e] rows for expert e of all E,
  // in expert order. Returns the experts' outputs (M, C), in x's order.
  virtual Tensor run(MoE& moe, const Tensor& x, const std::vector<int64_t>& counts) = 0;
  // A per-expert statistic (E) summed over every rank that routes a part of
  // the same batch (so f and P are the batch's, not this rank's); its
  // gradient is the matching sum. Locally the identity.
  virtual Tensor sum_over_batch(const Tensor& t) = 0;
};

class MoE : public Module {
 public:
  // Experts initialized as torch.nn.Linear would each (U(-1/sqrt(in), 1/sqrt(in))).
  // Throws InvalidArgument unless 1 <= top_k <= n_experts and the sizes are positive.
  explicit MoE(const MoEOptions& options, Generator* gen = nullptr);
  // x (..., C) -> (..., C).
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MoE"; }

  // The experts held here, each on its block of rows: x (M, C) grouped by
  // expert, counts[i] rows for the i-th expert held (w1.size(0) of them).
  // Every expert runs, on zero rows if it has none, so each expert weight
  // has a gradient after backward. Returns (M, C).
  Tensor run_experts(const Tensor& x, const std::vector<int64_t>& counts);

  // The auxiliary loss of the last forward: a 0-d tensor in its graph.
  // REQUIRES: forward has run.
  const Tensor& aux_loss() const;
  const RoutingStats& stats() const { return stats_; }
  // Null restores the local dispatcher (every expert here).
  void set_dispatcher(std::shared_ptr<MoEDispatcher> dispatcher);

  const MoEOptions options;
  std::shared_ptr<Linear> router;  // C -> E, no bias
  Tensor w1, w2, w3;               // (E, H, C), (E, C, H), (E, H, C) for SwiGLU only
  Tensor b1, b2, b3;               // (E, H), (E, C), (E, H) for SwiGLU, when options.bias

 private:
  std::shared_ptr<MoEDispatcher> dispatcher_;
  Tensor aux_loss_;
  RoutingStats stats_;
};

// The sum of the aux losses of every MoE in `model`, from their last
// forwards; a 0-d zero (f32) when there is none.
Tensor moe_aux_loss(Module& model);
// Every MoE in `model`, with its name, in module order.
std::vector<std::pair<std::string, MoE*>> moe_layers(Module& model);

}  // namespace spmd::nn
