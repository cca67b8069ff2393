// ProcessGroup's collectives that move each rank's own blocks to chosen
// places: gather and scatter (to and from one root), and all_to_allv (any
// block anywhere). As in process_group.cpp, bad arguments throw here, at the
// call; the sizes only the peers know are checked on the wire.
#include <algorithm>

#include "parallel/comm/arg_checks.h"
#include "parallel/comm/process_group.h"
#include "runtime/error.h"

namespace spmd::dist {

using detail::check_pair;
using detail::check_tensor;
using detail::is_block;
using detail::mark_written;
using detail::overlap;

namespace {

void check_root(int root, int size, std::string_view op, const std::string& group) {
  SPMD_CHECK(root >= 0 && root < size, op, ": root ", root, " is not a rank of group ", group,
             " (size ", size, ")");
}

// all_to_allv's counts and offsets for one tensor, as element counts: one per
// rank, non-negative, every block inside the tensor (empty offsets: blocks
// back to back).
struct Blocks {
  std::vector<size_t> counts, offsets;
};

Blocks check_blocks(const Tensor& t, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& offsets, int size, const char* what) {
  SPMD_CHECK(int(counts.size()) == size, "all_to_allv: ", counts.size(), " ", what,
             " counts for a group of ", size);
  SPMD_CHECK(offsets.empty() || int(offsets.size()) == size, "all_to_allv: ", offsets.size(), " ",
             what, " offsets for a group of ", size, " (pass none for blocks back to back)");
  Blocks b;
  for (int r = 0; r < size; ++r) {
    SPMD_CHECK(counts[r] >= 0, "all_to_allv: negative ", what, " count ", counts[r], " for rank ",
               r);
    b.counts.push_back(size_t(counts[r]));
  }
  if (offsets.empty()) {
    b.offsets = detail::back_to_back(b.counts);
  } else {
    for (int r = 0; r < size; ++r) {
      SPMD_CHECK(offsets[r] >= 0, "all_to_allv: negative ", what, " offset ", offsets[r],
                 " for rank ", r);
      b.offsets.push_back(size_t(offsets[r]));
    }
  }
  for (int r = 0; r < size; ++r) {
    SPMD_CHECK(b.offsets[r] + b.counts[r] <= size_t(t.numel()), "all_to_allv: the ", what,
               " block for rank ", r, " (elements ", b.offsets[r], " to ",
               b.offsets[r] + b.counts[r], ") ends past the tensor's ", t.numel(), " elements");
  }
  return b;
}

// Two output blocks that share an element would leave it to whichever
// arrives last.
void check_disjoint(const Blocks& out) {
  std::vector<std::pair<size_t, int>> starts;  // (offset, rank) of the non-empty blocks
  for (size_t r = 0; r < out.counts.size(); ++r) {
    if (out.counts[r] > 0) starts.emplace_back(out.offsets[r], int(r));
  }
  std::sort(starts.begin(), starts.end());
  for (size_t k = 1; k < starts.size(); ++k) {
    const int a = starts[k - 1].second, b = starts[k].second;
    SPMD_CHECK(out.offsets[a] + out.counts[a] <= out.offsets[b], "all_to_allv: the output blocks ",
               "from ranks ", a, " and ", b, " overlap (elements ", out.offsets[b], " to ",
               out.offsets[a] + out.counts[a], ")");
  }
}

}  // namespace

Work ProcessGroup::gather(const Tensor& output, const Tensor& input, int root) {
  check_root(root, size_, "gather", name());
  check_tensor(input, "gather", "input");
  const bool receives = rank_ == root;
  if (receives) {
    check_pair(output, input, "gather");
    SPMD_CHECK(output.numel() == size_ * input.numel(), "gather: root's output has ",
               output.numel(), " elements but the group of ", size_, " ranks gathers ", size_,
               " x ", input.numel());
    SPMD_CHECK(!overlap(output, input) || is_block(output, input, root),
               "gather: the input overlaps the output other than as the root's block");
  }
  CommOp op = collective(OpType::kGather, "gather");
  if (receives) {
    op.tensor = output;
    mark_written(output);
  }
  op.input = input;
  op.root = root;
  count(OpType::kGather, uint64_t(size_) * input.nbytes());
  return issue(std::move(op));
}

Work ProcessGroup::scatter(const Tensor& output, const Tensor& input, int root) {
  check_root(root, size_, "scatter", name());
  check_tensor(output, "scatter", "output");
  const bool sends = rank_ == root;
  if (sends) {
    check_pair(output, input, "scatter");
    SPMD_CHECK(input.numel() == size_ * output.numel(), "scatter: root's input has ", input.numel(),
               " elements, which is not the group size ", size_, " x output's ", output.numel());
    SPMD_CHECK(!overlap(output, input) || is_block(input, output, root),
               "scatter: the output overlaps the input other than as the root's block");
  }
  CommOp op = collective(OpType::kScatter, "scatter");
  if (sends) op.input = input;
  op.tensor = output;
  mark_written(output);
  op.root = root;
  count(OpType::kScatter, uint64_t(size_) * output.nbytes());
  return issue(std::move(op));
}

Work ProcessGroup::all_to_allv(const Tensor& output, const Tensor& input,
                               const std::vector<int64_t>& output_counts,
                               const std::vector<int64_t>& input_counts,
                               const std::vector<int64_t>& output_offsets,
                               const std::vector<int64_t>& input_offsets) {
  check_pair(output, input, "all_to_allv");
  SPMD_CHECK(!overlap(output, input), "all_to_allv: the output overlaps the input");
  Blocks send = check_blocks(input, input_counts, input_offsets, size_, "input");
  Blocks recv = check_blocks(output, output_counts, output_offsets, size_, "output");
  check_disjoint(recv);
  SPMD_CHECK(send.counts[rank_] == recv.counts[rank_], "all_to_allv: this rank keeps ",
             send.counts[rank_], " of its own elements but expects ", recv.counts[rank_],
             " from itself");
  CommOp op = collective(OpType::kAllToAllv, "all_to_allv");
  op.tensor = output;
  mark_written(output);
  op.input = input;
  uint64_t sent = 0;
  for (size_t c : send.counts) sent += c;
  op.send_counts = std::move(send.counts);
  op.send_offsets = std::move(send.offsets);
  op.recv_counts = std::move(recv.counts);
  op.recv_offsets = std::move(recv.offsets);
  count(OpType::kAllToAllv, sent * element_size(input.dtype()));
  return issue(std::move(op));
}

}  // namespace spmd::dist
