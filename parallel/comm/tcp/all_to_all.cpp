// All-to-all with every transfer posted at once (see the header).
#include "parallel/comm/tcp/all_to_all.h"

#include <cstring>

namespace spmd::dist::tcp {
namespace {
std::vector<size_t> exclusive_prefix_sum(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}
}  // namespace

AllToAll::AllToAll(const Context& ctx, Span input, Span output, std::vector<size_t> send_counts,
                   std::vector<size_t> recv_counts, std::vector<size_t> send_offsets,
                   std::vector<size_t> recv_offsets)
    : ctx_(ctx),
      input_(input),
      output_(output),
      send_counts_(std::move(send_counts)),
      recv_counts_(std::move(recv_counts)),
      send_offsets_(send_offsets.empty() ? exclusive_prefix_sum(send_counts_)
                                         : std::move(send_offsets)),
      recv_offsets_(recv_offsets.empty() ? exclusive_prefix_sum(recv_counts_)
                                         : std::move(recv_offsets)) {}

void AllToAll::run() {
  const int p = ctx_.size(), r = ctx_.rank();
  Mesh& mesh = ctx_.mesh;
  std::vector<std::pair<Link*, Link::Ticket>> receives;
  for (int s = 1; s < p; ++s) {
    const int to = mod(r + s, p), from = mod(r - s, p);
    // Each direction's header carries that pair's block size.
    Link& out = mesh.link(to);
    Header h = out.send_header();
    h.count = send_counts_[to];
    out.set_send_header(h);
    out.send(input_.at(send_offsets_[to]), send_counts_[to] * input_.elem);
    Link& in = mesh.link(from);
    Header e = in.expect_header();
    e.count = recv_counts_[from];
    in.set_expect_header(e);
    receives.emplace_back(
        &in, in.recv(output_.at(recv_offsets_[from]), recv_counts_[from] * output_.elem));
  }
  // Start the transfers, then copy this rank's own block while the peers
  // read what the socket buffers already hold.
  mesh.progress();
  if (recv_counts_[r] > 0) {
    std::memcpy(output_.at(recv_offsets_[r]), input_.at(send_offsets_[r]),
                recv_counts_[r] * input_.elem);
  }
  mesh.wait_until([&] {
    for (auto& [link, ticket] : receives) {
      if (!link->received(ticket)) return false;
    }
    return true;
  });
  mesh.finish();
}

}  // namespace spmd::dist::tcp
