// Waiting for posts: how a rank waits for its peers' parts of an exchange
// that goes through memory they all map (the group segment's posts,
// segment_small_all_reduce.h) rather than through the links, with the
// collective's deadline, spin policy, slow hook and wait report (the Mesh's,
// tcp/mesh.h), so that it fails and reports as a wait on the links would.
//
// Three stages, the cheapest first:
//   1. a hot look (poll_hot: a few pauses, no clock read) at the posts;
//   2. the bounded spin of the Mesh's policy, restarted whenever a post comes;
//   3. a sleep in poll() on every peer's link. Before it the waiter raises
//      its `asleep` flag to the stamp of the exchange it awaits; a peer that
//      posts that exchange and sees the flag takes it down and rings its
//      link's doorbell (segment_small_all_reduce.cpp, wake_sleepers).
//
// The links still tell a peer's death (EOF: "lost rank q") and a header that
// a peer running another call sends (a mismatch). Past the deadline: a
// TimeoutError naming the ranks not yet posted.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "parallel/comm/tcp/mesh.h"

namespace spmd::dist::shm {

class PostWait {
 public:
  // `posted(q)`: whether peer q's part has come. `asleep`: this rank's flag
  // in the segment; `awaiting`: the stamp of the exchange waited for.
  // `post_bytes`: what each peer's post carries (its header and data), for
  // the wait report.
  // REQUIRES: the peers' links are shared memory (their channels ring).
  PostWait(tcp::Mesh& mesh, std::function<bool(int)> posted, std::atomic<uint64_t>& asleep,
           uint64_t awaiting, size_t post_bytes);
  // Returns once every peer has posted; throws LinkError or TimeoutError.
  void run();

 private:
  bool all_posted();
  bool spin();
  void sleep(const std::vector<int>& missing);
  [[noreturn]] void throw_timeout();

  tcp::Mesh& mesh_;
  std::function<bool(int)> posted_;
  std::atomic<uint64_t>& asleep_;
  uint64_t awaiting_;
  size_t post_bytes_;
  int k_ = 1;  // peers rank + 1 .. rank + k_ - 1 (mod p) have posted
};

}  // namespace spmd::dist::shm
