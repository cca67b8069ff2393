// Traces of the communicator (runtime/trace.h, under SPMD_TRACE=dir): each
// operation a group issues is an interval from its issue to its completion,
// named by its op ("all_reduce"), with args op, group, seq, bytes, dtype,
// peer (send / recv, and the root of rooted collectives), and ok (false when
// it failed). It is an async interval, on a row of its own beside the
// caller's thread, because it overlaps the compute that runs while it is in
// flight; the time a caller blocks on it is the "wait" span Work::wait()
// records on the caller's thread.
#pragma once

#include <cstdint>
#include <string>

#include "parallel/comm/types.h"

namespace spmd::dist {

class Work;  // work.h

// What an operation's interval records, taken at its issue (before the op
// is moved into the backend).
class CommSpan {
 public:
  // Empty (records nothing) when tracing is off.
  CommSpan(const CommOp& op, const std::string& group);
  // Records the interval when `work` completes; returns `work`.
  const Work& end_with(const Work& work) const;

 private:
  bool on_ = false;
  OpType type_ = OpType::kBarrier;
  uint64_t seq_ = 0;
  uint64_t bytes_ = 0;
  int peer_ = -1;  // send / recv: the other rank
  int root_ = -1;  // broadcast, reduce, gather, scatter
  std::string group_, dtype_;
  int64_t issued_us_ = 0;
};

}  // namespace spmd::dist
