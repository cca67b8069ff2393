// The host backend's collective queue on its own (threads, no sockets): who
// runs each collective and in what order. A waiter runs its collective, and
// any queued before it, on its own thread, in issue order; the worker starts
// one that nobody waits on, and not before `start_after`; a waiter never
// runs a collective while another thread runs one; stop() runs what is left;
// a claim (the issuing thread starting its collective itself) holds the queue.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/comm/host/collective_queue.h"
#include "runtime/error.h"

using namespace std::chrono_literals;
using spmd::dist::host::CollectiveQueue;

namespace {

// What each collective saw: its place in the run order and its thread.
struct Log {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  int completed = 0;

  CollectiveQueue::EntryPtr push(CollectiveQueue& q, int id) {
    return q.push(
        [this, id] {
          std::lock_guard lock(mu);
          order.push_back(id);
          threads.push_back(std::this_thread::get_id());
        },
        [this] {
          std::lock_guard lock(mu);
          ++completed;
          cv.notify_all();
        },
        "test collective");
  }
  // Waits (at most 5 s) until n collectives have completed.
  bool wait_completed(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 5s, [&] { return completed >= n; });
  }
};

// An entry made by hand, as a backend makes its own (not through push()).
struct Recorded final : CollectiveQueue::Entry {
  Recorded(Log& l, int i) : log(l), id(i) {}
  void run() override {
    std::lock_guard lock(log.mu);
    log.order.push_back(id);
    log.threads.push_back(std::this_thread::get_id());
  }
  void complete() override {
    std::lock_guard lock(log.mu);
    ++log.completed;
    log.cv.notify_all();
  }
  Log& log;
  int id;
};

}  // namespace

TEST_CASE("a waiter runs its collective and those before it, in order, on its own thread",
          "[comm][queue]") {
  CollectiveQueue q(std::chrono::seconds(10));  // the worker would start nothing for 10 s
  Log log;
  log.push(q, 0);
  log.push(q, 1);
  auto third = log.push(q, 2);
  auto fourth = log.push(q, 3);
  REQUIRE(q.run_through(third));
  REQUIRE(log.order == std::vector<int>{0, 1, 2});
  for (auto id : log.threads) REQUIRE(id == std::this_thread::get_id());
  REQUIRE(log.completed == 3);
  REQUIRE(q.run_through(fourth));
  REQUIRE(log.order == std::vector<int>{0, 1, 2, 3});
  REQUIRE_FALSE(q.run_through(fourth));  // done already: nothing to run
}

TEST_CASE("the worker starts a collective nobody waits on, and not before start_after",
          "[comm][queue]") {
  CollectiveQueue q(30ms);
  Log log;
  const auto launched = std::chrono::steady_clock::now();
  log.push(q, 7);
  REQUIRE(log.wait_completed(1));
  REQUIRE(std::chrono::steady_clock::now() - launched >= 30ms);
  REQUIRE(log.order == std::vector<int>{7});
  REQUIRE(log.threads[0] != std::this_thread::get_id());
}

TEST_CASE("a waiter does not run a collective while another thread runs one", "[comm][queue]") {
  CollectiveQueue q(0us);  // the worker starts each at once
  std::mutex gate;
  std::unique_lock hold(gate);
  std::atomic<bool> started{false};
  q.push(
      [&] {
        started = true;
        std::lock_guard wait_for_gate(gate);  // blocks the worker until released
      },
      [] {}, "blocked collective");
  Log log;
  auto second = log.push(q, 1);
  while (!started) std::this_thread::sleep_for(1ms);
  REQUIRE_FALSE(q.run_through(second));  // the worker is running the first
  hold.unlock();
  REQUIRE(log.wait_completed(1));
  REQUIRE(log.threads[0] != std::this_thread::get_id());  // the worker went on to it
}

TEST_CASE("a waiter that finds another collective running has its own run right after it",
          "[comm][queue]") {
  CollectiveQueue q(std::chrono::seconds(10));  // far later than this test may take
  std::mutex gate;
  std::unique_lock hold(gate);
  std::atomic<bool> started{false};
  auto first = q.push(
      [&] {
        started = true;
        std::lock_guard wait_for_gate(gate);
      },
      [] {}, "blocked collective");
  std::thread other([&] { q.run_through(first); });  // another thread waits on, and runs, it
  while (!started) std::this_thread::sleep_for(1ms);
  Log log;
  auto second = log.push(q, 1);
  REQUIRE_FALSE(q.run_through(second));  // the other thread is running the first
  hold.unlock();
  REQUIRE(log.wait_completed(1));  // within 5 s, not after the 10 s start_after
  other.join();
}

TEST_CASE("stop() runs what is queued at once; nothing can be queued after it", "[comm][queue]") {
  CollectiveQueue q(std::chrono::seconds(10));
  Log log;
  for (int i = 0; i < 5; ++i) log.push(q, i);
  const auto start = std::chrono::steady_clock::now();
  q.stop();
  REQUIRE(std::chrono::steady_clock::now() - start < 5s);  // not after the 10 s start_after
  REQUIRE(log.order == std::vector<int>{0, 1, 2, 3, 4});
  REQUIRE(log.completed == 5);
  REQUIRE_THROWS_AS(log.push(q, 5), spmd::Error);
}

TEST_CASE("a claim holds the queue for its issuing thread; what is left of it goes first",
          "[comm][queue]") {
  CollectiveQueue q(0us);  // the worker would start anything queued at once
  Log log;
  REQUIRE(q.try_claim());       // idle: the issuing thread may start its collective itself
  CHECK_FALSE(q.try_claim());   // claimed: nobody else may
  auto later = log.push(q, 1);  // issued while the claimed one runs
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(q.run_through(later));  // neither a waiter nor the worker starts it meanwhile
  {
    std::lock_guard lock(log.mu);
    CHECK(log.order.empty());
  }
  q.release(std::make_shared<Recorded>(log, 0));  // the claimed one's rest, ahead of it
  REQUIRE(log.wait_completed(2));
  std::lock_guard lock(log.mu);
  CHECK(log.order == std::vector<int>{0, 1});
}

TEST_CASE("no claim while a collective is queued; a claim that ends lets the queue go on",
          "[comm][queue]") {
  CollectiveQueue q(std::chrono::seconds(10));
  Log log;
  REQUIRE(q.try_claim());
  q.release();  // it finished on the issuing thread: nothing left
  auto first = log.push(q, 0);
  CHECK_FALSE(q.try_claim());  // a later collective may not jump the queued one
  CHECK(q.run_through(first));
  CHECK(q.try_claim());
  q.release();
  q.stop();
  CHECK_FALSE(q.try_claim());  // stopped
}

TEST_CASE("a collective queued during a claim that leaves nothing is started once it ends",
          "[comm][queue]") {
  // The worker, woken at once for it, finds the queue claimed and sleeps
  // again: the release (which takes no lock when nothing is queued) must
  // see it and set the timer.
  CollectiveQueue q(0us);
  Log log;
  REQUIRE(q.try_claim());
  log.push(q, 0);
  std::this_thread::sleep_for(5ms);
  {
    std::lock_guard lock(log.mu);
    CHECK(log.order.empty());  // not while claimed
  }
  q.release();
  CHECK(log.wait_completed(1));
}

TEST_CASE("claims on one thread and queued collectives on another never run at once",
          "[comm][queue]") {
  CollectiveQueue q(0us);
  std::atomic<int> active{0}, overlaps{0}, claimed{0};
  auto enter = [&] {  // a collective: counts any other inside it meanwhile
    if (active.fetch_add(1) != 0) overlaps.fetch_add(1);
    for (int k = 0; k < 100; ++k) {
      if (active.load() != 1) overlaps.fetch_add(1);
    }
    active.fetch_sub(1);
  };
  std::atomic<bool> stop{false};
  std::thread claimer([&] {
    while (!stop.load()) {
      if (!q.try_claim()) continue;
      enter();
      claimed.fetch_add(1);
      q.release();
    }
  });
  for (int i = 0; i < 2000; ++i) {
    auto entry = q.push(
        enter, [] {}, "test collective");
    if (i % 2) q.run_through(entry);  // half run by this waiter (when free), half by the worker
  }
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (claimed.load() < 100 && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
  stop = true;
  claimer.join();
  q.stop();
  CHECK(overlaps.load() == 0);
  CHECK(claimed.load() >= 100);
}
