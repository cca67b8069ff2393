// SyncTimer: watches the reducer (ddp_reducer.h) and notes when each bucket
// of a synchronized backward was launched, could start, and was reduced,
// so DDP can say how much of its communication backward hid (the
// "all_reduce hidden %" of examples/05_ddp), and, with SPMD_TRACE, draw those
// spans in the Chrome trace. The reducer itself only calls its observer at
// four points; everything about clocks is here.
//
// Thread-safety: the ReducerObserver calls come on the thread that runs
// backward; the completion times are written by whichever thread completes a
// bucket's Work (atomics), before the reducer's wait for it returns.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/ddp/ddp_reducer.h"

namespace spmd::dist {

// When the buckets of one synchronized backward were reduced (wall-clock
// microseconds, as runtime/trace.h records them): how much of the
// communication was hidden behind the computation of backward.
struct SyncTimeline {
  struct BucketTimes {
    int64_t launch_us = 0;  // the hook launched the bucket's reduction
    // The communicator could start it: after its launch and the previous
    // bucket's completion (collectives run in order) and, when the waiting
    // thread ran it itself because the communicator's thread had not picked
    // it up, after the waiting began.
    int64_t start_us = 0;
    int64_t done_us = 0;  // its Work completed
    size_t bytes = 0;
  };
  int64_t first_ready_us = 0;        // the first gradient of this backward was ready
  int64_t compute_end_us = 0;        // backward had run its last node; the waiting began
  int64_t end_us = 0;                // every bucket reduced and copied back
  std::vector<BucketTimes> buckets;  // in launch order

  // The communicator's busy time: the sum of done_us - start_us.
  int64_t comm_us() const;
  // The part of comm_us() that ran before compute_end_us.
  int64_t hidden_us() const;
  // hidden_us() / comm_us() (1 when nothing was communicated).
  double hidden_share() const;
};

class SyncTimer : public ReducerObserver {
 public:
  void backward_started() override;
  void bucket_launched(size_t index, const Work& work, size_t bytes) override;
  void waiting_started() override;
  void backward_finished() override;

  // The last synchronized backward that finished.
  const SyncTimeline& last() const { return last_; }

 private:
  struct Bucket {  // shared with the completion callback of its Work
    int64_t launch_us = 0;
    size_t bytes = 0;
    std::atomic<int64_t> start_us{0}, done_us{0};
  };
  SyncTimeline current_, last_;
  std::vector<std::shared_ptr<Bucket>> buckets_;  // this backward's, in launch order
  // When this backward's thread began waiting for the buckets (0 before).
  std::shared_ptr<std::atomic<int64_t>> wait_since_us_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace spmd::dist
