// Link: the connection to one peer as a collective algorithm sees it. An
// algorithm queues sends (byte ranges to write in order) and posts receives
// (byte ranges to fill in order) and gets a ticket for each; the Mesh moves
// the bytes while the algorithm waits for the tickets it needs. Nothing on a
// Link blocks: pump() writes and reads as much as its channel (channel.h: a
// TCP socket, or shared-memory rings for a peer on this host) takes right
// now, with one write for every queued range and one read straight into
// every posted destination (over TCP one sendmsg and one recvmsg, no
// intermediate copy), and prepare_wait() says what to sleep on when nothing
// can move.
//
// Each collective opens with a header (parallel/comm/tcp/wire.h) in each
// direction the algorithm uses: the first send() queues it ahead of the data
// (so it leaves in the same syscall) and the first recv() posts a slot for the
// peer's, which is checked the moment it lands.
//
// Thread-safety: none; a Link is used by the thread running the current
// collective (one at a time: ../host/collective_queue.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "parallel/comm/tcp/channel.h"
#include "parallel/comm/tcp/wire.h"
#include "runtime/error.h"

namespace spmd::dist::tcp {

// A failure on one link: the peer closed or reset the connection, or sent a
// header that does not match. The process group adds the op and group.
class LinkError : public CommError {
 public:
  LinkError(int peer, bool mismatch, const std::string& what)
      : CommError(what), peer_(peer), mismatch_(mismatch) {}
  int peer() const { return peer_; }
  // True for a header mismatch (the ranks disagree on the call), false for a
  // lost connection.
  bool is_mismatch() const { return mismatch_; }

 private:
  int peer_;
  bool mismatch_;
};

class Link {
 public:
  using Ticket = uint64_t;

  // Takes ownership of `fd`, a connected TCP socket to group rank `peer`.
  Link(int peer, int fd);
  // Over any channel to `peer`.
  Link(int peer, std::unique_ptr<Channel> channel);
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int peer() const { return peer_; }
  int fd() const { return channel_->fd(); }
  Channel& channel() { return *channel_; }

  // Starts a collective: `to_send` goes before the first data sent,
  // `to_expect` must match the first header received.
  void begin(const Header& to_send, const Header& to_expect);
  // Ends it. REQUIRES: nothing queued or posted.
  void end();
  // The headers of the current collective. An algorithm whose message sizes
  // differ per peer (all_to_all) adjusts them before the first send / recv.
  const Header& send_header() const { return send_header_; }
  const Header& expect_header() const { return expect_header_; }
  void set_send_header(const Header& h) { send_header_ = h; }
  void set_expect_header(const Header& h) { expect_header_ = h; }

  // Queues n bytes at data (which must stay valid until sent()). Returns the
  // ticket to wait on.
  Ticket send(const void* data, size_t n);
  // Posts a receive of exactly n bytes into dst. Returns its ticket.
  Ticket recv(void* dst, size_t n);
  bool sent(Ticket t) const { return sends_done_ > t; }
  bool received(Ticket t) const { return recvs_done_ > t; }
  bool idle() const { return out_.empty() && in_.empty(); }
  // Whether the peer's header for this collective has arrived (it has
  // reached the collective).
  bool heard() const { return heard_; }

  // What this link waits for: POLLOUT while sends are queued, POLLIN while
  // receives are posted; 0 when idle.
  short wanted_events() const;
  // Before sleeping: the poll() events to wait for on fd(), or 0 when the
  // link can move now (or is idle, or an empty range is next) and must not
  // sleep.
  short prepare_wait();
  // poll() reported `revents` on fd(): pumps what they say can move.
  void on_ready(short revents);
  // Moves whatever the channel accepts or holds now, without blocking; returns
  // whether any byte moved. Throws LinkError when the peer is gone or its
  // header does not match.
  bool pump();
  bool pump_send();
  bool pump_recv();

  // This collective's bytes from the peer: arrived so far, and arrived plus
  // what is posted and not yet arrived (the header counts, as it travels).
  struct Inflow {
    size_t received = 0, expected = 0;
  };
  Inflow inflow() const;
  // What this link still waits for, for a timeout message ("4096 of 8192
  // bytes from rank 3 not yet received").
  std::string pending() const;
  // Shuts the socket down in both directions: the peer sees EOF at once, and
  // every later operation on this link fails. Safe from any thread.
  void shutdown() { channel_->shutdown(); }

 private:
  struct Range {
    char* data;
    size_t left;
    bool is_header;
  };
  void retire_sends(size_t n);
  void retire_recvs(size_t n);
  [[noreturn]] void fail_io(const char* what, int err) const;

  int peer_;
  std::unique_ptr<Channel> channel_;
  std::deque<Range> out_;  // queued sends, in order
  std::deque<Range> in_;   // posted receives, in order
  Ticket sends_done_ = 0, sends_posted_ = 0;
  Ticket recvs_done_ = 0, recvs_posted_ = 0;
  size_t bytes_in_ = 0, bytes_out_ = 0;  // moved in this collective (for messages)
  Header send_header_, expect_header_, got_header_;
  bool header_queued_ = false, header_posted_ = false, in_collective_ = false, heard_ = false;
};

}  // namespace spmd::dist::tcp
