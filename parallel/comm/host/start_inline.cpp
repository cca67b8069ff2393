// The host backend's one collective that starts at the call: a small
// all_reduce through a one-host group's posts (segment_small_all_reduce.h).
// The rest of the group is in host_process_group.cpp.
#include <algorithm>
#include <optional>

#include "parallel/comm/host/host_process_group.h"
#include "parallel/comm/shm/group_segment.h"
#include "parallel/comm/shm/segment_small_all_reduce.h"

namespace spmd::dist {

using namespace tcp;   // NOLINT: this file is the backend's own
using namespace host;  // NOLINT

// A small all_reduce through the group segment's posts, when nothing else of
// the group is queued or running, starts on the issuing thread: it posts
// this rank's part and spins a moment (at most kIssueSpin) for the peers'.
// When they have come (in a stream of collectives the peers are seldom far
// apart) it reduces and returns a Work made complete (Work::completed: no
// queue entry, no runner, no lock for a waiter to take). Else what is left
// goes first in the queue, for the waiter or the worker to finish as any
// collective. Either way the call returns at once (within the spin): a
// caller that issues it before a point-to-point exchange it depends on is
// not blocked. Returns nothing when the collective is not one for here.
std::optional<Work> HostProcessGroup::start_inline(CommOp& op) {
  constexpr auto kIssueSpin = std::chrono::microseconds(3);
  if (!segment_ || op.type != OpType::kAllReduce || !op.tensor.defined() ||
      !segment_->fits_post(op.tensor.nbytes()) || !queue_ || !queue_->try_claim()) {
    return std::nullopt;
  }
  if (!aborted_.empty()) {  // the queued path fails it, as any later collective
    queue_->release();
    return std::nullopt;
  }
  const Tensor& t = op.tensor;
  Context ctx{*mesh_, workspace_, tuning_};
  Span data{static_cast<char*>(t.raw_data()), size_t(t.numel()), t.dtype(),
            element_size(t.dtype())};
  std::shared_ptr<Queued> item;
  try {
    // One clock read (issue()'s, when the flight recorder took one): the
    // deadline and the spin's end.
    const auto now = begin_on_host(op, op.issued_at);
    note_algorithm(OpType::kAllReduce, "shm_segment");  // the posts are the segment's
    shm::SegmentSmallAllReduce exchange(ctx, *segment_, data, op.reduce_op);
    exchange.post();
    const SpinPolicy spin = tuning_.spin();
    const int hot_polls = spin.budget.count() > 0 ? kHotPolls : 0;  // a zero budget never spins
    if (exchange.all_posted(now + std::min<std::chrono::nanoseconds>(kIssueSpin, spin.budget),
                            spin.yield, hot_polls)) {
      exchange.finish();
      end_on_host(op);
    } else {
      Work work(op.description, Work::Duration::max());
      item = std::make_shared<Queued>(*this, std::move(op), work);
      item->rest = std::make_unique<shm::SegmentSmallAllReduce>(exchange);
    }
  } catch (...) {
    const CommOp& failed = item ? item->op : op;  // item took op (only bad_alloc comes after)
    std::exception_ptr error = fail(failed, std::current_exception());
    queue_->release();
    Work work(failed.description, Work::Duration::max());
    work.complete(error);
    return work;
  }
  queue_->release(item);
  if (!item) return Work::completed(std::move(op.description));  // op is done with
  item->work.set_runner(
      [group = weak_from_this(), weak = std::weak_ptr<CollectiveQueue::Entry>(item)] {
        auto g = group.lock();
        auto e = weak.lock();
        return g && e && g->queue_->run_through(e);
      });
  return item->work;
}

}  // namespace spmd::dist
