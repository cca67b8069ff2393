// The NCCL backend's watchdog, the thread that completes the group's Works.
// A host function queued behind each collective marks its record finished
// and rings the doorbell; the watchdog then completes the Work here, where
// its callbacks may call CUDA (a host function may not). A GPU collective
// cannot be waited on with a timeout, and NCCL reports some errors only
// asynchronously, so the same thread watches the oldest pending collective:
// it records in the store that this rank arrived at a slow one, and on a
// deadline or an asynchronous error aborts the communicator (unblocking the
// GPU) and fails every pending Work with a message naming the op and the
// ranks that never arrived.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "parallel/comm/nccl/nccl_process_group.h"
#include "parallel/comm/nccl/nccl_state.h"
#include "runtime/error.h"

namespace spmd::dist {
namespace {

// How often the watchdog checks the deadlines when no collective finishes.
constexpr std::chrono::milliseconds kWatchdogPeriod(50);

}  // namespace

// Wakes at each finished collective, and every 50 ms while others are
// pending: completes the finished ones, records the arrival of slow ones in
// the store, and aborts on a deadline or an asynchronous NCCL error.
void NcclProcessGroup::watchdog_loop() {
  (void)cudaSetDevice(device_);  // for the CUDA work that the Works' callbacks queue
  for (;;) {
    state_->doorbell->wait_for(kWatchdogPeriod);
    complete_finished();
    std::unique_lock lock(mu_);
    if (stopping_) return;
    // After an abort, the records only wait for their host functions.
    if (pending_.empty() || !failure_.empty()) continue;
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(state_->comm, &async);
    const std::shared_ptr<Pending> oldest = pending_.front();
    const auto now = Clock::now();
    if (async != ncclSuccess && async != ncclInProgress) {
      const std::string why = str_cat("NCCL reported an error: ", ncclGetErrorString(async), " (",
                                      ncclGetLastError(state_->comm), ")");
      lock.unlock();
      abort_all(why, false);
    } else if (now > oldest->deadline) {
      lock.unlock();
      abort_all(str_cat("timed out after ", timeout().count(), " ms; ", never_arrived(oldest->seq),
                        oldest->collective ? desync_report(oldest->seq) : ""),
                true);
    } else if (!oldest->announced && now > oldest->start + slow_after(timeout())) {
      oldest->announced = true;  // only this thread reads or writes it
      lock.unlock();
      try {
        store().set(key(str_cat("arrived/", oldest->seq, "/", rank())), std::string_view("1"));
      } catch (...) {
      }
    }
  }
}

// Completes, in issue order, the Works whose collectives have run on the
// GPU, and drops their records (releasing the tensors they held). Runs
// without mu_, so a callback may issue another collective.
void NcclProcessGroup::complete_finished() {
  std::vector<std::shared_ptr<Pending>> done;
  {
    std::lock_guard lock(mu_);
    while (!pending_.empty() && pending_.front()->finished) {
      done.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
  }
  if (done.empty()) return;
  for (const auto& record : done) record->work.complete();  // ignored if an abort failed it
  cv_.notify_all();                                         // shutdown() may be waiting
}

// Aborts the communicator (unblocking the GPU) and fails every pending op
// that has not finished. One whose host function has already run finished
// before the abort: complete_finished() completes it as a success.
void NcclProcessGroup::abort_all(const std::string& why, bool timed_out) {
  std::vector<std::shared_ptr<Pending>> failed;
  std::string failure;
  {
    std::lock_guard lock(mu_);
    if (!failure_.empty() || !state_->comm) return;
    for (const auto& p : pending_) {
      if (!p->finished) failed.push_back(p);
    }
    failure_ = str_cat(failed.empty() ? std::string("a collective") : failed.front()->description,
                       " (rank ", rank(), " of ", size(), ") failed: ", why);
    failure = failure_;
    // Under mu_, as every use of the communicator: no thread is issuing on
    // it now, and every later enqueue sees failure_ and issues nothing.
    ncclCommAbort(state_->comm);
    state_->comm = nullptr;
  }
  set_aborted();
  note_failure();
  dump_flight_record(failed.empty() || !failed.front()->collective ? -1
                                                                   : int64_t(failed.front()->seq),
                     failure);
  try {
    const std::string mine = str_cat(rank_name(rank()), " reported: ", failure);
    store().compare_set(key("abort"), {}, Bytes(mine.begin(), mine.end()));
  } catch (...) {
  }
  for (const auto& p : failed) {
    const std::string message =
        p == failed.front() ? failure : str_cat(p->description, ": aborted after ", failure);
    p->work.complete(timed_out ? std::make_exception_ptr(TimeoutError(message))
                               : std::make_exception_ptr(CommError(message)));
  }
}

// The ranks with no arrival record for collective `seq` (waiting a little for
// late records).
std::string NcclProcessGroup::never_arrived(uint64_t seq) {
  std::string missing;
  try {
    std::vector<std::string> keys;
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) keys.push_back(key(str_cat("arrived/", seq, "/", r)));
    }
    try {
      store().wait(keys, slow_after(timeout()));
    } catch (const TimeoutError&) {
    }
    for (int r = 0; r < size(); ++r) {
      if (r != rank() && !store().check({key(str_cat("arrived/", seq, "/", r))})) {
        missing += str_cat(missing.empty() ? "" : ", ", r);
      }
    }
  } catch (const std::exception& e) {
    return str_cat("the store could not say which ranks arrived (", e.what(), ")");
  }
  if (missing.empty()) return "every rank reached it (a peer is stuck or too slow)";
  return str_cat("ranks that never arrived at #", seq, ": [", missing, "]");
}

}  // namespace spmd::dist
