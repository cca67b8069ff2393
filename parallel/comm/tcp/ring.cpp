// The pipelined ring (see ring.h for the algorithm and its cost).
#include "parallel/comm/tcp/ring.h"

#include <algorithm>

#include "parallel/comm/tcp/reduce.h"

namespace spmd::dist::tcp {

Ring Ring::all_reduce(const Context& ctx, Span data, ReduceOp op) {
  const int p = ctx.size();
  return Ring(ctx, data, data, op, p - 1, p - 1);
}

Ring Ring::reduce_scatter(const Context& ctx, Span input, Span output, ReduceOp op) {
  const int p = ctx.size();
  Span work = input;
  work.data = ctx.workspace.scratch(input.bytes());  // partial sums; input stays untouched
  Ring ring(ctx, input, work, op, p - 1, 0);
  ring.own_output_ = output.data;
  return ring;
}

Ring Ring::all_gather(const Context& ctx, Span data) {
  Ring ring(ctx, data, data, ReduceOp::kSum, 0, ctx.size() - 1);
  ring.first_send_ = ctx.rank();  // all-gather alone starts with the segment it owns
  return ring;
}

Ring::Ring(const Context& ctx, Span input, Span work, ReduceOp op, int rs_steps, int ag_steps)
    : ctx_(ctx),
      input_(input),
      work_(work),
      own_output_(nullptr),
      op_(op),
      p_(ctx.size()),
      rank_(ctx.rank()),
      rs_steps_(rs_steps),
      ag_steps_(ag_steps),
      first_send_(mod(ctx.rank() - 1, ctx.size())) {
  // Every segment is cut into the same number of chunks, so that "chunk j+C
  // is the chunk j received" holds across segments of unequal size.
  const size_t largest = part_size(input.count, p_, 0) + 1;
  chunks_ = chunk_count(largest * input.elem, ctx.tuning);
  total_ = size_t(rs_steps_ + ag_steps_) * chunks_;
  if (rs_steps_ > 0) {
    slot_bytes_ = (largest + chunks_ - 1) / chunks_ * input.elem;
    staging_ = ctx.workspace.staging(ctx.tuning.window, slot_bytes_);
  }
  left_ = &ctx.mesh.link(mod(rank_ - 1, p_));
  right_ = &ctx.mesh.link(mod(rank_ + 1, p_));
  recv_tickets_.resize(total_);
}

// The narrated loop: queue the first segment, keep `window` receives posted,
// and for each chunk that arrives, reduce it and send it on.
void Ring::run() {
  for (size_t j = 0; j < std::min(chunks_, total_); ++j) post_send(j);
  const size_t window = size_t(ctx_.tuning.window);
  for (size_t j = 0; j < std::min(window, total_); ++j) post_recv(j);
  for (size_t j = 0; j < total_; ++j) {
    ctx_.mesh.wait_recv(*left_, recv_tickets_[j]);         // chunk j has arrived
    if (j / chunks_ < size_t(rs_steps_)) reduce_chunk(j);  // combine with our copy
    if (j + chunks_ < total_) post_send(j + chunks_);      // forward it next step
    if (j + window < total_) post_recv(j + window);        // keep the window full
  }
  ctx_.mesh.finish();  // every send has left: the caller may reuse the buffer
}

void Ring::post_send(size_t j) {
  const int t = int(j / chunks_);
  const size_t k = j % chunks_;
  const int s = send_segment(t);
  const size_t n = chunk_size(s, k) * input_.elem;
  // The first reduce-scatter step sends this rank's own data; every later
  // step sends what it reduced or received the step before.
  const char* from = (t == 0 && rs_steps_ > 0) ? input_.at(chunk_begin(s, k)) : work_at(s, k);
  right_->send(from, n);
}

void Ring::post_recv(size_t j) {
  const int t = int(j / chunks_);
  const size_t k = j % chunks_;
  const int s = recv_segment(t);
  const size_t n = chunk_size(s, k) * input_.elem;
  // Reduce-scatter chunks land in a staging slot (they must be combined);
  // all-gather chunks are final and land in place.
  char* to =
      t < rs_steps_ ? staging_ + (j % size_t(ctx_.tuning.window)) * slot_bytes_ : work_at(s, k);
  recv_tickets_[j] = left_->recv(to, n);
}

// work[chunk] = input[chunk] op staged chunk; the last reduce-scatter step
// of an average also divides, so the result leaves this rank final.
void Ring::reduce_chunk(size_t j) {
  const int t = int(j / chunks_);
  const size_t k = j % chunks_;
  const int s = recv_segment(t);
  const size_t n = chunk_size(s, k);
  const char* staged = staging_ + (j % size_t(ctx_.tuning.window)) * slot_bytes_;
  char* dst = work_at(s, k);
  const char* mine = input_.at(chunk_begin(s, k));
  if (op_ == ReduceOp::kAvg && t == rs_steps_ - 1) {
    combine_and_divide(input_.dtype, dst, mine, staged, n, p_);
  } else {
    combine(op_, input_.dtype, dst, mine, staged, n);
  }
}

size_t Ring::chunk_begin(int s, size_t k) const {
  const size_t seg_len = part_size(input_.count, p_, s);
  return part_begin(input_.count, p_, s) + part_begin(seg_len, chunks_, k);
}

size_t Ring::chunk_size(int s, size_t k) const {
  return part_size(part_size(input_.count, p_, s), chunks_, k);
}

char* Ring::work_at(int s, size_t k) const {
  if (own_output_ && s == rank_) {
    const size_t seg_len = part_size(input_.count, p_, s);
    return own_output_ + part_begin(seg_len, chunks_, k) * input_.elem;
  }
  return work_.at(chunk_begin(s, k));
}

}  // namespace spmd::dist::tcp
