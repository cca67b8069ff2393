// Differentiable collectives: communication that autograd can see through.
//
// Tensor, sequence, context and expert parallelism move activations between
// ranks in the middle of the model, so the backward pass must move their
// gradients back. Each function here is an autograd Function whose backward
// is the collective that is the adjoint of its forward: the pairs below.
// Strategies compose these; none writes a backward for communication itself.
//
//   forward                         backward                 Megatron's name
//   copy_to_group      identity     all_reduce (sum)         f
//   reduce_from_group  all_reduce   identity                 g
//   all_gather(dim)    all_gather   reduce_scatter (sum)     sequence parallel's gather
//   reduce_scatter     reduce_scat. all_gather               sequence parallel's scatter
//   scatter_to_group   keep chunk   all_gather               split
//   gather_from_group  all_gather   keep own chunk           gather
//   all_to_all         all_to_all   all_to_all, dims swapped (Ulysses)
//   all_to_all_single  uneven a2a   uneven a2a, sizes swapped (experts)
//   send               send         recv of the gradient     model parallel
//   recv               recv         send of the gradient
//
// Two meanings of "replicated" decide between a pair and its look-alike: a
// tensor whose gradient arrives *partial* (each rank holds a part of the sum,
// as after a column-parallel matmul) needs reduce_scatter behind an
// all_gather; one whose gradient arrives *identical* on every rank (a loss
// computed the same everywhere) needs only the rank's own chunk
// (gather_from_group). The tests state each as a function of every rank's
// inputs and check the backward against finite differences of it.
//
// Every function runs its collective synchronously (issues it and waits),
// in both directions. The group must outlive the backward pass.
// Sizes along `dim` must divide by the group size where a chunk is taken
// (InvalidArgument naming the sizes, before any communication).
#pragma once

#include "parallel/comm/process_group.h"
#include "tensor/tensor.h"

namespace spmd::dist {

// f: the identity; the backward sums the gradient over the group. Put it
// where a replicated tensor enters a region whose ranks each use it for a
// different part of the result (a column-parallel layer).
Tensor copy_to_group(const Tensor& x, ProcessGroup& group);
// g: sums x over the group; the backward passes the gradient through. Put it
// where partial sums leave a region (after a row-parallel layer).
Tensor reduce_from_group(const Tensor& x, ProcessGroup& group);

// Every rank's x concatenated along dim in rank order; the backward sums the
// gradient over the group and keeps this rank's chunk along dim.
Tensor all_gather(const Tensor& x, int dim, ProcessGroup& group);
// Sums x over the group and keeps this rank's chunk along dim; the backward
// gathers the gradient along dim. REQUIRES: x.size(dim) % group.size() == 0.
Tensor reduce_scatter(const Tensor& x, int dim, ProcessGroup& group);

// This rank's chunk of x along dim (no communication); the backward gathers
// the gradient along dim. REQUIRES: x.size(dim) % group.size() == 0.
Tensor scatter_to_group(const Tensor& x, int dim, ProcessGroup& group);
// Every rank's x concatenated along dim; the backward keeps this rank's
// chunk of the gradient (which is the same on every rank).
Tensor gather_from_group(const Tensor& x, int dim, ProcessGroup& group);

// x cut into group.size() chunks along split_dim; chunk j goes to rank j,
// and the chunks received are concatenated along concat_dim in rank order.
// The backward is the same exchange with the dims swapped (with split_dim ==
// concat_dim the function is its own inverse).
// REQUIRES: x.size(split_dim) % group.size() == 0.
Tensor all_to_all(const Tensor& x, int split_dim, int concat_dim, ProcessGroup& group);
// The uneven exchange along dim 0 (torch.distributed.nn's all_to_all_single):
// rows [off_j, off_j + input_split_sizes[j]) of x go to rank j, and the
// rows received from each rank are concatenated in rank order,
// output_split_sizes[r] of them from rank r. The backward sends each
// gradient row back where its row came from (the same call, sizes swapped).
// REQUIRES: the sizes agree pairwise across ranks (rank i's input size for j
// is j's output size for i: exchange the counts first); they add up to x's
// dim 0 and the output's.
Tensor all_to_all_single(const Tensor& x, const std::vector<int64_t>& output_split_sizes,
                         const std::vector<int64_t>& input_split_sizes, ProcessGroup& group);

// Point-to-point across a cut of the model (model and pipeline parallelism):
// the activation goes forward, its gradient comes back. send() returns a
// one-element token that depends on x; backward(token) receives x's gradient
// from `dst` and carries it on into x's graph. recv() returns a fresh leaf
// of `shape` that requires grad, whose gradient, once backward has computed
// it, is sent back to `src`. Each pair must use the same tag on both sides;
// the sender's backward(token) waits until the receiver's backward has sent.
Tensor send(const Tensor& x, int dst, ProcessGroup& group, int tag = 0);
Tensor recv(const Shape& shape, DType dtype, Device device, int src, ProcessGroup& group,
            int tag = 0);

}  // namespace spmd::dist
