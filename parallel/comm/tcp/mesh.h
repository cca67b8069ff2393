// Mesh: a group's full mesh of Links (one per peer) and the progress loop that
// moves their bytes. A collective algorithm runs on the thread that runs the
// collective (../host/collective_queue.h; one at a time): it queues sends and posts
// receives on the links it needs, then calls wait_recv()/wait_sent() for the
// ticket it depends on next. While it waits, the Mesh pumps every link the
// collective has touched, so sends and receives to all peers progress
// together, and sleeps in poll() when no socket can move. It spins (pumps
// without sleeping) only when set_spin() allowed it, for a bounded time
// without progress (tuning.h, docs/comm.md).
//
// While it waits, the Mesh also glances (MSG_PEEK) at the first bytes that
// arrive on links the collective has not used: a header there with the
// current sequence number but other fields means a peer is running another
// call under the same number (a rank called broadcast where the others
// called all_reduce), which would otherwise go unnoticed until the timeout.
//
// Every wait is bounded by the collective's deadline; past it the wait throws
// TimeoutError saying which bytes are missing from whom. A collective that has
// waited longer than `slow_after` calls the slow hook once (the group uses it
// to record, in the store, that this rank arrived, so a timeout can name the
// ranks that never did).
//
// Thread-safety: only abort() may be called from another thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/tcp/link.h"
#include "parallel/comm/tcp/tuning.h"
#include "runtime/progress.h"

namespace spmd::dist::tcp {

class Mesh {
 public:
  using Clock = std::chrono::steady_clock;

  // links[peer] is the link to each other rank; links[rank] is null.
  Mesh(int rank, int size, std::vector<std::unique_ptr<Link>> links);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The link to `peer`; marks it as used by the current collective.
  Link& link(int peer);

  // Starts a collective: every link will send and expect `header` (an
  // algorithm may change one link's headers, as all_to_all does with its
  // per-pair counts, through link(peer).begin()). `deadline` bounds it.
  void begin(const Header& header, Clock::time_point deadline) {
    begin(header, deadline, Clock::now());
  }
  // The same, for a caller that has just read the clock: `now` (one clock
  // read fewer on a small collective's path).
  void begin(const Header& header, Clock::time_point deadline, Clock::time_point now);
  // Waits until every queued send has left, then closes the collective.
  void finish();
  // Waits until every used link is idle (its queued sends have left, its
  // posted receives have arrived); the collective goes on.
  void drain();

  void wait_recv(Link& l, Link::Ticket t) {
    wait_until([&] { return l.received(t); });
  }
  void wait_sent(Link& l, Link::Ticket t) {
    wait_until([&] { return l.sent(t); });
  }
  // Moves bytes on every used link until done() holds.
  void wait_until(const std::function<bool()>& done);
  // Rings the doorbell of the link to `peer` (Channel::doorbell).
  void ring(int peer) { links_[peer]->channel().doorbell(); }
  // The current collective's header.
  const Header& header() const { return header_; }
  // Moves what can move now on every used link, without waiting.
  void progress() {
    for (Link* l : used_) l->pump();
  }

  // The peers whose header for the current (or just failed) collective has
  // arrived, and those noted by note_heard(): the ranks known to have
  // reached it.
  std::vector<int> heard_from() const;
  // Counts `peer` as having reached the current collective, for a wait
  // outside the links that saw it there (shm/post_wait.h).
  void note_heard(int peer) { heard_.push_back(peer); }

  // For a wait on memory the peers write outside the links (shm/post_wait.h),
  // which sleeps in poll() on the links itself but keeps the collective's
  // clock: the link to `peer` without marking it used; the spin policy; when
  // the collective began and its deadline.
  Link& peer_link(int peer) { return *links_[peer]; }
  SpinPolicy spin() const { return spin_; }
  Clock::time_point started() const { return start_; }
  Clock::time_point deadline() const { return deadline_; }
  // The moment a sleep that begins `now` must end: the deadline, the slow
  // hook's moment, or the next wait report, which it sends first when it is
  // due, with what `waits` says this rank waits for.
  Clock::time_point wake_by(Clock::time_point now,
                            const std::function<std::vector<PeerWait>()>& waits);
  // After a sleep that the clock ended: calls the slow hook once it is due.
  void after_timed_sleep();

  // Before sleeping in poll(), keep pumping as `spin` says (tuning.h; the
  // default budget of zero sleeps at once).
  void set_spin(SpinPolicy spin) { spin_ = spin; }
  // Calls `glance` before each sleep in poll() in wait_until: a look at
  // memory the peers write outside the links (the group segment's posts,
  // ../shm/segment_small_all_reduce.h), which throws what it finds wrong there.
  void set_glance(std::function<void()> glance) { glance_ = std::move(glance); }
  // Calls `hook` once per collective that has waited longer than `after`.
  void set_slow_hook(std::chrono::milliseconds after, std::function<void()> hook);
  // Calls `report` with what the current collective waits for (each used
  // link with receives posted: its peer and bytes) once it has waited
  // `every`, and again every `every` while it goes on waiting; a collective
  // that finishes sooner costs nothing.
  void set_wait_report(std::chrono::milliseconds every,
                       std::function<void(std::vector<PeerWait>)> report);
  // The used links with receives posted, as set_wait_report() reports them.
  std::vector<PeerWait> waiting_on() const;
  // Shuts every connection down: peers see EOF, and this mesh is unusable.
  // Safe from any thread.
  void abort();

 private:
  void spin_while_waiting(const std::function<bool()>& done);
  void poll_once();
  void peek_unused(Link& l);
  [[noreturn]] void throw_timeout() const;

  int rank_, size_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<Link*> used_;    // links touched by the current collective
  std::vector<bool> glanced_;  // unused links already peeked at in this collective
  std::vector<int> heard_;     // peers note_heard() counted (for heard_from)
  Header header_;
  Clock::time_point start_, deadline_;
  SpinPolicy spin_;
  std::chrono::milliseconds slow_after_{0};
  std::function<void()> slow_hook_;
  std::function<void()> glance_;
  bool slow_called_ = false;
  std::chrono::milliseconds report_every_{0};
  std::function<void(std::vector<PeerWait>)> wait_report_;
  Clock::time_point next_report_;
};

}  // namespace spmd::dist::tcp
