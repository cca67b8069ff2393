// Flat gather and scatter (see the header).
#include "parallel/comm/tcp/gather_scatter.h"

#include <cstring>
#include <utility>
#include <vector>

namespace spmd::dist::tcp {

FlatGather::FlatGather(const Context& ctx, Span input, Span output, int root)
    : ctx_(ctx), input_(input), output_(output), root_(root) {}

void FlatGather::run() {
  const int p = ctx_.size(), r = ctx_.rank();
  Mesh& mesh = ctx_.mesh;
  const size_t block = input_.bytes();
  if (r != root_) {
    mesh.link(root_).send(input_.data, block);
    mesh.finish();
    return;
  }
  // Receive every peer's block into its slot, the nearest ranks first.
  std::vector<std::pair<Link*, Link::Ticket>> receives;
  for (int s = 1; s < p; ++s) {
    const int from = mod(r + s, p);
    Link& in = mesh.link(from);
    receives.emplace_back(&in, in.recv(output_.data + size_t(from) * block, block));
  }
  mesh.progress();
  char* mine = output_.data + size_t(r) * block;
  if (mine != input_.data && block > 0) std::memmove(mine, input_.data, block);
  mesh.wait_until([&] {
    for (auto& [link, ticket] : receives) {
      if (!link->received(ticket)) return false;
    }
    return true;
  });
  mesh.finish();
}

FlatScatter::FlatScatter(const Context& ctx, Span input, Span output, int root)
    : ctx_(ctx), input_(input), output_(output), root_(root) {}

void FlatScatter::run() {
  const int p = ctx_.size(), r = ctx_.rank();
  Mesh& mesh = ctx_.mesh;
  const size_t block = output_.bytes();
  if (r != root_) {
    Link& from_root = mesh.link(root_);
    mesh.wait_recv(from_root, from_root.recv(output_.data, block));
    mesh.finish();
    return;
  }
  // Queue every peer's block on its link; copy our own while they drain.
  for (int s = 1; s < p; ++s) {
    const int to = mod(r + s, p);
    mesh.link(to).send(input_.data + size_t(to) * block, block);
  }
  mesh.progress();
  const char* mine = input_.data + size_t(r) * block;
  if (mine != output_.data && block > 0) std::memmove(output_.data, mine, block);
  mesh.finish();  // returns once every queued send has left
}

}  // namespace spmd::dist::tcp
