// The token journey of expert parallelism (16.8.2): the dispatcher that
// parallel/expert_parallel installs in each nn::MoE.
//
// The ep ranks each hold L = E / ep experts, rank j experts [j L, (j+1) L),
// and each routes its own tokens. nn::MoE hands the dispatcher its rows
// already grouped by expert, so the rows bound for rank j are one
// contiguous block. Then, on every rank:
//
//   1. counts    every rank tells every other how many rows it will send
//                to each of that rank's experts: an all_to_all of ep x L
//                integers. Now each side knows the split sizes of step 2.
//   2. dispatch  the rows, by an uneven all_to_all (all_to_all_single):
//                received as [from rank 0: expert 0, 1, ..][from rank 1: ..]
//   3. compute   regrouped as [expert 0: from rank 0, 1, ..][expert 1: ..],
//                each local expert on its rows, and put back in received order
//   4. combine   the outputs home by the inverse all_to_all (the split
//                sizes swapped); nn::MoE weights them with the gates.
//
// Both all_to_alls are differentiable (parallel/functional.h): backward
// sends each output row's gradient to the expert that made it, and each
// input row's gradient back to the rank whose token it was. An expert's
// weight gradient therefore sums the loss gradients of every rank's tokens.
//
// sum_over_batch (the balancing loss's f and P) sums over the "batch"
// group: every rank whose tokens are part of the same global batch (ep, or
// dp x ep).
#pragma once

#include <memory>
#include <vector>

#include "autograd/nn/moe.h"
#include "parallel/comm/process_group.h"

namespace spmd::dist::ep {

// What the last forward's dispatch moved, on this rank.
struct DispatchStats {
  std::vector<int64_t> sent;      // rows to each ep rank (ep)
  std::vector<int64_t> received;  // rows from ep rank s for local expert l, at s * L + l (ep x L)
  int64_t row_bytes = 0;          // bytes of one row (C elements)
};

class AllToAllDispatcher final : public nn::MoEDispatcher {
 public:
  // ep: the group the experts are split over; batch: the ranks whose tokens
  // form one batch (ep itself, or a dp x ep group).
  AllToAllDispatcher(std::shared_ptr<ProcessGroup> ep, std::shared_ptr<ProcessGroup> batch)
      : ep_(std::move(ep)), batch_(std::move(batch)) {}

  // REQUIRES: counts has one entry per expert of the whole model (ep x the
  // experts held here); collective over ep (every rank calls, every layer in
  // the same order).
  Tensor run(nn::MoE& moe, const Tensor& x, const std::vector<int64_t>& counts) override;
  // The sum over the batch group; its backward sums the gradient over it
  // too (each rank's loss uses the sum).
  Tensor sum_over_batch(const Tensor& t) override;

  const DispatchStats& last() const { return last_; }

 private:
  std::shared_ptr<ProcessGroup> ep_, batch_;
  DispatchStats last_;
};

}  // namespace spmd::dist::ep
