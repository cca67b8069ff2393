// Running a collective of the host backend: shared memory first when the
// whole group is on this host (../shm/run_in_segment.h), else the algorithm
// that algorithm_choice.h picks, over the group's links. Each run notes the
// algorithm's name for last_algorithm().
#include <cstring>

#include "parallel/comm/host/host_process_group.h"
#include "parallel/comm/shm/run_in_segment.h"
#include "parallel/comm/tcp/all_to_all.h"
#include "parallel/comm/tcp/barrier.h"
#include "parallel/comm/tcp/chain.h"
#include "parallel/comm/tcp/gather_scatter.h"
#include "parallel/comm/tcp/recursive_doubling.h"
#include "parallel/comm/tcp/ring.h"
#include "parallel/comm/tcp/tree.h"
#include "runtime/error.h"

namespace spmd::dist {

using namespace tcp;   // NOLINT: this file is the backend's own
using namespace host;  // NOLINT

void HostProcessGroup::run_algorithm(CommOp& op, char* data, char* input) {
  const Tensor& held = op.tensor.defined() ? op.tensor : op.input;
  const DType dt = held.defined() ? held.dtype() : DType::kF32;
  const size_t elem = element_size(dt);
  const size_t n = op.tensor.defined() ? size_t(op.tensor.numel()) : 0;
  const size_t n_in = op.input.defined() ? size_t(op.input.numel()) : 0;
  Span whole{data, n, dt, elem};
  Span in{input, n_in, dt, elem};
  Context ctx{*mesh_, workspace_, tuning_};
  if (segment_ && op.type != OpType::kBarrier &&
      shm::run_in_segment(ctx, *segment_, op.type, whole, in, op.root, op.reduce_op)) {
    return note_algorithm(op.type, "shm_segment");
  }
  const size_t bytes = op.type == OpType::kReduceScatter ? in.bytes() : whole.bytes();
  const Algorithm algorithm =
      choose_algorithm(op.type, bytes, tuning_, hierarchy_.has_value(), hierarchy_mode_);
  run_chosen(algorithm, op, whole, in);
  note_algorithm(op.type, algorithm_name(algorithm));
}

void HostProcessGroup::run_chosen(Algorithm algorithm, CommOp& op, Span whole, Span in) {
  Context ctx{*mesh_, workspace_, tuning_};
  if (op.type == OpType::kAllGather) {  // this rank's block in place, where the algorithms want it
    char* slot = whole.at(size_t(rank()) * in.count);
    if (slot != in.data && in.bytes() > 0) std::memmove(slot, in.data, in.bytes());
  }
  switch (algorithm) {
    case Algorithm::kDissemination:
      return DisseminationBarrier(ctx).run();
    case Algorithm::kTree:
      if (op.type == OpType::kBroadcast) return TreeBroadcast(ctx, whole, op.root).run();
      return TreeReduce(ctx, whole, op.root, op.reduce_op).run();
    case Algorithm::kChain:
      if (op.type == OpType::kBroadcast) return ChainBroadcast(ctx, whole, op.root).run();
      return ChainReduce(ctx, whole, op.root, op.reduce_op).run();
    case Algorithm::kRecursiveDoubling:
      return RecursiveDoublingAllReduce(ctx, whole, op.reduce_op).run();
    case Algorithm::kRing:
      if (op.type == OpType::kAllReduce) return Ring::all_reduce(ctx, whole, op.reduce_op).run();
      if (op.type == OpType::kAllGather) return Ring::all_gather(ctx, whole).run();
      return Ring::reduce_scatter(ctx, in, whole, op.reduce_op).run();
    case Algorithm::kHierarchical:
      if (op.type == OpType::kAllReduce) {
        return HierarchicalAllReduce(ctx, rail_workspace_, *hierarchy_, whole, op.reduce_op).run();
      }
      if (op.type == OpType::kAllGather) {
        return HierarchicalAllGather(ctx, rail_workspace_, *hierarchy_, whole).run();
      }
      return HierarchicalReduceScatter(ctx, rail_workspace_, *hierarchy_, in, whole, op.reduce_op)
          .run();
    case Algorithm::kPairwise:
      return AllToAll(ctx, in, whole, op.send_counts, op.recv_counts, op.send_offsets,
                      op.recv_offsets)
          .run();
    case Algorithm::kDirect:
      if (op.type == OpType::kGather) return FlatGather(ctx, in, whole, op.root).run();
      return FlatScatter(ctx, in, whole, op.root).run();
  }
}

// A group of one: every collective is a local copy at most.
void HostProcessGroup::run_alone(CommOp& op, char* data, char* input) {
  note_algorithm(op.type, "local");
  const size_t bytes = op.tensor.defined() ? op.tensor.nbytes() : 0;
  if (op.type == OpType::kAllToAll || op.type == OpType::kAllToAllv) {
    const size_t elem = element_size(op.tensor.dtype());  // one block, to ourselves
    const size_t n = op.recv_counts[0] * elem;
    char* to = data + op.recv_offsets[0] * elem;
    const char* from = input + op.send_offsets[0] * elem;
    if (n > 0 && to != from) std::memmove(to, from, n);
    return;
  }
  const bool copies = op.type == OpType::kAllGather || op.type == OpType::kReduceScatter ||
                      op.type == OpType::kGather || op.type == OpType::kScatter;
  if (copies && bytes > 0 && data != input) std::memmove(data, input, bytes);
}

std::string HostProcessGroup::last_algorithm(OpType op) const {
  const char* name = last_algorithm_[size_t(op)].load();
  return name ? name : "";
}

std::string HostProcessGroup::algorithm_summary() const {
  if (!hierarchy_) {
    return host_count_ == 1
               ? "flat (one host)"
               : str_cat("flat (", host_count_,
                         " hosts, not the same number of ranks, two or more, on each)");
  }
  if (hierarchy_mode_ == HierarchyMode::kNever) {
    return str_cat("flat (", hierarchy_->describe(), ", SPMD_HIERARCHICAL=0)");
  }
  const std::string all_reduce =
      hierarchy_mode_ == HierarchyMode::kAlways
          ? std::string("all_reduce")
          : str_cat("all_reduce above ", tuning_.small_all_reduce_bytes, " bytes");
  return str_cat("hierarchical (", hierarchy_->describe(), ") for ", all_reduce,
                 ", all_gather, reduce_scatter: within each host, then across");
}

}  // namespace spmd::dist
