// Waiting for posts in shared memory (see the header).
#include "parallel/comm/shm/post_wait.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace spmd::dist::shm {

using tcp::Channel;
using Clock = tcp::Mesh::Clock;
using tcp::Header;
using tcp::Link;
using tcp::LinkError;

PostWait::PostWait(tcp::Mesh& mesh, std::function<bool(int)> posted, std::atomic<uint64_t>& asleep,
                   uint64_t awaiting, size_t post_bytes)
    : mesh_(mesh),
      posted_(std::move(posted)),
      asleep_(asleep),
      awaiting_(awaiting),
      post_bytes_(post_bytes) {}

void PostWait::run() {
  if (spin()) return;
  for (;;) {
    // The sleeper's half of the handshake of shm_ring.h: store the flag, a
    // full fence, then look again; the poster stores its stamp, a full
    // fence, then looks at the flag. One of the two sees the other's store,
    // and both may: a peer this rank has just seen posted can still see the
    // flag, take it down and ring. So the sleep polls every peer's link
    // (sleep), not only the missing ones': the doorbell comes on the link
    // of whichever poster took the flag down. The flag names the exchange
    // awaited, so a peer already posting the next one leaves it.
    asleep_.store(awaiting_, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (all_posted()) {
      asleep_.store(0, std::memory_order_relaxed);
      return;
    }
    if (Clock::now() >= mesh_.deadline()) throw_timeout();
    const int p = mesh_.size(), r = mesh_.rank();
    std::vector<int> missing;
    for (int j = k_; j < p; ++j) {
      if (!posted_((r + j) % p)) missing.push_back((r + j) % p);
    }
    sleep(missing);
  }
}

// Peers are awaited in ring order from rank + 1; k_ is the first not yet
// seen (those before it have posted, and posts stay until every rank has
// read them: segment_small_all_reduce.h).
bool PostWait::all_posted() {
  const int p = mesh_.size(), r = mesh_.rank();
  while (k_ < p && posted_((r + k_) % p)) ++k_;
  return k_ == p;
}

// Stages 1 and 2: the hot look, then the Mesh's bounded spin (each idle
// round yields the core when the policy says so; a post that arrives
// restarts the budget as a byte that moves does). True when every peer
// posted meanwhile.
bool PostWait::spin() {
  const tcp::SpinPolicy policy = mesh_.spin();
  auto all = [&] { return all_posted(); };
  if (policy.budget.count() == 0 ? all() : tcp::poll_hot(all, tcp::kHotPolls)) return true;
  if (policy.budget.count() == 0) return false;
  auto give_up = Clock::now() + policy.budget;
  for (;;) {
    const int before = k_;
    if (all_posted()) return true;
    const auto now = Clock::now();
    if (k_ != before) {
      give_up = now + policy.budget;
    } else if (now >= give_up || now >= mesh_.deadline()) {
      return false;
    } else if (policy.yield) {
      sched_yield();
    } else {
      tcp::cpu_relax();
    }
  }
}

// Sleeps in poll() on the links of the peers whose posts have not come, and
// on the sockets of the others (for their doorbells alone), until a
// doorbell, a death (EOF), the deadline, the slow hook or the wait report. A
// header in the rings of the missing is checked first: a peer that runs
// another call under this sequence number sends one (a mismatch).
void PostWait::sleep(const std::vector<int>& missing) {
  constexpr size_t kMax = 256;
  pollfd fds[kMax];
  Link* owners[kMax];
  nfds_t n = 0;
  bool busy = false;  // a ring holds bytes for later: sleep on the clock a little only
  const Header& header = mesh_.header();
  for (int q : missing) {
    Link& l = mesh_.peer_link(q);
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
    if (got == ssize_t(sizeof h) && h.seq == header.seq && h.group == header.group) {
      if (auto why = mismatch(h, header)) {
        throw LinkError(q, true, str_cat("header mismatch with rank ", q, ": ", *why));
      }
    }
    busy = true;
  }
  // The peers already posted: only their doorbells (the poster that took
  // the flag down may be one, run()); what their rings hold is for later.
  // prepare_wait(0) takes the bytes the socket holds and arms nothing.
  const int p = mesh_.size(), r = mesh_.rank();
  for (int j = 1; j < p && n < kMax; ++j) {
    const int q = (r + j) % p;
    if (std::find(missing.begin(), missing.end(), q) != missing.end()) continue;
    Link& l = mesh_.peer_link(q);
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
  if (asleep_.load(std::memory_order_acquire) != awaiting_) return;
  for (int q : missing) {
    if (posted_(q)) return;
  }
  const auto now = Clock::now();
  const auto soon = busy ? now + std::chrono::milliseconds(1) : mesh_.deadline();
  const auto wake = std::min(soon, mesh_.wake_by(now, [&] {
    std::vector<PeerWait> waits;
    for (int q : missing) waits.push_back({q, 0, post_bytes_});
    return waits;
  }));
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
  const int got = ::poll(fds, n, int(std::clamp<int64_t>(ms, 0, 1 << 30)));
  if (got < 0 && errno != EINTR) SPMD_THROW(CommError, "poll failed: ", std::strerror(errno));
  if (got > 0) {
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents) owners[i]->channel().on_wakeup();
    }
  } else {
    mesh_.after_timed_sleep();
  }
}

void PostWait::throw_timeout() {
  std::string missing;
  for (int q = 0; q < mesh_.size(); ++q) {
    if (q == mesh_.rank()) continue;
    if (posted_(q)) {
      mesh_.note_heard(q);
    } else {
      missing += str_cat(missing.empty() ? "" : ", ", q);
    }
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(mesh_.deadline() - mesh_.started());
  SPMD_THROW(TimeoutError, "timed out after ", ms.count(), " ms: ranks [", missing,
             "] have not posted their part in the group's shared segment");
}

}  // namespace spmd::dist::shm
