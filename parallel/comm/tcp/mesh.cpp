// The progress loop. Pump every used link; when nothing moved, spin for a
// bounded time if allowed, then sleep in poll() on the sockets that have
// work, for at most the time left; wake, pump the ones that are ready, repeat
// until the awaited ticket completes.
#include "parallel/comm/tcp/mesh.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace spmd::dist::tcp {

Mesh::Mesh(int rank, int size, std::vector<std::unique_ptr<Link>> links)
    : rank_(rank), size_(size), links_(std::move(links)) {
  SPMD_CHECK(int(links_.size()) == size_, "Mesh: ", links_.size(), " links for ", size_, " ranks");
}

Link& Mesh::link(int peer) {
  SPMD_CHECK(peer >= 0 && peer < size_ && peer != rank_, "Mesh::link: no link from rank ", rank_,
             " to rank ", peer, " in a group of ", size_);
  Link* l = links_[peer].get();
  if (std::find(used_.begin(), used_.end(), l) == used_.end()) {
    l->begin(header_, header_);
    used_.push_back(l);
  }
  return *l;
}

void Mesh::begin(const Header& header, Clock::time_point deadline, Clock::time_point now) {
  header_ = header;
  start_ = now;
  deadline_ = deadline;
  slow_called_ = false;
  next_report_ = start_ + report_every_;
  used_.clear();
  glanced_.assign(size_, false);
  heard_.clear();
}

void Mesh::finish() {
  if (used_.empty()) return;  // a collective that moved nothing on the links (the posts)
  drain();
  for (Link* l : used_) l->end();
  used_.clear();
}

void Mesh::drain() {
  wait_until(
      [&] { return std::all_of(used_.begin(), used_.end(), [](Link* l) { return l->idle(); }); });
}

void Mesh::wait_until(const std::function<bool()>& done) {
  if (done()) return;
  // The algorithm may have queued sends or posted receives since it last
  // waited: try every link once, then move only what poll() says is ready.
  for (Link* l : used_) l->pump();
  while (!done()) {
    if (spin_.budget.count() > 0) {
      spin_while_waiting(done);
      if (done()) return;
    }
    poll_once();
  }
}

// The bounded spin: pump every used link without sleeping until done() holds
// or nothing has moved for the spin budget. A message that arrives meanwhile
// is read at once, without the cost of waking a thread that sleeps in poll()
// (docs/measurements/comm.md). When the ranks outnumber the cores, each idle
// round yields the core, so a peer rank that shares it runs at once instead
// of waiting for the spinner's time slice to end.
void Mesh::spin_while_waiting(const std::function<bool()>& done) {
  auto give_up = Clock::now() + spin_.budget;
  while (!done()) {
    bool moved = false;
    for (Link* l : used_) moved |= l->pump();
    const auto now = Clock::now();
    if (moved) {
      give_up = now + spin_.budget;
    } else if (now >= give_up || now >= deadline_) {
      return;
    } else if (spin_.yield) {
      sched_yield();
    }
  }
}

// Sleeps until a channel is ready (or the deadline, or the slow hook, is
// due), then pumps the ready ones. A shared-memory link that can move at
// once (its rings changed while it got ready to sleep) skips the sleep.
void Mesh::poll_once() {
  constexpr nfds_t kMax = 256;
  pollfd fds[kMax];
  Link* owners[kMax];
  nfds_t n = 0, n_used = 0;
  bool ready_now = false;
  for (Link* l : used_) {
    const short ev = l->prepare_wait();
    if (ev == 0) {
      ready_now |= l->wanted_events() != 0;
    } else if (n < kMax) {
      fds[n] = {l->fd(), ev, 0};
      owners[n++] = l;
    }
  }
  n_used = n;
  for (int peer = 0; peer < size_ && n < kMax; ++peer) {  // unused links, until glanced at
    Link* l = links_[peer].get();
    if (!l || glanced_[peer] || std::find(used_.begin(), used_.end(), l) != used_.end()) continue;
    if (l->channel().prepare_wait(POLLIN) == 0) {  // bytes in its ring already
      peek_unused(*l);
      continue;
    }
    fds[n] = {l->fd(), POLLIN, 0};
    owners[n++] = l;
  }
  const auto now = Clock::now();
  if (now >= deadline_) throw_timeout();
  if (ready_now) {
    for (Link* l : used_) l->pump();
    return;
  }
  if (glance_) glance_();
  const auto wake = wake_by(now, [this] { return waiting_on(); });
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
  const int r = ::poll(fds, n, int(std::clamp<int64_t>(ms, 0, 1 << 30)));
  if (r < 0 && errno != EINTR) {
    SPMD_THROW(CommError, "poll failed: ", std::strerror(errno));
  }
  if (r <= 0) {
    after_timed_sleep();
    return;
  }
  for (nfds_t i = 0; i < n_used; ++i) {
    if (fds[i].revents) owners[i]->on_ready(fds[i].revents);
  }
  for (nfds_t i = n_used; i < n; ++i) {
    if (fds[i].revents) {
      owners[i]->channel().on_wakeup();
      peek_unused(*owners[i]);
    }
  }
}

// Something arrived on a link this collective has not used (yet): if it is a
// header of this very collective that differs from ours, the peer is running
// another call under the same number. (An identical one is a message the
// algorithm will read later.)
void Mesh::peek_unused(Link& l) {
  glanced_[l.peer()] = true;  // whatever it is, it is looked at once
  Header h;
  const ssize_t r = l.channel().peek(&h, sizeof h);
  if (r != ssize_t(sizeof h) || h.seq != header_.seq || h.group != header_.group) return;
  if (auto why = mismatch(h, header_)) {
    throw LinkError(l.peer(), true, str_cat("header mismatch with rank ", l.peer(), ": ", *why));
  }
}

void Mesh::throw_timeout() const {
  std::string waiting;
  for (Link* l : used_) {
    std::string p = l->pending();
    if (!p.empty()) waiting += (waiting.empty() ? "" : "; ") + p;
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - start_);
  SPMD_THROW(TimeoutError, "timed out after ", ms.count(), " ms",
             waiting.empty() ? std::string() : ": " + waiting);
}

std::vector<int> Mesh::heard_from() const {
  std::vector<int> ranks = heard_;
  for (Link* l : used_) {
    if (l->heard()) ranks.push_back(l->peer());
  }
  return ranks;
}

Mesh::Clock::time_point Mesh::wake_by(Clock::time_point now,
                                      const std::function<std::vector<PeerWait>()>& waits) {
  auto wake = deadline_;
  if (slow_hook_ && !slow_called_) wake = std::min(wake, start_ + slow_after_);
  if (wait_report_) {
    if (now >= next_report_) {
      wait_report_(waits());
      next_report_ = now + report_every_;
    }
    wake = std::min(wake, next_report_);
  }
  return wake;
}

void Mesh::after_timed_sleep() {
  if (slow_hook_ && !slow_called_ && Clock::now() >= start_ + slow_after_) {
    slow_called_ = true;
    slow_hook_();
  }
}

void Mesh::set_slow_hook(std::chrono::milliseconds after, std::function<void()> hook) {
  slow_after_ = after;
  slow_hook_ = std::move(hook);
}

void Mesh::set_wait_report(std::chrono::milliseconds every,
                           std::function<void(std::vector<PeerWait>)> report) {
  report_every_ = every;
  wait_report_ = std::move(report);
}

std::vector<PeerWait> Mesh::waiting_on() const {
  std::vector<PeerWait> out;
  for (const Link* l : used_) {
    const Link::Inflow in = l->inflow();
    if (in.expected > in.received) out.push_back({l->peer(), in.received, in.expected});
  }
  return out;
}

void Mesh::abort() {
  for (auto& l : links_) {
    if (l) l->shutdown();
  }
}

}  // namespace spmd::dist::tcp
