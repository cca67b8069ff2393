// nn::MoE: route (on the host), group the tokens by expert, run the experts
// through the dispatcher, combine with the gates; the balancing loss beside.
#include "autograd/nn/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/grad_mode.h"
#include "autograd/nn_functional.h"
#include "autograd/tensor_ops.h"
#include "tensor/ops.h"

namespace spmd::nn {
namespace {

// Every expert here, no communication.
class LocalDispatcher final : public MoEDispatcher {
 public:
  Tensor run(MoE& moe, const Tensor& x, const std::vector<int64_t>& counts) override {
    return moe.run_experts(x, counts);
  }
  Tensor sum_over_batch(const Tensor& t) override { return t; }
};

// The host-side decisions of one forward. An assignment is a (token n,
// choice j) pair, its slot n*k + j.
struct Routing {
  std::vector<int64_t> choice;    // (N, k): the expert of each slot
  std::vector<int64_t> chosen;    // (E): slots that chose e, before capacity
  std::vector<int64_t> counts;    // (E): slots e took
  std::vector<int64_t> rows;      // (M): the token of each grouped row, grouped by expert
  std::vector<int64_t> slot_row;  // (N, k): the grouped row of each slot; M when dropped
  int64_t capacity = 0, dropped = 0;
};

// Top-k of each token's probabilities (N, E), then capacity in GShard's
// priority: every token's first choice, then every token's second, ...
Routing route(const std::vector<double>& p, int64_t N, int64_t E, int64_t k, double factor) {
  Routing r;
  r.choice.resize(size_t(N * k));
  r.chosen.assign(size_t(E), 0);
  std::vector<int64_t> order(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const double* pn = p.data() + n * E;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      return pn[a] > pn[b] || (pn[a] == pn[b] && a < b);  // ties: the lower index
    });
    for (int64_t j = 0; j < k; ++j) {
      r.choice[size_t(n * k + j)] = order[size_t(j)];
      ++r.chosen[size_t(order[size_t(j)])];
    }
  }
  if (factor > 0) r.capacity = int64_t(std::ceil(factor * double(N * k) / double(E)));
  const int64_t limit = r.capacity > 0 ? r.capacity : N * k;
  // The slots each expert took, in priority order.
  std::vector<std::vector<int64_t>> taken(static_cast<size_t>(E));
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t n = 0; n < N; ++n) {
      auto& slots = taken[size_t(r.choice[size_t(n * k + j)])];
      if (int64_t(slots.size()) < limit) {
        slots.push_back(n * k + j);
      } else {
        ++r.dropped;
      }
    }
  }
  r.slot_row.assign(size_t(N * k), -1);
  for (const auto& slots : taken) {
    r.counts.push_back(int64_t(slots.size()));
    for (int64_t slot : slots) {
      r.slot_row[size_t(slot)] = int64_t(r.rows.size());
      r.rows.push_back(slot / k);
    }
  }
  for (int64_t& row : r.slot_row)
    if (row < 0) row = int64_t(r.rows.size());  // the zero row after the last
  return r;
}

// The router's probabilities (N, E) as the host reads them to route. A
// meta tensor has none (a dry run, train/dry_run.h): its stand-in routes
// uniformly, token n preferring experts nk, nk + 1, ..., nk + k - 1 (mod
// E) in that order, so that every expert takes N k / E of the slots.
std::vector<double> routing_probs(const Tensor& probs, int64_t k) {
  if (!probs.device().is_meta()) return ops::to_vector<double>(probs);
  const int64_t N = probs.size(0), E = probs.size(1);
  std::vector<double> p(size_t(N * E));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e)  // rank of e among token n's choices: (e - nk) mod E
      p[size_t(n * E + e)] = 1.0 / double(1 + ((e - n * k) % E + E) % E);
  return p;
}

Tensor index_tensor(const std::vector<int64_t>& v, Device device) {
  return ops::from_vector(v, Shape{int64_t(v.size())}, device);
}

// Switch's aux = E sum_e f_e P_e over the batch: f_e = chosen_e / (N k),
// P_e = sum_n p_ne / N, with both sums taken over every rank of the batch.
Tensor balance_loss(const Tensor& probs, const std::vector<int64_t>& chosen, int64_t k,
                    MoEDispatcher& dispatcher) {
  const int64_t E = probs.size(1);
  const std::vector<double> local(chosen.begin(), chosen.end());
  const Tensor chosen_local =
      ops::to(ops::from_vector(local, Shape{E}, probs.device()), probs.dtype());
  const Tensor counts = dispatcher.sum_over_batch(chosen_local);        // (E), no gradient
  const Tensor prob_sums = dispatcher.sum_over_batch(sum(probs, {0}));  // (E)
  const std::vector<double> c = ops::to_vector<double>(counts);
  const double assignments = std::accumulate(c.begin(), c.end(), 0.0);  // N k
  const double tokens = assignments / double(k);
  return mul(sum(mul(prob_sums, counts)), double(E) / (assignments * tokens));
}

}  // namespace

// --- Construction -------------------------------------------------------------------

MoE::MoE(const MoEOptions& o, Generator* gen)
    : options(o), dispatcher_(std::make_shared<LocalDispatcher>()) {
  SPMD_CHECK(o.d_model > 0 && o.hidden > 0 && o.n_experts > 0, "MoE: d_model ", o.d_model,
             ", hidden ", o.hidden, " and n_experts ", o.n_experts, " must be positive");
  SPMD_CHECK(o.top_k >= 1 && o.top_k <= o.n_experts, "MoE: top_k ", o.top_k,
             " must be between 1 and n_experts (", o.n_experts, ")");
  SPMD_CHECK(o.capacity_factor >= 0, "MoE: capacity_factor ", o.capacity_factor,
             " must be >= 0 (0: no limit)");
  const int64_t E = o.n_experts, C = o.d_model, H = o.hidden;
  router = register_module("router", std::make_shared<Linear>(C, E, /*bias=*/false, gen));
  const double in_c = 1.0 / std::sqrt(double(C)), in_h = 1.0 / std::sqrt(double(H));
  w1 = ops::uniform({E, H, C}, -in_c, in_c, {}, gen);
  if (o.bias) b1 = ops::uniform({E, H}, -in_c, in_c, {}, gen);
  w2 = ops::uniform({E, C, H}, -in_h, in_h, {}, gen);
  if (o.bias) b2 = ops::uniform({E, C}, -in_h, in_h, {}, gen);
  if (o.swiglu) w3 = ops::uniform({E, H, C}, -in_c, in_c, {}, gen);
  if (o.swiglu && o.bias) b3 = ops::uniform({E, H}, -in_c, in_c, {}, gen);
  register_parameter("w1", w1);
  register_parameter("b1", b1);
  register_parameter("w2", w2);
  register_parameter("b2", b2);
  register_parameter("w3", w3);
  register_parameter("b3", b3);
}

void MoE::set_dispatcher(std::shared_ptr<MoEDispatcher> dispatcher) {
  dispatcher_ = dispatcher ? std::move(dispatcher) : std::make_shared<LocalDispatcher>();
}

const Tensor& MoE::aux_loss() const {
  SPMD_CHECK(aux_loss_.defined(), "MoE::aux_loss: no forward has run yet");
  return aux_loss_;
}

// --- Forward --------------------------------------------------------------------------

Tensor MoE::forward(const Tensor& x) {
  const int64_t C = options.d_model, k = options.top_k;
  SPMD_CHECK(x.ndim() >= 1 && x.size(-1) == C, "MoE: expected (..., ", C, ") input, got ",
             x.shape());
  const int64_t N = x.numel() / C;
  SPMD_CHECK(N > 0, "MoE: the input ", x.shape(), " holds no token");
  const Tensor xf = reshape(x, {N, C});
  const Tensor probs = softmax((*router)(xf), -1);  // (N, E)

  // 1. Route: each token's top k, then capacity (host-side decisions).
  const Routing r =
      route(routing_probs(probs, k), N, options.n_experts, k, options.capacity_factor);
  Tensor gates = gather(probs, 1, ops::from_vector(r.choice, {N, k}, x.device()));  // (N, k)
  if (k > 1) gates = div(gates, sum(gates, {1}, /*keepdim=*/true));  // renormalized over the k
  aux_loss_ = balance_loss(probs, r.chosen, k, *dispatcher_);

  // 2. Dispatch: the rows grouped by expert, computed wherever the experts are.
  const Tensor grouped = index_select(xf, 0, index_tensor(r.rows, x.device()));  // (M, C)
  const Tensor expert_out = dispatcher_->run(*this, grouped, r.counts);          // (M, C)

  // 3. Combine: each slot's row back in token order (dropped slots read the
  // zero row M), weighted by its gate, summed over the k choices.
  const Tensor padded = cat({expert_out, ops::zeros({1, C}, {x.dtype(), x.device()})}, 0);
  const Tensor per_slot =
      view(index_select(padded, 0, index_tensor(r.slot_row, x.device())), {N, k, C});
  const Tensor y = sum(mul(per_slot, unsqueeze(gates, 2)), {1});  // (N, C)

  stats_ = {r.counts, N, r.dropped, r.capacity};
  return reshape(y, x.shape());
}

Tensor MoE::run_experts(const Tensor& x, const std::vector<int64_t>& counts) {
  const int64_t held = w1.size(0);
  SPMD_CHECK(int64_t(counts.size()) == held, "MoE::run_experts: ", counts.size(),
             " row counts for the ", held, " experts held here");
  const std::vector<Tensor> rows = split(x, counts, 0);  // expert i's rows
  auto per_expert = [held](const Tensor& t) {            // one view per expert, one node
    return t.defined() ? split(t, 1, 0) : std::vector<Tensor>(size_t(held));
  };
  const auto W1 = per_expert(w1), W2 = per_expert(w2), W3 = per_expert(w3);
  const auto B1 = per_expert(b1), B2 = per_expert(b2), B3 = per_expert(b3);
  auto lin = [](const Tensor& in, const Tensor& w, const Tensor& b) {
    return linear(in, squeeze(w, 0), b.defined() ? squeeze(b, 0) : Tensor());
  };
  std::vector<Tensor> out;
  for (size_t i = 0; i < size_t(held); ++i) {
    const Tensor h = options.swiglu
                         ? mul(silu(lin(rows[i], W1[i], B1[i])), lin(rows[i], W3[i], B3[i]))
                         : gelu(lin(rows[i], W1[i], B1[i]), /*approximate=*/true);
    out.push_back(lin(h, W2[i], B2[i]));  // (rows_i, C)
  }
  return cat(out, 0);
}

// --- Model-wide helpers --------------------------------------------------------------------

std::vector<std::pair<std::string, MoE*>> moe_layers(Module& model) {
  std::vector<std::pair<std::string, MoE*>> found;
  for (auto& [name, m] : model.named_modules())
    if (auto* moe = dynamic_cast<MoE*>(m)) found.emplace_back(name, moe);
  return found;
}

Tensor moe_aux_loss(Module& model) {
  Tensor total;
  for (auto& [name, moe] : moe_layers(model))
    total = total.defined() ? add(total, moe->aux_loss()) : moe->aux_loss();
  return total.defined() ? total : ops::scalar_tensor(0);
}

}  // namespace spmd::nn
