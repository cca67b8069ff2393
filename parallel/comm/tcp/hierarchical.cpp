// The hierarchical collectives (see hierarchical.h): the pipeline's ticks,
// then each collective's phases.
#include "parallel/comm/tcp/hierarchical.h"

#include <algorithm>
#include <functional>
#include <map>

#include "runtime/error.h"

namespace spmd::dist::tcp {
namespace {

// One tick of a pipeline: `rail` (if any) on the links across hosts, and
// the rings that `host` makes, one after another, on the links within this
// host, all at once. Returns when every ring is done and every send of the
// tick has left (a later tick may overwrite what they sent from).
void run_tick(Mesh& mesh, std::optional<Ring> rail,
              const std::vector<std::function<Ring()>>& host) {
  if (rail) rail->start();
  size_t next = 0;
  std::optional<Ring> local;
  auto start_next_local = [&] {
    local.reset();
    if (next < host.size()) {
      local.emplace(host[next++]());
      local->start();
    }
  };
  start_next_local();
  mesh.wait_until([&] {
    const bool rail_done = !rail || rail->advance();
    while (local && local->advance()) start_next_local();
    return rail_done && !local;
  });
  mesh.drain();
}

// The op a host's phase combines with: an average is summed there and
// divided once, by the whole group's size, on the rail.
ReduceOp within_host(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

int group_size(const Hierarchy& h) { return h.host_count() * h.ranks_per_host(); }

// A ring of `members` whose member i's segment is piece t (of `pieces`) of
// the block of group rank owners[i], blocks being `block` elements each in
// group rank order (all_gather's output, reduce_scatter's input).
RingLayout blocks(std::vector<int> members, const std::vector<int>& owners, size_t block,
                  size_t pieces, size_t t) {
  RingLayout layout;
  layout.members = std::move(members);
  for (int r : owners) {
    layout.begin.push_back(size_t(r) * block + part_begin(block, pieces, t));
    layout.count.push_back(part_size(block, pieces, t));
  }
  return layout;
}

}  // namespace

// --- The hosts ------------------------------------------------------------------------

std::optional<Hierarchy> Hierarchy::of_hosts(const std::vector<int>& host_of, int rank) {
  std::map<int, size_t> index;  // host as given -> place in `hosts`
  Hierarchy h;
  for (int r = 0; r < int(host_of.size()); ++r) {
    auto [it, added] = index.emplace(host_of[r], h.hosts.size());
    if (added) h.hosts.emplace_back();
    h.hosts[it->second].push_back(r);
  }
  if (h.hosts.size() < 2 || h.hosts[0].size() < 2) return std::nullopt;
  for (const auto& ranks : h.hosts) {
    if (ranks.size() != h.hosts[0].size()) return std::nullopt;
  }
  h.host = int(index.at(host_of[rank]));
  const auto& mine = h.hosts[h.host];
  h.local = int(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  return h;
}

std::vector<int> Hierarchy::rail() const {
  std::vector<int> ranks;
  for (const auto& on_host : hosts) ranks.push_back(on_host[local]);
  return ranks;
}

std::string Hierarchy::describe() const {
  return str_cat(host_count(), " hosts x ", ranks_per_host(), " ranks");
}

size_t piece_count(size_t bytes, size_t elements, const Tuning& tuning) {
  const size_t per = std::max<size_t>(tuning.hierarchical_piece_bytes, 1);
  return std::clamp<size_t>((bytes + per - 1) / per, 1, std::max<size_t>(elements, 1));
}

// --- all_reduce -------------------------------------------------------------------------

HierarchicalAllReduce::HierarchicalAllReduce(const Context& ctx, Workspace& across,
                                             const Hierarchy& hierarchy, Span data, ReduceOp op)
    : ctx_(ctx),
      rail_ctx_{ctx.mesh, across, ctx.tuning},
      hierarchy_(hierarchy),
      data_(data),
      op_(op),
      pieces_(piece_count(data.bytes(), data.count, ctx.tuning)) {}

// Tick t: the hosts reduce-scatter piece t, the rails all-reduce piece t-1,
// the hosts all-gather piece t-2.
void HierarchicalAllReduce::run() {
  for (size_t t = 0; t < pieces_ + 2; ++t) {
    std::optional<Ring> rail;
    if (t >= 1 && t <= pieces_) rail.emplace(rail_all_reduce(t - 1));
    std::vector<std::function<Ring()>> host;
    if (t < pieces_) host.push_back([this, t] { return host_reduce_scatter(t); });
    if (t >= 2) host.push_back([this, t] { return host_all_gather(t - 2); });
    run_tick(ctx_.mesh, std::move(rail), host);
  }
  ctx_.mesh.finish();
}

Span HierarchicalAllReduce::piece(size_t t) const {
  Span p = data_;
  p.data = data_.at(part_begin(data_.count, pieces_, t));
  p.count = part_size(data_.count, pieces_, t);
  return p;
}

// Slice l of the piece, summed over this host, ends on the host's rank l.
Ring HierarchicalAllReduce::host_reduce_scatter(size_t t) const {
  const Span p = piece(t);
  return Ring::reduce_scatter(ctx_, RingLayout::even(hierarchy_.host_ranks(), p.count), p, p.data,
                              nullptr, within_host(op_), 1);
}

// This rank's slice, combined over the rail: final everywhere on the rail.
Ring HierarchicalAllReduce::rail_all_reduce(size_t t) const {
  const Span p = piece(t);
  const size_t l = size_t(hierarchy_.local), L = size_t(hierarchy_.ranks_per_host());
  Span slice = p;
  slice.data = p.at(part_begin(p.count, L, l));
  slice.count = part_size(p.count, L, l);
  return Ring::all_reduce(rail_ctx_, RingLayout::even(hierarchy_.rail(), slice.count), slice, op_,
                          group_size(hierarchy_));
}

Ring HierarchicalAllReduce::host_all_gather(size_t t) const {
  const Span p = piece(t);
  return Ring::all_gather(ctx_, RingLayout::even(hierarchy_.host_ranks(), p.count), p);
}

// --- all_gather -------------------------------------------------------------------------

HierarchicalAllGather::HierarchicalAllGather(const Context& ctx, Workspace& across,
                                             const Hierarchy& hierarchy, Span data)
    : ctx_(ctx),
      rail_ctx_{ctx.mesh, across, ctx.tuning},
      hierarchy_(hierarchy),
      data_(data),
      block_(data.count / size_t(group_size(hierarchy))),
      pieces_(piece_count(data.bytes(), block_, ctx.tuning)) {}

// Tick t: piece t of every block travels along the rails; piece t-1 of
// every block, now on some rank of each host, goes round each host (a ring
// for each host's blocks).
void HierarchicalAllGather::run() {
  for (size_t t = 0; t < pieces_ + 1; ++t) {
    std::optional<Ring> rail;
    if (t < pieces_) {
      const std::vector<int> rail_ranks = hierarchy_.rail();
      rail.emplace(
          Ring::all_gather(rail_ctx_, blocks(rail_ranks, rail_ranks, block_, pieces_, t), data_));
    }
    std::vector<std::function<Ring()>> host;
    for (int h = 0; t >= 1 && h < hierarchy_.host_count(); ++h) {
      host.push_back([this, t, h] {
        const RingLayout layout =
            blocks(hierarchy_.host_ranks(), hierarchy_.hosts[h], block_, pieces_, t - 1);
        return Ring::all_gather(ctx_, layout, data_);
      });
    }
    run_tick(ctx_.mesh, std::move(rail), host);
  }
  ctx_.mesh.finish();
}

// --- reduce_scatter ---------------------------------------------------------------------

HierarchicalReduceScatter::HierarchicalReduceScatter(const Context& ctx, Workspace& across,
                                                     const Hierarchy& hierarchy, Span input,
                                                     Span output, ReduceOp op)
    : ctx_(ctx),
      rail_ctx_{ctx.mesh, across, ctx.tuning},
      hierarchy_(hierarchy),
      input_(input),
      output_(output),
      host_sums_(input),
      op_(op),
      block_(output.count),
      pieces_(piece_count(input.bytes(), block_, ctx.tuning)) {
  host_sums_.data = ctx.workspace.scratch(input.bytes());
}

// Tick t: piece t of every block is combined over each host (a ring for
// each host's blocks: block (h, l) ends on this host's rank l) while piece
// t-1 is combined along the rails, this rank's own block into `output`.
void HierarchicalReduceScatter::run() {
  for (size_t t = 0; t < pieces_ + 1; ++t) {
    std::optional<Ring> rail;
    if (t >= 1) {
      const std::vector<int> rail_ranks = hierarchy_.rail();
      char* mine = output_.at(part_begin(block_, pieces_, t - 1));
      rail.emplace(
          Ring::reduce_scatter(rail_ctx_, blocks(rail_ranks, rail_ranks, block_, pieces_, t - 1),
                               host_sums_, host_sums_.data, mine, op_, group_size(hierarchy_)));
    }
    std::vector<std::function<Ring()>> host;
    for (int h = 0; t < pieces_ && h < hierarchy_.host_count(); ++h) {
      host.push_back([this, t, h] {
        const RingLayout layout =
            blocks(hierarchy_.host_ranks(), hierarchy_.hosts[h], block_, pieces_, t);
        return Ring::reduce_scatter(ctx_, layout, input_, host_sums_.data, nullptr,
                                    within_host(op_), 1);
      });
    }
    run_tick(ctx_.mesh, std::move(rail), host);
  }
  ctx_.mesh.finish();
}

}  // namespace spmd::dist::tcp
