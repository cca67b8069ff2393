// Work: a one-shot completion flag with an error slot, waited on with a
// condition variable (the waiting thread sleeps; it never spins). The flag
// is an atomic, so a Work already complete is waited on, polled and
// observed without its mutex. Under
// SPMD_TRACE a wait that finds the Work pending records a "wait <op>" span
// on the waiting thread: the time the caller was blocked on it.
#include "parallel/comm/work.h"

#include <vector>

#include "runtime/error.h"
#include "runtime/trace.h"

namespace spmd::dist {
namespace {

class WaitSpan {
 public:
  explicit WaitSpan(const Work& work) {
    if (!trace_enabled() || work.is_completed()) return;
    name_ = "wait " + work.description();
    start_us_ = trace_now_us();
  }
  ~WaitSpan() {
    if (start_us_ >= 0) trace_record(name_, "comm_wait", start_us_, trace_now_us() - start_us_);
  }
  WaitSpan(const WaitSpan&) = delete;
  WaitSpan& operator=(const WaitSpan&) = delete;

 private:
  std::string name_;
  int64_t start_us_ = -1;
};

}  // namespace

Work::Work() : state_(std::make_shared<State>()) {
  state_->description = "completed work";
  state_->done.store(true, std::memory_order_relaxed);  // not yet shared
}

Work Work::completed(std::string description) {
  Work work;
  work.state_->description = std::move(description);
  return work;
}

Work::Work(std::string description, Duration default_timeout) : state_(std::make_shared<State>()) {
  state_->description = std::move(description);
  state_->default_timeout = default_timeout;
}

void Work::wait() const {
  if (state_->done.load(std::memory_order_acquire)) {  // no lock, no span: nothing to wait for
    if (state_->error) std::rethrow_exception(state_->error);
    return;
  }
  WaitSpan span(*this);
  std::function<bool()> runner;
  {
    std::lock_guard lock(state_->mu);
    // Taken, not copied (a copy allocates): a runner that returns false left
    // the operation to a thread that completes it anyway.
    if (!state_->done.load(std::memory_order_relaxed)) runner = std::move(state_->runner);
  }
  if (runner) runner();  // may run the operation right here
  wait_for(state_->default_timeout);
}

void Work::set_runner(std::function<bool()> run) const {
  std::lock_guard lock(state_->mu);
  state_->runner = std::move(run);
}

void Work::wait(Duration timeout) const {
  WaitSpan span(*this);
  wait_for(timeout);
}

void Work::wait_for(Duration timeout) const {
  if (state_->done.load(std::memory_order_acquire)) {
    if (state_->error) std::rethrow_exception(state_->error);
    return;
  }
  std::unique_lock lock(state_->mu);
  auto done = [&] { return state_->done.load(std::memory_order_relaxed); };  // under mu
  if (timeout == Duration::max()) {
    state_->cv.wait(lock, done);  // the backend bounds the op itself
  } else if (!state_->cv.wait_for(lock, timeout, done)) {
    SPMD_THROW(TimeoutError, state_->description, ": Work::wait gave up after ", timeout.count(),
               " ms; the operation has not finished (it goes on; wait again to join it)");
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::is_completed() const { return state_->done.load(std::memory_order_acquire); }

bool Work::is_success() const {
  return state_->done.load(std::memory_order_acquire) && !state_->error;  // fixed once done
}

std::exception_ptr Work::exception() const {
  if (state_->done.load(std::memory_order_acquire)) return state_->error;
  std::lock_guard lock(state_->mu);  // set by complete() before its callbacks run
  return state_->error;
}

const std::string& Work::description() const { return state_->description; }

void Work::complete(std::exception_ptr error) const {
  std::vector<std::function<void()>> callbacks;
  std::shared_ptr<const Observer> observer;
  {
    std::lock_guard lock(state_->mu);
    if (state_->done.load(std::memory_order_relaxed) || state_->completing) return;
    state_->completing = true;
    const bool ok = error == nullptr;
    state_->error = std::move(error);  // callbacks may read it through exception()
    callbacks.swap(state_->callbacks);
    state_->runner = nullptr;
    observer.swap(state_->observer);
    if (observer) observer->ended(state_->observer_id, ok);
  }
  // Callbacks run before waiters wake, so a waiter sees their effects (a
  // staged result copied back) the moment wait() returns.
  for (auto& fn : callbacks) fn();
  {
    std::lock_guard lock(state_->mu);
    state_->done.store(true, std::memory_order_release);
  }
  state_->cv.notify_all();
}

void Work::set_observer(std::shared_ptr<const Observer> observer, uint64_t id) const {
  if (state_->done.load(std::memory_order_acquire)) {  // finished at the call: no lock
    observer->ended(id, !state_->error);
    return;
  }
  {
    std::lock_guard lock(state_->mu);
    if (!state_->done.load(std::memory_order_relaxed) && !state_->completing) {
      state_->observer = std::move(observer);
      state_->observer_id = id;
      return;
    }
  }
  observer->ended(id, !exception());
}

void Work::on_complete(std::function<void()> fn) const {
  {
    std::lock_guard lock(state_->mu);
    if (!state_->done.load(std::memory_order_relaxed) && !state_->completing) {
      state_->callbacks.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

}  // namespace spmd::dist
