// Work: the handle an asynchronous collective returns, as torch.distributed's
// Work. The call returns before the collective has run: TCP runs it on the
// thread that waits on it, else on the group's worker after a moment; NCCL
// queues it on a stream. wait() joins it, is_completed() polls it. A Work
// that failed carries its error (a CommError, TimeoutError or
// InvalidArgument naming the op, its sequence number and the group), which
// wait() rethrows.
//
// A Work is a shared handle: copies name the same operation. Thread-safety:
// any thread may wait on or poll a Work; the backend completes it once.
// Once complete, a Work is read without its mutex (an atomic `done`, stored
// with release after the error and the callbacks): waiting on, polling or
// observing one that finished at the call takes no lock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace spmd::dist {

class Work {
 public:
  using Duration = std::chrono::milliseconds;

  // An already-completed, successful Work (what a rank outside a group, or a
  // no-op, returns).
  Work();
  // A pending Work that the backend will complete. `description` names it in
  // errors ("all_reduce #5 in group world"); `default_timeout` bounds wait().
  Work(std::string description, Duration default_timeout);
  // An operation that the backend finished, successfully, before returning
  // its Work (the TCP backend's small all_reduce started at the call).
  static Work completed(std::string description);

  // Blocks until the operation has finished and rethrows its error if it
  // failed. Waits at most the default timeout the backend gave (its own
  // collective timeout plus a grace period, since the backend enforces that
  // timeout itself), then throws TimeoutError.
  void wait() const;
  // As wait(), but throws TimeoutError when the operation has not finished
  // within `timeout`. The operation itself goes on; wait again to join it.
  void wait(Duration timeout) const;
  // True once the operation has finished, successfully or not. Never blocks.
  bool is_completed() const;
  // True when it finished without error.
  bool is_success() const;
  // The error it failed with; null while pending or after success (set
  // already when on_complete callbacks run).
  std::exception_ptr exception() const;
  const std::string& description() const;

  // Told when an operation ends, without an allocation per operation (the
  // group's ledger and flight recorder, process_group.h): a callback
  // (on_complete) costs a heap block per Work, an observer a pointer.
  class Observer {
   public:
    virtual ~Observer() = default;
    // Runs on the completing thread, before the callbacks; must not throw.
    virtual void ended(uint64_t id, bool ok) const noexcept = 0;
  };
  // Calls observer->ended(id, ok) when the operation completes (at once if
  // it has). One per Work; a second replaces the first.
  void set_observer(std::shared_ptr<const Observer> observer, uint64_t id) const;

  // --- For backends ---------------------------------------------------------
  // Marks the operation finished: successful when `error` is null. Later
  // calls are ignored (the first outcome wins). Runs the callbacks.
  void complete(std::exception_ptr error = nullptr) const;
  // Runs `fn` (on the completing thread, or at once if already complete).
  // Used to copy staged results back or release buffers; must not throw.
  void on_complete(std::function<void()> fn) const;
  // Lets wait() (without a timeout) run the operation on the waiting thread
  // when the backend has not started it yet: `run` returns whether it did
  // (and then completed this Work). The caller was going to block until the
  // operation finished anyway, so nothing changes but who executes it, and
  // the hand-offs to and from a worker thread are saved.
  void set_runner(std::function<bool()> run) const;

 private:
  void wait_for(Duration timeout) const;  // wait(timeout), untraced

  struct State {
    std::string description;
    Duration default_timeout{};
    mutable std::mutex mu;
    std::condition_variable cv;
    // Written under mu with release; read with acquire without mu. Once
    // true, error is fixed and the callbacks have run.
    std::atomic<bool> done{false};
    bool completing = false;  // complete() has begun (the first outcome wins)
    std::exception_ptr error;
    std::vector<std::function<void()>> callbacks;
    std::function<bool()> runner;
    std::shared_ptr<const Observer> observer;
    uint64_t observer_id = 0;
  };
  std::shared_ptr<State> state_;
};

}  // namespace spmd::dist
