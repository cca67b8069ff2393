// WakeupTimer: the one-shot timerfd a background thread sleeps on until work
// that no other thread has taken is due (the collective queue's worker, the
// p2p engine's thread).
//
// Its policy is what makes a launch cheap: setting the timer costs a syscall
// (and, in a VM, an exit to the hypervisor), so it is set only when it would
// otherwise fire later than the new deadline, and it is never disarmed. A
// thread woken for work that another thread has already taken just sleeps
// again. (Disarming it per collective cost more than twice a small
// all_reduce's time: docs/measurements/comm.md.)
//
// Thread-safety: none of its own. The owner calls arm_by() and fired() under
// its own mutex; consume(), which may block, without it.
#pragma once

#include <chrono>

namespace spmd::dist::tcp {

class WakeupTimer {
 public:
  using Clock = std::chrono::steady_clock;

  // nonblocking: reads never block (the owner polls fd() with other fds);
  // otherwise consume() sleeps until the timer fires.
  explicit WakeupTimer(bool nonblocking);
  ~WakeupTimer();
  WakeupTimer(const WakeupTimer&) = delete;
  WakeupTimer& operator=(const WakeupTimer&) = delete;

  // Makes the timer fire no later than `when`: a syscall only when it is not
  // already set to fire by then.
  void arm_by(Clock::time_point when);
  // Records that the timer fired (or that the owner woke and will set it
  // again as needed): a one-shot timer is spent once it fires.
  void fired() { armed_for_ = Clock::time_point::max(); }

  // Reads the timer's expiry: a blocking timer sleeps here until it fires; a
  // non-blocking one (after poll() on fd()) consumes the expiry, if any.
  void consume();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  Clock::time_point armed_for_ = Clock::time_point::max();  // max: not set
};

}  // namespace spmd::dist::tcp
