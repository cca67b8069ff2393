// The pipelined ring (see ring.h for the algorithm and its cost).
#include "parallel/comm/tcp/ring.h"

#include <algorithm>

#include "parallel/comm/tcp/reduce.h"

namespace spmd::dist::tcp {

RingLayout RingLayout::whole_group(int p, size_t n) {
  std::vector<int> members(p);
  for (int r = 0; r < p; ++r) members[r] = r;
  return even(std::move(members), n);
}

RingLayout RingLayout::even(std::vector<int> members, size_t n) {
  RingLayout layout;
  const size_t p = members.size();
  layout.members = std::move(members);
  for (size_t i = 0; i < p; ++i) {
    layout.begin.push_back(part_begin(n, p, i));
    layout.count.push_back(part_size(n, p, i));
  }
  return layout;
}

Ring Ring::all_reduce(const Context& ctx, Span data, ReduceOp op) {
  return all_reduce(ctx, RingLayout::whole_group(ctx.size(), data.count), data, op, ctx.size());
}

Ring Ring::reduce_scatter(const Context& ctx, Span input, Span output, ReduceOp op) {
  char* work = ctx.workspace.scratch(input.bytes());  // partial sums; input stays untouched
  return reduce_scatter(ctx, RingLayout::whole_group(ctx.size(), input.count), input, work,
                        output.data, op, ctx.size());
}

Ring Ring::all_gather(const Context& ctx, Span data) {
  return all_gather(ctx, RingLayout::whole_group(ctx.size(), data.count), data);
}

Ring Ring::all_reduce(const Context& ctx, RingLayout layout, Span data, ReduceOp op, int divisor) {
  const int p = int(layout.members.size());
  return Ring(ctx, std::move(layout), data, data, op, p - 1, p - 1, divisor);
}

Ring Ring::reduce_scatter(const Context& ctx, RingLayout layout, Span input, char* work,
                          char* own_output, ReduceOp op, int divisor) {
  const int p = int(layout.members.size());
  Span partial = input;
  partial.data = work;
  Ring ring(ctx, std::move(layout), input, partial, op, p - 1, 0, divisor);
  ring.own_output_ = own_output;
  return ring;
}

Ring Ring::all_gather(const Context& ctx, RingLayout layout, Span data) {
  const int p = int(layout.members.size());
  Ring ring(ctx, std::move(layout), data, data, ReduceOp::kSum, 0, p - 1, p);
  ring.first_send_ = ring.me_;  // all-gather alone starts with the segment it owns
  return ring;
}

Ring::Ring(const Context& ctx, RingLayout layout, Span input, Span work, ReduceOp op, int rs_steps,
           int ag_steps, int divisor)
    : ctx_(ctx),
      layout_(std::move(layout)),
      input_(input),
      work_(work),
      own_output_(nullptr),
      op_(op),
      p_(int(layout_.members.size())),
      me_(int(std::find(layout_.members.begin(), layout_.members.end(), ctx.rank()) -
              layout_.members.begin())),
      rs_steps_(rs_steps),
      ag_steps_(ag_steps),
      divisor_(divisor),
      first_send_(mod(me_ - 1, p_)) {
  SPMD_CHECK(me_ < p_, "Ring: rank ", ctx.rank(), " is not a member of its ring");
  // Every segment is cut into the same number of chunks, so that "chunk j+C
  // is the chunk j received" holds across segments of unequal size.
  const size_t largest = *std::max_element(layout_.count.begin(), layout_.count.end()) + 1;
  chunks_ = chunk_count(largest * input.elem, ctx.tuning);
  total_ = size_t(rs_steps_ + ag_steps_) * chunks_;
  if (rs_steps_ > 0) {
    slot_bytes_ = (largest + chunks_ - 1) / chunks_ * input.elem;
    staging_ = ctx.workspace.staging(ctx.tuning.window, slot_bytes_);
  }
  left_ = &ctx.mesh.link(layout_.members[mod(me_ - 1, p_)]);
  right_ = &ctx.mesh.link(layout_.members[mod(me_ + 1, p_)]);
  recv_tickets_.resize(total_);
}

// The narrated loop: queue the first segment, keep `window` receives posted,
// and for each chunk that arrives, reduce it and send it on.
void Ring::run() {
  start();
  while (next_ < total_) {
    ctx_.mesh.wait_recv(*left_, recv_tickets_[next_]);  // chunk next_ has arrived
    advance();
  }
  ctx_.mesh.finish();  // every send has left: the caller may reuse the buffer
}

void Ring::start() {
  for (size_t j = 0; j < std::min(chunks_, total_); ++j) post_send(j);
  const size_t window = size_t(ctx_.tuning.window);
  for (size_t j = 0; j < std::min(window, total_); ++j) post_recv(j);
}

bool Ring::advance() {
  const size_t window = size_t(ctx_.tuning.window);
  for (; next_ < total_ && left_->received(recv_tickets_[next_]); ++next_) {
    const size_t j = next_;
    if (j / chunks_ < size_t(rs_steps_)) reduce_chunk(j);  // combine with our copy
    if (j + chunks_ < total_) post_send(j + chunks_);      // forward it next step
    if (j + window < total_) post_recv(j + window);        // keep the window full
  }
  return next_ == total_;
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
    combine_and_divide(input_.dtype, dst, mine, staged, n, divisor_);
  } else {
    combine(op_, input_.dtype, dst, mine, staged, n);
  }
}

size_t Ring::chunk_begin(int s, size_t k) const {
  return layout_.begin[s] + part_begin(layout_.count[s], chunks_, k);
}

size_t Ring::chunk_size(int s, size_t k) const { return part_size(layout_.count[s], chunks_, k); }

char* Ring::work_at(int s, size_t k) const {
  if (own_output_ && s == me_) {
    return own_output_ + part_begin(layout_.count[s], chunks_, k) * input_.elem;
  }
  return work_.at(chunk_begin(s, k));
}

}  // namespace spmd::dist::tcp
