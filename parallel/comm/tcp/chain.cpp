// Pipelined chain broadcast and reduce (see the header).
#include "parallel/comm/tcp/chain.h"

#include <algorithm>
#include <vector>

#include "parallel/comm/tcp/reduce.h"

namespace spmd::dist::tcp {

ChainBroadcast::ChainBroadcast(const Context& ctx, Span data, int root)
    : ctx_(ctx), data_(data), root_(root) {}

void ChainBroadcast::run() {
  const int p = ctx_.size();
  const int v = mod(ctx_.rank() - root_, p);
  const size_t chunks = chunk_count(data_.bytes(), ctx_.tuning);
  Link* prev = v > 0 ? &ctx_.mesh.link(mod(ctx_.rank() - 1, p)) : nullptr;
  Link* next = v < p - 1 ? &ctx_.mesh.link(mod(ctx_.rank() + 1, p)) : nullptr;
  // Chunks are final as they arrive, so every receive goes straight into
  // place and can be posted up front.
  std::vector<Link::Ticket> arrived(chunks);
  for (size_t k = 0; prev && k < chunks; ++k) {
    const size_t b = part_begin(data_.count, chunks, k);
    arrived[k] = prev->recv(data_.at(b), part_size(data_.count, chunks, k) * data_.elem);
  }
  for (size_t k = 0; k < chunks; ++k) {
    if (prev) ctx_.mesh.wait_recv(*prev, arrived[k]);  // chunk k is here
    const size_t b = part_begin(data_.count, chunks, k);
    if (next) next->send(data_.at(b), part_size(data_.count, chunks, k) * data_.elem);
  }
  ctx_.mesh.finish();
}

ChainReduce::ChainReduce(const Context& ctx, Span data, int root, ReduceOp op)
    : ctx_(ctx), data_(data), root_(root), op_(op) {}

void ChainReduce::run() {
  const int p = ctx_.size();
  const int v = mod(ctx_.rank() - root_, p);
  const size_t chunks = chunk_count(data_.bytes(), ctx_.tuning);
  const size_t window = std::min(chunks, size_t(ctx_.tuning.window));
  const size_t slot = (data_.count + chunks - 1) / chunks * data_.elem;
  Link* from = v < p - 1 ? &ctx_.mesh.link(mod(ctx_.rank() + 1, p)) : nullptr;  // upstream
  Link* to = v > 0 ? &ctx_.mesh.link(mod(ctx_.rank() - 1, p)) : nullptr;        // toward root
  char* staging = ctx_.workspace.staging(window, slot);
  char* acc = v == 0 ? data_.data : ctx_.workspace.scratch(data_.bytes());
  auto bytes_of = [&](size_t k) { return part_size(data_.count, chunks, k) * data_.elem; };
  auto offset_of = [&](size_t k) { return part_begin(data_.count, chunks, k) * data_.elem; };
  std::vector<Link::Ticket> arrived(chunks);
  for (size_t k = 0; from && k < window; ++k) {
    arrived[k] = from->recv(staging + k * slot, bytes_of(k));
  }
  for (size_t k = 0; k < chunks; ++k) {
    const char* mine = data_.data + offset_of(k);
    const char* result = mine;  // the chain's far end just sends its own data
    if (from) {
      ctx_.mesh.wait_recv(*from, arrived[k]);
      const char* staged = staging + (k % window) * slot;
      const size_t n = bytes_of(k) / data_.elem;
      if (v == 0 && op_ == ReduceOp::kAvg) {
        combine_and_divide(data_.dtype, acc + offset_of(k), mine, staged, n, p);
      } else {
        combine(op_, data_.dtype, acc + offset_of(k), mine, staged, n);
      }
      result = acc + offset_of(k);
      if (k + window < chunks) {
        arrived[k + window] = from->recv(staging + (k % window) * slot, bytes_of(k + window));
      }
    }
    if (to) to->send(result, bytes_of(k));
  }
  ctx_.mesh.finish();
}

}  // namespace spmd::dist::tcp
