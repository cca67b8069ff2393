// CollectiveQueue: runs a group's collectives one at a time, in the order
// they were issued (as NCCL runs them on a stream), on whichever thread gets
// to each one first:
//
//   - the thread that waits on it. It was going to block until the
//     collective finished anyway, so it runs it itself (and any issued
//     before it that have not started): no thread is woken, and nothing has
//     to be handed back to it at the end;
//   - else the queue's worker thread, which starts a collective nobody has
//     taken `start_after` after its launch, so a collective that is issued
//     and not waited on (overlapped with compute, or issued before a
//     point-to-point exchange it must not block) still runs by itself.
//
// Why not wake the worker at once, as a thread pool would? Waking a sleeping
// thread costs a cross-CPU interrupt, twice per collective (waking the
// worker, then waking the waiter), and on a machine with few cores the woken
// thread preempts a peer rank: it was most of a small all_reduce's time. The
// worker sleeps on a timerfd instead, set to when the first collective in
// line is due; launching sets it only when it would fire later than that (so
// in a stream of collectives, about once per start_after), and nothing
// disarms it: a worker woken for a collective its waiter took sleeps again.
// Large collectives run faster by their waiter too; one overlapped with
// compute (a DDP bucket) starts at most start_after late. The figures:
// docs/measurements/comm.md.
//
// Thread-safety: every method may be called from any thread. try_claim()
// and a release() with nothing left take no lock (below, "Claiming").
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "parallel/comm/tcp/wakeup_timer.h"

namespace spmd::dist::host {

class CollectiveQueue {
 public:
  using Clock = std::chrono::steady_clock;

  // One collective. run() executes it; complete() completes its Work. The
  // queue lets the next collective go between the two, so a caller woken by
  // the completion can run its next one at once. A backend derives its own
  // (the op and its Work in the same block: one allocation per collective).
  struct Entry {
    virtual ~Entry() = default;
    virtual void run() = 0;
    virtual void complete() = 0;
    Clock::time_point due;  // when the worker may start it
    bool done = false;      // guarded by the queue's mutex
  };
  using EntryPtr = std::shared_ptr<Entry>;

  // start_after: how long a collective waits for a thread to wait on it
  // before the worker starts it (0: at once).
  explicit CollectiveQueue(std::chrono::microseconds start_after);
  // Runs what is queued, then stops the worker (stop()).
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  // Queues a collective behind the others. The worker may start it
  // `start_after` from now.
  // REQUIRES: stop() has not been called (else throws, naming `description`).
  void push(const EntryPtr& entry, const std::string& description);
  // The same for a collective given as two functions; returns its entry.
  EntryPtr push(std::function<void()> run, std::function<void()> complete,
                const std::string& description);
  // Called by a thread about to wait on `entry`: when no collective is
  // running, runs the queued ones on this thread up to and including
  // `entry`. Returns whether `entry` ran here (false: another thread has it,
  // or runs one before it; wait for its completion, which then comes
  // without waiting for start_after).
  bool run_through(const EntryPtr& entry);
  // Claims the queue for a collective its issuing thread starts at once
  // (the small all_reduce through the group segment's posts, which often
  // ends before the call returns): true when nothing is queued or running;
  // the queue then counts it as running until release(), so nothing else
  // starts meanwhile and the issue order holds. Takes no lock.
  bool try_claim();
  // Ends a claim. `rest`, when given, is what is left of the claimed
  // collective: it goes first in line, to be run by its waiter or the
  // worker like any other. Without `rest` and with nothing queued meanwhile,
  // takes no lock.
  void release(const EntryPtr& rest = nullptr);
  // Lets the worker run everything queued at once, then joins it.
  void stop();

 private:
  void worker_loop();
  bool start_running();
  void run_front(std::unique_lock<std::mutex>& lock);
  void set_queue_size_locked() { queued_.store(queue_.size()); }
  void schedule_locked();

  // Claiming. running_ says a thread runs a collective; whoever sets it
  // does so with a compare-exchange (start_running, try_claim), so of a
  // claimer, which holds no lock, and a thread under mu_ only one wins.
  // queued_ mirrors queue_.size() and stopping_ is set under mu_, so that
  // a claimer can read both without it. All three are sequentially
  // consistent: a releaser stores running_ = false, then loads queued_ and
  // stopping_; a thread that queues or stops stores those and arms the
  // worker's timer whatever running_ holds, and the worker, woken, takes
  // running_ by its compare-exchange. So either the releaser sees the new
  // entry (or the stop) and hands it on, or the worker's compare-exchange
  // comes after the release and wins: a collective queued during a claim is
  // never left without its timer.
  std::atomic<bool> running_{false};
  std::atomic<size_t> queued_{0};
  std::atomic<bool> stopping_{false};

  std::chrono::microseconds start_after_;
  std::mutex mu_;           // guards everything below
  tcp::WakeupTimer timer_;  // the worker sleeps on it
  std::deque<EntryPtr> queue_;
  std::thread worker_;
};

}  // namespace spmd::dist::host
