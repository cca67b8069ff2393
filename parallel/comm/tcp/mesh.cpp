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
  posted_.clear();
}

void Mesh::finish() {
  if (used_.empty()) return;  // a collective that moved nothing on the links (the posts)
  wait_until(
      [&] { return std::all_of(used_.begin(), used_.end(), [](Link* l) { return l->idle(); }); });
  for (Link* l : used_) l->end();
  used_.clear();
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
  auto wake = deadline_;
  if (slow_hook_ && !slow_called_) wake = std::min(wake, start_ + slow_after_);
  if (wait_report_) {
    if (now >= next_report_) {
      wait_report_(waiting_on());
      next_report_ = now + report_every_;
    }
    wake = std::min(wake, next_report_);
  }
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
  const int r = ::poll(fds, n, int(std::clamp<int64_t>(ms, 0, 1 << 30)));
  if (r < 0 && errno != EINTR) {
    SPMD_THROW(CommError, "poll failed: ", std::strerror(errno));
  }
  if (r <= 0) {
    if (slow_hook_ && !slow_called_ && Clock::now() >= start_ + slow_after_) {
      slow_called_ = true;
      slow_hook_();
    }
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
  std::vector<int> ranks = posted_;
  for (Link* l : used_) {
    if (l->heard()) ranks.push_back(l->peer());
  }
  return ranks;
}

// --- Waiting for posts in shared memory ---------------------------------------------

// Peers are awaited in ring order from rank + 1; k is the first not yet
// seen (those before it have posted, and posts stay until every rank has
// read them: segment_small_all_reduce.h). The spin is spin_while_waiting's:
// each idle round yields the core (when the policy says so), a post that
// arrives restarts the budget as a byte that moves does.
void Mesh::wait_posted(const std::function<bool(int)>& posted, std::atomic<uint64_t>& asleep,
                       uint64_t awaiting, size_t post_bytes) {
  int k = 1;
  auto all_posted = [&] {
    while (k < size_ && posted((rank_ + k) % size_)) ++k;
    return k == size_;
  };
  if (spin_.budget.count() == 0 ? all_posted() : poll_hot(all_posted, kHotPolls)) return;
  if (spin_.budget.count() > 0) {
    auto give_up = Clock::now() + spin_.budget;
    for (;;) {
      const int before = k;
      if (all_posted()) return;
      const auto now = Clock::now();
      if (k != before) {
        give_up = now + spin_.budget;
      } else if (now >= give_up || now >= deadline_) {
        break;
      } else if (spin_.yield) {
        sched_yield();
      } else {
        cpu_relax();
      }
    }
  }
  for (;;) {
    // The sleeper's half of the handshake of shm_ring.h: store the flag, a
    // full fence, then look again; the poster stores its stamp, a full
    // fence, then looks at the flag. One of the two sees the other's store,
    // and both may: a peer this rank has just seen posted can still see the
    // flag, take it down and ring. So the sleep polls every peer's link
    // (sleep_for_posts), not only the missing ones': the doorbell comes on
    // the link of whichever poster took the flag down. The flag names the
    // exchange awaited, so a peer already posting the next one leaves it.
    asleep.store(awaiting, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (all_posted()) {
      asleep.store(0, std::memory_order_relaxed);
      return;
    }
    if (Clock::now() >= deadline_) throw_post_timeout(posted);
    std::vector<int> missing;
    for (int j = k; j < size_; ++j) {
      if (!posted((rank_ + j) % size_)) missing.push_back((rank_ + j) % size_);
    }
    sleep_for_posts(posted, missing, asleep, awaiting, post_bytes);
  }
}

// Sleeps in poll() on the links of the peers whose posts have not come, and
// on the sockets of the others (for their doorbells alone), until a
// doorbell, a death (EOF), the deadline, the slow hook or the wait report. A
// header in the rings of the missing is checked first: a peer that runs
// another call under this sequence number sends one (a mismatch).
void Mesh::sleep_for_posts(const std::function<bool(int)>& posted, const std::vector<int>& missing,
                           const std::atomic<uint64_t>& asleep, uint64_t awaiting,
                           size_t post_bytes) {
  constexpr size_t kMax = 256;
  pollfd fds[kMax];
  Link* owners[kMax];
  nfds_t n = 0;
  bool busy = false;  // a ring holds bytes for later: sleep on the clock a little only
  for (int q : missing) {
    Link& l = *links_[q];
    Channel& c = l.channel();
    if (c.prepare_wait(POLLIN) != 0) {
      if (n < kMax) {
        fds[n] = {l.fd(), POLLIN, 0};
        owners[n++] = &l;
      }
      continue;
    }
    Header h;  // bytes in its ring, or its socket closed
    const ssize_t got = c.peek(&h, sizeof h);
    if (got <= 0) {
      throw LinkError(q, false,
                      str_cat("lost rank ", q,
                              " (waiting for its part in the shared "
                              "segment: the peer closed the connection; it exited, was killed, "
                              "or aborted after an error of its own)"));
    }
    if (got == ssize_t(sizeof h) && h.seq == header_.seq && h.group == header_.group) {
      if (auto why = mismatch(h, header_)) {
        throw LinkError(q, true, str_cat("header mismatch with rank ", q, ": ", *why));
      }
    }
    busy = true;
  }
  // The peers already posted: only their doorbells (the poster that took
  // the flag down may be one, wait_posted); what their rings hold is for
  // later. prepare_wait(0) takes the bytes the socket holds and arms nothing.
  for (int j = 1; j < size_ && n < kMax; ++j) {
    const int q = (rank_ + j) % size_;
    if (std::find(missing.begin(), missing.end(), q) != missing.end()) continue;
    Link& l = *links_[q];
    if (l.channel().prepare_wait(0) != 0) {
      fds[n] = {l.fd(), POLLIN, 0};
      owners[n++] = &l;
    }
  }
  // Getting the links ready took the bytes their sockets held, and a
  // poster's doorbell may have been one of them: look at the flag and the
  // posts once more, or sleep through it (until the next wait report, 100
  // ms; docs/shm.md, "No lost wake-up"). A poster took the flag down (and
  // stored its stamp) before it sent its byte, so a byte read here shows
  // as a flag taken down, or a post come; either way the caller looks
  // again, raising the flag anew.
  if (asleep.load(std::memory_order_acquire) != awaiting) return;
  for (int q : missing) {
    if (posted(q)) return;
  }
  const auto now = Clock::now();
  auto wake = busy ? std::min(deadline_, now + std::chrono::milliseconds(1)) : deadline_;
  if (slow_hook_ && !slow_called_) wake = std::min(wake, start_ + slow_after_);
  if (wait_report_) {
    if (now >= next_report_) {
      std::vector<PeerWait> waits;
      for (int q : missing) waits.push_back({q, 0, post_bytes});
      wait_report_(std::move(waits));
      next_report_ = now + report_every_;
    }
    wake = std::min(wake, next_report_);
  }
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
  const int r = ::poll(fds, n, int(std::clamp<int64_t>(ms, 0, 1 << 30)));
  if (r < 0 && errno != EINTR) SPMD_THROW(CommError, "poll failed: ", std::strerror(errno));
  if (r > 0) {
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents) owners[i]->channel().on_wakeup();
    }
  } else if (slow_hook_ && !slow_called_ && Clock::now() >= start_ + slow_after_) {
    slow_called_ = true;
    slow_hook_();
  }
}

void Mesh::throw_post_timeout(const std::function<bool(int)>& posted) {
  std::string missing;
  posted_.clear();
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    if (posted(q)) {
      posted_.push_back(q);
    } else {
      missing += str_cat(missing.empty() ? "" : ", ", q);
    }
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - start_);
  SPMD_THROW(TimeoutError, "timed out after ", ms.count(), " ms: ranks [", missing,
             "] have not posted their part in the group's shared segment");
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
