// The progress loop. Pump every used link; when nothing moved, sleep in
// poll() on the sockets that have work, for at most the time left; wake,
// pump the ones that are ready, repeat until the awaited ticket completes.
#include "parallel/comm/tcp/mesh.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace spmd::dist::tcp {

Mesh::Mesh(int rank, int size, std::vector<std::unique_ptr<Link>> links)
    : rank_(rank), size_(size), links_(std::move(links)) {
  SPMD_CHECK(int(links_.size()) == size_, "Mesh: ", links_.size(), " links for ", size_,
             " ranks");
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

void Mesh::begin(const Header& header, Clock::time_point deadline) {
  header_ = header;
  start_ = Clock::now();
  deadline_ = deadline;
  slow_called_ = false;
  used_.clear();
}

void Mesh::finish() {
  wait_until([&] {
    return std::all_of(used_.begin(), used_.end(), [](Link* l) { return l->idle(); });
  });
  for (Link* l : used_) l->end();
  used_.clear();
}

void Mesh::wait_until(const std::function<bool()>& done) {
  while (!done()) {
    bool moved = false;
    for (Link* l : used_) moved |= l->pump();
    if (moved || done()) continue;
    while (!poll_once(done)) {
    }
  }
}

// Sleeps until a socket is ready, then pumps the ready ones. Returns true
// once something moved (or the wait is over).
bool Mesh::poll_once(const std::function<bool()>& done) {
  pollfd fds[64];
  Link* owners[64];
  nfds_t n = 0;
  for (Link* l : used_) {
    const short ev = l->poll_events();
    if (ev && n < 64) {
      fds[n] = {l->fd(), ev, 0};
      owners[n++] = l;
    }
  }
  const auto now = Clock::now();
  if (now >= deadline_) throw_timeout();
  auto wake = deadline_;
  if (slow_hook_ && !slow_called_) wake = std::min(wake, start_ + slow_after_);
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
    return done();
  }
  bool moved = false;
  for (nfds_t i = 0; i < n; ++i) {
    if (fds[i].revents & (POLLOUT | POLLERR | POLLHUP)) moved |= owners[i]->pump_send();
    if (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) moved |= owners[i]->pump_recv();
  }
  return moved || done();
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
  std::vector<int> ranks;
  for (Link* l : used_) {
    if (l->heard()) ranks.push_back(l->peer());
  }
  return ranks;
}

void Mesh::set_slow_hook(std::chrono::milliseconds after, std::function<void()> hook) {
  slow_after_ = after;
  slow_hook_ = std::move(hook);
}

void Mesh::abort() {
  for (auto& l : links_) {
    if (l) l->shutdown();
  }
}

}  // namespace spmd::dist::tcp
