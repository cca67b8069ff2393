// WakeupTimer: a timerfd on CLOCK_MONOTONIC, set to absolute deadlines.
#include "parallel/comm/tcp/wakeup_timer.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "runtime/error.h"

namespace spmd::dist::tcp {

WakeupTimer::WakeupTimer(bool nonblocking) {
  fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | (nonblocking ? TFD_NONBLOCK : 0));
  SPMD_CHECK(fd_ >= 0, "timerfd_create failed: ", std::strerror(errno));
}

WakeupTimer::~WakeupTimer() { ::close(fd_); }

void WakeupTimer::arm_by(Clock::time_point when) {
  if (when >= armed_for_) return;
  armed_for_ = when;
  // steady_clock is CLOCK_MONOTONIC on Linux, so its time points are the
  // timer's absolute times.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch());
  itimerspec spec{};
  spec.it_value.tv_sec = ns.count() / 1000000000;
  spec.it_value.tv_nsec = std::max<int64_t>(1, ns.count() % 1000000000);  // 0 would disarm it
  ::timerfd_settime(fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void WakeupTimer::consume() {
  uint64_t expirations = 0;
  [[maybe_unused]] const ssize_t r = ::read(fd_, &expirations, sizeof expirations);
}

}  // namespace spmd::dist::tcp
