// The NCCL backend's watchdog. A GPU collective cannot be waited on with a
// timeout, and NCCL reports some errors only asynchronously, so a thread
// watches the oldest pending collective: it drops finished ones, records in
// the store that this rank arrived at a slow one, and on a deadline or an
// asynchronous error aborts the communicator (unblocking the GPU) and fails
// every pending Work with a message naming the op and the ranks that never
// arrived.
#include <nccl.h>

#include "parallel/comm/nccl/nccl_process_group.h"
#include "parallel/comm/nccl/nccl_state.h"
#include "runtime/error.h"

namespace spmd::dist {

// Wakes every 50 ms while collectives are pending: drops the finished ones,
// records the arrival of slow ones in the store, and aborts on a deadline or
// an asynchronous NCCL error.
void NcclProcessGroup::watchdog_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(50));
    while (!pending_.empty() && pending_.front()->finished) pending_.pop_front();
    if (pending_.empty()) {
      cv_.notify_all();  // shutdown() may be waiting for this
      continue;
    }
    if (!failure_.empty() || !state_->comm) continue;
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(state_->comm, &async);
    const auto now = Clock::now();
    std::shared_ptr<Pending> oldest = pending_.front();
    if (oldest->work.is_completed()) continue;  // failed by an abort; its host function is due
    if (async != ncclSuccess && async != ncclInProgress) {
      lock.unlock();
      abort_all(str_cat("NCCL reported an error: ", ncclGetErrorString(async), " (",
                        ncclGetLastError(state_->comm), ")"),
                false);
      lock.lock();
    } else if (now > oldest->deadline) {
      lock.unlock();
      abort_all(str_cat("timed out after ", timeout().count(), " ms; ", never_arrived(oldest->seq)),
                true);
      lock.lock();
    } else if (!oldest->announced && now > oldest->start + slow_after(timeout())) {
      oldest->announced = true;
      try {
        store().set(key(str_cat("arrived/", oldest->seq, "/", rank())), std::string_view("1"));
      } catch (...) {
      }
    }
  }
}

// Aborts the communicator (unblocking the GPU) and fails every pending op.
void NcclProcessGroup::abort_all(const std::string& why, bool timed_out) {
  std::deque<std::shared_ptr<Pending>> failed;
  {
    std::lock_guard lock(mu_);
    if (!failure_.empty()) return;
    failure_ =
        str_cat(pending_.empty() ? std::string("a collective") : pending_.front()->description,
                " (rank ", rank(), " of ", size(), ") failed: ", why);
    failed = pending_;
  }
  set_aborted();
  try {
    const std::string mine = str_cat(rank_name(rank()), " reported: ", failure_);
    store().compare_set(key("abort"), {}, Bytes(mine.begin(), mine.end()));
  } catch (...) {
  }
  ncclCommAbort(state_->comm);
  for (auto& p : failed) {
    const std::string message = p->description == failed.front()->description
                                    ? failure_
                                    : str_cat(p->description, ": aborted after ", failure_);
    p->work.complete(timed_out ? std::make_exception_ptr(TimeoutError(message))
                               : std::make_exception_ptr(CommError(message)));
  }
  cv_.notify_all();
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
