// The reducer's clock (see ddp_sync_timer.h): a time at each of its four
// calls, and one per bucket when its Work completes.
#include "parallel/ddp/ddp_sync_timer.h"

#include <algorithm>
#include <thread>

#include "runtime/error.h"
#include "runtime/trace.h"

namespace spmd::dist {

void SyncTimer::backward_started() {
  current_ = {};
  buckets_.clear();
  wait_since_us_->store(0);
  current_.first_ready_us = trace_now_us();
}

// Notes the launch now; the callback, on the thread that completes the Work,
// notes when the communicator could have started the bucket and when it
// finished, and with a trace draws that span on that thread's row.
void SyncTimer::bucket_launched(size_t index, const Work& work, size_t bytes) {
  auto b = std::make_shared<Bucket>();
  b->launch_us = trace_now_us();
  b->bytes = bytes;
  std::shared_ptr<Bucket> previous = buckets_.empty() ? nullptr : buckets_.back();
  buckets_.push_back(b);
  work.on_complete([b, previous, launcher = std::this_thread::get_id(), wait_since = wait_since_us_,
                    name = str_cat("all_reduce bucket ", index, " (", bytes, " B)")] {
    const int64_t now = trace_now_us();
    int64_t from = std::max(b->launch_us, previous ? previous->done_us.load() : int64_t{0});
    // The launching thread completes a bucket only by running it from its
    // wait at the end of backward: it cannot have started before that.
    if (std::this_thread::get_id() == launcher) from = std::max(from, wait_since->load());
    b->start_us.store(from);
    b->done_us.store(now);
    if (trace_enabled()) trace_record(name, "comm", from, now - from);
  });
}

void SyncTimer::waiting_started() {
  current_.compute_end_us = trace_now_us();
  wait_since_us_->store(current_.compute_end_us);
}

// Every bucket's Work has completed: its times are written.
void SyncTimer::backward_finished() {
  current_.end_us = trace_now_us();
  for (const auto& b : buckets_)
    current_.buckets.push_back({b->launch_us, b->start_us.load(), b->done_us.load(), b->bytes});
  if (trace_enabled()) {
    trace_record("backward (first gradient ready to last node)", "compute", current_.first_ready_us,
                 current_.compute_end_us - current_.first_ready_us);
    trace_record("ddp wait for buckets", "comm", current_.compute_end_us,
                 current_.end_us - current_.compute_end_us);
  }
  last_ = current_;
}

// --- SyncTimeline ----------------------------------------------------------------

int64_t SyncTimeline::comm_us() const {
  int64_t total = 0;
  for (const BucketTimes& b : buckets) total += b.done_us - b.start_us;
  return total;
}

int64_t SyncTimeline::hidden_us() const {
  int64_t hidden = 0;
  for (const BucketTimes& b : buckets)
    hidden += std::max<int64_t>(0, std::min(b.done_us, compute_end_us) - b.start_us);
  return hidden;
}

double SyncTimeline::hidden_share() const {
  const int64_t total = comm_us();
  return total > 0 ? double(hidden_us()) / double(total) : 1.0;
}

}  // namespace spmd::dist
