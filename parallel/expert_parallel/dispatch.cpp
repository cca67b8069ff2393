// The dispatcher's four steps (counts, dispatch, compute, combine) in the
// order they happen, then the batch sum of the balancing loss's statistics.
#include "parallel/expert_parallel/dispatch.h"

#include "autograd/tensor_ops.h"
#include "parallel/functional.h"
#include "tensor/ops.h"

namespace spmd::dist::ep {
namespace {

// Rows per rank: the sums of each rank's L consecutive counts.
std::vector<int64_t> per_rank(const std::vector<int64_t>& counts, int ranks, int64_t L) {
  std::vector<int64_t> rows(size_t(ranks), 0);
  for (size_t i = 0; i < counts.size(); ++i) rows[i / size_t(L)] += counts[i];
  return rows;
}

// The permutation that takes rows laid out [source][expert] (block (s, l)
// of received[s * L + l] rows) to [expert][source]; `per_expert` gets each
// expert's total.
std::vector<int64_t> by_expert_order(const std::vector<int64_t>& received, int ranks, int64_t L,
                                     std::vector<int64_t>& per_expert) {
  std::vector<int64_t> start(received.size(), 0);  // where block (s, l) begins
  for (size_t i = 1; i < received.size(); ++i) start[i] = start[i - 1] + received[i - 1];
  std::vector<int64_t> order;
  per_expert.assign(size_t(L), 0);
  for (int64_t l = 0; l < L; ++l) {
    for (int s = 0; s < ranks; ++s) {
      const size_t block = size_t(s) * size_t(L) + size_t(l);
      for (int64_t i = 0; i < received[block]; ++i) order.push_back(start[block] + i);
      per_expert[size_t(l)] += received[block];
    }
  }
  return order;
}

// The inverse of a permutation: inverse[order[i]] = i.
std::vector<int64_t> inverse_of(const std::vector<int64_t>& order) {
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[size_t(order[i])] = int64_t(i);
  return inverse;
}

bool is_identity(const std::vector<int64_t>& order) {
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] != int64_t(i)) return false;
  return true;
}

// The counts the peers sent (ranks, L) as the host reads them. On the
// meta device (a dry run, train/dry_run.h, whose routing is uniform) every
// peer routes as this rank does, so each sends for expert l of this rank
// what this rank keeps for it: counts[rank * L + l].
std::vector<int64_t> received_counts(const Tensor& recv_counts, const std::vector<int64_t>& counts,
                                     int rank) {
  if (!recv_counts.device().is_meta()) return ops::to_vector<int64_t>(recv_counts);
  const int64_t ranks = recv_counts.size(0), L = recv_counts.size(1);
  std::vector<int64_t> received(size_t(ranks * L));
  for (int64_t s = 0; s < ranks; ++s)
    for (int64_t l = 0; l < L; ++l) received[size_t(s * L + l)] = counts[size_t(rank * L + l)];
  return received;
}

Tensor rows_of(const Tensor& t, const std::vector<int64_t>& order) {
  return index_select(t, 0, ops::from_vector(order, Shape{int64_t(order.size())}, t.device()));
}

}  // namespace

Tensor AllToAllDispatcher::run(nn::MoE& moe, const Tensor& x, const std::vector<int64_t>& counts) {
  const int ranks = ep_->size();
  const int64_t L = moe.w1.size(0);  // experts held here
  SPMD_CHECK(int64_t(counts.size()) == L * ranks, "expert parallel: ", counts.size(),
             " expert counts, but ", ranks, " ep ranks holding ", L, " experts each");

  // 1. Counts: row (j, l) of what we send is our rows for rank j's expert l.
  const Tensor send_counts = ops::from_vector(counts, {ranks, L}, x.device());
  Tensor recv_counts = ops::empty({ranks, L}, {DType::kI64, x.device()});
  ep_->wait(ep_->all_to_all(recv_counts, send_counts), OpType::kAllToAll);
  const std::vector<int64_t> received = received_counts(recv_counts, counts, ep_->rank());
  const std::vector<int64_t> send_rows = per_rank(counts, ranks, L);
  const std::vector<int64_t> recv_rows = per_rank(received, ranks, L);
  last_ = {send_rows, received, x.size(1) * int64_t(element_size(x.dtype()))};

  // 2. Dispatch: our rows to their experts' ranks.
  const Tensor arrived = all_to_all_single(x, recv_rows, send_rows, *ep_);  // [source][expert]

  // 3. Compute: one block of rows per local expert, then back in arrival order.
  std::vector<int64_t> per_expert;
  const std::vector<int64_t> order = by_expert_order(received, ranks, L, per_expert);
  const bool regroup = !is_identity(order);
  const Tensor grouped = regroup ? rows_of(arrived, order) : arrived;  // [expert][source]
  const Tensor computed = moe.run_experts(grouped, per_expert);
  const Tensor answered = regroup ? rows_of(computed, inverse_of(order)) : computed;

  // 4. Combine: the outputs home, the inverse exchange.
  return all_to_all_single(answered, send_rows, recv_rows, *ep_);  // in x's order
}

Tensor AllToAllDispatcher::sum_over_batch(const Tensor& t) {
  if (batch_->size() == 1) return t;
  // Forward: the sum. Backward: the gradient summed too, since every rank's
  // loss reads the sum (copy_to_group's backward; reduce_from_group's is the
  // identity).
  return reduce_from_group(copy_to_group(t, *batch_), *batch_);
}

}  // namespace spmd::dist::ep
