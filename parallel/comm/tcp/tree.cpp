// Binomial broadcast and reduce (see the header for the tree's shape).
#include "parallel/comm/tcp/tree.h"

#include "parallel/comm/tcp/reduce.h"

namespace spmd::dist::tcp {

TreeBroadcast::TreeBroadcast(const Context& ctx, Span data, int root)
    : ctx_(ctx), data_(data), root_(root) {}

void TreeBroadcast::run() {
  const int p = ctx_.size();
  const int v = mod(ctx_.rank() - root_, p);
  auto real = [&](int u) { return mod(u + root_, p); };
  // Receive from the parent: v without its lowest set bit.
  int mask = 1;
  while (mask < p && !(v & mask)) mask <<= 1;
  if (v != 0) {
    Link& parent = ctx_.mesh.link(real(v - mask));
    ctx_.mesh.wait_recv(parent, parent.recv(data_.data, data_.bytes()));
  }
  // Send to the children, the largest subtree first.
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < p) ctx_.mesh.link(real(v + mask)).send(data_.data, data_.bytes());
  }
  ctx_.mesh.finish();
}

TreeReduce::TreeReduce(const Context& ctx, Span data, int root, ReduceOp op)
    : ctx_(ctx), data_(data), root_(root), op_(op) {}

void TreeReduce::run() {
  const int p = ctx_.size();
  const int v = mod(ctx_.rank() - root_, p);
  auto real = [&](int u) { return mod(u + root_, p); };
  // The root accumulates in place; the others in scratch, so their input
  // survives. `acc` is this subtree's result so far (initially our data).
  char* staged = ctx_.workspace.staging(1, data_.bytes());
  char* acc_buf = v == 0 ? data_.data : ctx_.workspace.scratch(data_.bytes());
  const char* acc = data_.data;
  int mask = 1;
  for (; mask < p && !(v & mask); mask <<= 1) {
    if (v + mask >= p) continue;
    Link& child = ctx_.mesh.link(real(v + mask));  // children, smallest subtree first
    ctx_.mesh.wait_recv(child, child.recv(staged, data_.bytes()));
    combine(op_, data_.dtype, acc_buf, acc, staged, data_.count);
    acc = acc_buf;
  }
  if (v != 0) {
    ctx_.mesh.link(real(v - mask)).send(acc, data_.bytes());  // up to the parent
  } else if (op_ == ReduceOp::kAvg) {
    divide(data_.dtype, data_.data, data_.count, p);
  }
  ctx_.mesh.finish();
}

}  // namespace spmd::dist::tcp
