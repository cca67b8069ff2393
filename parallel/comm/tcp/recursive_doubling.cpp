// Recursive doubling with the fold for non-powers of two (see the header).
#include "parallel/comm/tcp/recursive_doubling.h"

#include "parallel/comm/tcp/reduce.h"

namespace spmd::dist::tcp {

RecursiveDoublingAllReduce::RecursiveDoublingAllReduce(const Context& ctx, Span data, ReduceOp op)
    : ctx_(ctx), data_(data), op_(op), p_(ctx.size()), rank_(ctx.rank()) {
  q_ = 1;
  while (q_ * 2 <= p_) q_ *= 2;
  extra_ = p_ - q_;
  staged_ = ctx.workspace.staging(1, data.bytes());
}

void RecursiveDoublingAllReduce::run() {
  Mesh& mesh = ctx_.mesh;
  const bool folded = rank_ < 2 * extra_;
  // Fold: an even rank of the first 2e hands its data to the odd rank above
  // it, then waits for the finished result.
  if (folded && rank_ % 2 == 0) {
    Link& partner = mesh.link(rank_ + 1);
    partner.send(data_.data, data_.bytes());
    mesh.wait_recv(partner, partner.recv(data_.data, data_.bytes()));
    mesh.finish();
    return;
  }
  if (folded) {  // the odd rank takes in its partner's data
    Link& partner = mesh.link(rank_ - 1);
    mesh.wait_recv(partner, partner.recv(staged_, data_.bytes()));
    combine(op_, data_.dtype, data_.data, data_.data, staged_, data_.count);
  }
  // The rounds, among q ranks numbered v.
  const int v = folded ? rank_ / 2 : rank_ - extra_;
  for (int mask = 1; mask < q_; mask <<= 1) exchange_and_combine(real_rank(v ^ mask));
  if (op_ == ReduceOp::kAvg) divide(data_.dtype, data_.data, data_.count, p_);
  if (folded) mesh.link(rank_ - 1).send(data_.data, data_.bytes());  // unfold
  mesh.finish();
}

// Sends our buffer and receives the peer's at once; both must be done before
// combining, since the combination overwrites what we are sending.
void RecursiveDoublingAllReduce::exchange_and_combine(int peer) {
  Link& link = ctx_.mesh.link(peer);
  const Link::Ticket sent = link.send(data_.data, data_.bytes());
  const Link::Ticket got = link.recv(staged_, data_.bytes());
  ctx_.mesh.wait_until([&] { return link.sent(sent) && link.received(got); });
  combine(op_, data_.dtype, data_.data, data_.data, staged_, data_.count);
}

}  // namespace spmd::dist::tcp
