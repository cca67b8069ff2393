// The collective queue: a waiter runs its collective itself; the worker,
// asleep on a timerfd, starts only those nobody has taken in time.
#include "parallel/comm/host/collective_queue.h"

#include "runtime/error.h"

namespace spmd::dist::host {

using namespace tcp;  // NOLINT: the backend's own

CollectiveQueue::CollectiveQueue(std::chrono::microseconds start_after)
    : start_after_(start_after), timer_(/*nonblocking=*/false) {
  worker_ = std::thread([this] { worker_loop(); });
}

CollectiveQueue::~CollectiveQueue() { stop(); }

namespace {
struct FunctionEntry final : CollectiveQueue::Entry {
  FunctionEntry(std::function<void()> r, std::function<void()> c)
      : run_fn(std::move(r)), complete_fn(std::move(c)) {}
  void run() override { run_fn(); }
  void complete() override { complete_fn(); }
  std::function<void()> run_fn, complete_fn;
};
}  // namespace

CollectiveQueue::EntryPtr CollectiveQueue::push(std::function<void()> run,
                                                std::function<void()> complete,
                                                const std::string& description) {
  auto entry = std::make_shared<FunctionEntry>(std::move(run), std::move(complete));
  push(entry, description);
  return entry;
}

void CollectiveQueue::push(const EntryPtr& entry, const std::string& description) {
  entry->due = Clock::now() + start_after_;
  std::lock_guard lock(mu_);
  SPMD_CHECK(!stopping_, description, ": the group has been shut down");
  queue_.push_back(entry);
  set_queue_size_locked();
  // A timer already set fires no later than this one is due (the worker then
  // sets it again for the first in line), so most launches cost no syscall.
  timer_.arm_by(entry->due);
}

bool CollectiveQueue::run_through(const EntryPtr& entry) {
  std::unique_lock lock(mu_);
  bool ran = false;
  while (!ran && !entry->done && !queue_.empty() && start_running()) {
    ran = queue_.front() == entry;
    run_front(lock);
  }
  if (!ran && !entry->done) {
    // Another thread is running one ahead of it, and this thread will sleep
    // until it completes: it and those before it are due now, so whoever
    // ends the running one goes straight on to them.
    const auto now = Clock::now();
    for (const EntryPtr& e : queue_) {
      e->due = std::min(e->due, now);
      if (e == entry) break;
    }
  }
  schedule_locked();
  return ran;
}

// Without the lock (the header's "Claiming"): take running_, then look
// again at queued_ and stopping_; one queued or a stop begun meanwhile
// gives the claim back.
bool CollectiveQueue::try_claim() {
  if (queued_.load() != 0 || stopping_.load() || !start_running()) return false;
  if (queued_.load() == 0 && !stopping_.load()) return true;
  release();
  return false;
}

void CollectiveQueue::release(const EntryPtr& rest) {
  if (!rest) {
    running_.store(false);
    // Nothing queued meanwhile and no stop: nothing for the timer to do.
    if (queued_.load() == 0 && !stopping_.load()) return;
    std::lock_guard lock(mu_);
    return schedule_locked();
  }
  std::lock_guard lock(mu_);
  rest->due = Clock::now() + start_after_;
  queue_.push_front(rest);
  set_queue_size_locked();
  running_.store(false);
  schedule_locked();
}

void CollectiveQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_.store(true);
    schedule_locked();
  }
  if (worker_.joinable()) worker_.join();
}

// Sleeps on the timer until the first collective in line is due (or the
// queue stops), runs it unless another thread took it meanwhile, repeats.
void CollectiveQueue::worker_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!queue_.empty() && (stopping_ || queue_.front()->due <= Clock::now()) && start_running()) {
      run_front(lock);
      continue;
    }
    if (stopping_ && queue_.empty() && !running_) return;
    schedule_locked();
    lock.unlock();
    timer_.consume();
    lock.lock();
    timer_.fired();
  }
}

// Takes running_ for this thread, unless another (a claimer) has it.
bool CollectiveQueue::start_running() {
  bool expected = false;
  return running_.compare_exchange_strong(expected, true);
}

// Runs the first collective in line on this thread, which has taken
// running_ (start_running); lets the next one go before completing this
// one's Work. `lock` is held on entry and on return.
void CollectiveQueue::run_front(std::unique_lock<std::mutex>& lock) {
  EntryPtr entry = std::move(queue_.front());
  queue_.pop_front();
  set_queue_size_locked();
  lock.unlock();
  entry->run();
  lock.lock();
  running_.store(false);
  entry->done = true;
  lock.unlock();
  entry->complete();
  lock.lock();
}

// Makes sure the timer fires by the time the worker may have to start the
// first collective in line (at once when stopping), unless a collective is
// running: its thread calls this again when it ends. A collective taken by
// its waiter leaves the timer set (wakeup_timer.h: never disarmed), and the
// worker, woken for nothing, sleeps again.
void CollectiveQueue::schedule_locked() {
  if (running_) return;  // the running thread calls this when it ends
  if (stopping_) return timer_.arm_by(Clock::now());
  if (!queue_.empty()) timer_.arm_by(queue_.front()->due);
}

}  // namespace spmd::dist::host
