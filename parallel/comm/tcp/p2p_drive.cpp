// Who moves the point-to-point engine's bytes: the thread that waits on an
// operation (drive()), or, for what nobody waits on, the engine's own thread
// (loop()), which sleeps on a timerfd set to when work nobody drives becomes
// its own. Both pump the same sockets under the engine's mutex; Works are
// completed after it is released, so a completion callback may post again.
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "parallel/comm/tcp/p2p.h"
#include "parallel/comm/tcp/p2p_state.h"
#include "runtime/error.h"

namespace spmd::dist::tcp {

// --- A waiting thread drives ----------------------------------------------------

// Pumps every socket with work until `work` completes: spinning for up to
// the spin budget without progress (tuning.h's SpinPolicy), then asleep
// in poll() on exactly those sockets, so that the message it waits for
// wakes this thread and no other.
bool P2PEngine::drive(const Work& work) {
  Lock lock(mu_);
  if (engine_driving_) return false;
  ++drivers_;
  engine_due_ = Clock::time_point::max();  // the engine need not come (its timer stays set)
  auto give_up = Clock::now() + spin_.budget;
  while (!work.is_completed() && !stopping_) {
    const bool moved = pump_all();
    expire(Clock::now());
    flush_completions(lock);
    if (work.is_completed()) break;
    const auto now = Clock::now();
    if (moved) {
      give_up = now + spin_.budget;
    } else if (now < give_up) {
      lock.unlock();                   // let another thread post meanwhile
      if (spin_.yield) sched_yield();  // a ready peer rank on this core runs first
      lock.lock();
    } else {
      sleep_on_sockets(lock, next_deadline());
    }
  }
  --drivers_;
  schedule_engine_locked();  // what is left, if nobody else waits, goes to the engine
  flush_completions(lock);
  return work.is_completed();
}

// One non-blocking pass over every peer with something to move (only those
// over shared memory when shm_only: a pass that costs no system call);
// whether a byte moved.
bool P2PEngine::pump_all(bool shm_only) {
  const uint64_t before = progress_;
  for (auto& peer : peers_) {
    if (peer->fd < 0 || !peer->dead.empty()) continue;
    if (shm_only && !peer->channel->wakes_both()) continue;
    if (!peer->sends.empty()) write_some(*peer);
    // A send in flight reads too: the peer may refuse it (p2p_refusal.cpp).
    if (!peer->recvs.empty() || !peer->sends.empty() || peer->in == Peer::In::kPayload)
      read_some(*peer);
  }
  return progress_ != before;
}

// The poll() events a peer with work waits for; 0 for one without work, and
// for one whose channel can move now (`ready` is then set).
short P2PEngine::prepare_wait(Peer& peer, bool& ready) {
  if (peer.fd < 0 || !peer.dead.empty()) return 0;
  short want = peer.sends.empty() ? 0 : POLLOUT;
  // A send in flight listens for a refusal, unless a message waits parked in
  // the socket (it would keep POLLIN raised until its recv is posted).
  const bool listens = !peer.sends.empty() && peer.in == Peer::In::kHeader;
  if (!peer.recvs.empty() || peer.in == Peer::In::kPayload || listens) want |= POLLIN;
  if (!want) return 0;
  const short ev = peer.channel->prepare_wait(want);
  if (ev == 0) ready = true;
  return ev;
}

// A peer's descriptor turned ready: move what can move.
void P2PEngine::pump_ready(Peer& peer, bool readable, bool writable) {
  if (peer.channel->wakes_both()) {
    peer.channel->on_wakeup();
    readable = writable = true;
  }
  if (readable) read_some(peer);
  if (writable) write_some(peer);
}

// Sleeps in poll() until a channel with work is ready, `until` passes, or
// 100 ms go by (so a stop() is noticed even on an idle socket).
void P2PEngine::sleep_on_sockets(Lock& lock, Clock::time_point until) {
  std::vector<pollfd> fds;
  bool ready = false;
  for (auto& peer : peers_) {
    const short events = prepare_wait(*peer, ready);
    if (events) fds.push_back({peer->fd, events, 0});
  }
  if (ready) return;  // the caller pumps again at once
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
  lock.unlock();
  ::poll(fds.data(), fds.size(), int(std::clamp<int64_t>(left, 0, 100)));
  lock.lock();
  for (const pollfd& p : fds) {  // shared memory: take the doorbells, notice a closed socket
    if (!p.revents) continue;
    for (auto& peer : peers_) {
      if (peer->fd == p.fd && peer->channel->wakes_both()) peer->channel->on_wakeup();
    }
  }
}

// --- The engine's thread drives what nobody waits on -----------------------------

// Asleep on the timer (and the stop eventfd) until pending work has gone
// start_after without a driver; then drives it to the end.
void P2PEngine::loop() {
  Lock lock(mu_);
  while (!stopping_) {
    if (drivers_ == 0 && has_pending() && engine_due_ <= Clock::now()) {
      drive_from_engine(lock);
      continue;
    }
    schedule_engine_locked();  // woken early, or for work a waiter took
    lock.unlock();
    pollfd fds[2] = {{event_fd_, POLLIN, 0}, {timer_.fd(), POLLIN, 0}};
    ::poll(fds, 2, -1);
    uint64_t ignored;
    [[maybe_unused]] ssize_t r = ::read(event_fd_, &ignored, sizeof ignored);
    timer_.consume();
    lock.lock();
    timer_.fired();
  }
}

// Drives every pending operation through edge-triggered epoll (spinning
// first when allowed), until none is left.
void P2PEngine::drive_from_engine(Lock& lock) {
  engine_driving_ = true;
  pump_all();  // edges may have been taken by a waiting thread meanwhile
  epoll_event events[64];
  auto spin_until = Clock::now() + spin_.budget;
  while (has_pending() && !stopping_) {
    flush_completions(lock);
    const bool spin = spin_.budget.count() > 0 && Clock::now() < spin_until;
    // Shared-memory peers ring no doorbell for a spinner: pump them; and
    // raise their asleep flags before sleeping.
    bool ready = false;
    if (spin) {
      if (pump_all(/*shm_only=*/true)) spin_until = Clock::now() + spin_.budget;
    } else {
      for (auto& peer : peers_) prepare_wait(*peer, ready);
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(next_deadline() - Clock::now());
    lock.unlock();
    const int n =
        ::epoll_wait(epoll_fd_, events, 64,
                     spin || ready ? 0 : int(std::clamp<int64_t>(left.count(), 0, 1 << 30)));
    if (n == 0 && spin && spin_.yield) sched_yield();
    lock.lock();
    if (n > 0) spin_until = Clock::now() + spin_.budget;
    if (ready && pump_all()) spin_until = Clock::now() + spin_.budget;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u32 == uint32_t(-1)) continue;  // stop(): the loop condition sees it
      Peer& peer = *peers_[events[i].data.u32];
      pump_ready(peer, events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP),
                 events[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP));
    }
    expire(Clock::now());
  }
  engine_driving_ = false;
  engine_due_ = Clock::time_point::max();
  flush_completions(lock);
}

// --- Scheduling the engine, completing Works --------------------------------------

// Makes sure the engine's thread wakes by the time it must take over
// pending work that no thread drives: start_after after the work was left
// without a driver. The timer is never disarmed (wakeup_timer.h): an engine
// woken for work a waiter took sleeps again.
void P2PEngine::schedule_engine_locked() {
  if (engine_driving_ || drivers_ > 0 || !has_pending()) return;
  if (engine_due_ == Clock::time_point::max()) engine_due_ = Clock::now() + start_after_;
  timer_.arm_by(engine_due_);
}

void P2PEngine::wake_engine() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(event_fd_, &one, sizeof one);
}

void P2PEngine::finish(Work work, std::exception_ptr error) {
  completions_.emplace_back(std::move(work), std::move(error));
}

// Completes the finished operations' Works with the mutex released: their
// callbacks (a batch's count, a CUDA copy back) may take time or post again.
void P2PEngine::flush_completions(Lock& lock) {
  while (!completions_.empty()) {
    std::vector<std::pair<Work, std::exception_ptr>> done;
    done.swap(completions_);
    lock.unlock();
    for (auto& [work, error] : done) work.complete(error);
    lock.lock();
  }
}

}  // namespace spmd::dist::tcp
