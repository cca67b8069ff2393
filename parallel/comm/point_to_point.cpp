// ProcessGroup's point-to-point ops: send, recv and batch_isend_irecv. As in
// process_group.cpp, bad arguments (a peer that is not another rank of the
// group, a tensor that cannot be sent) throw here, at the call. Sends and
// receives are numbered in a sequence of their own, apart from the
// collectives'.
#include <memory>
#include <mutex>

#include "parallel/comm/arg_checks.h"
#include "parallel/comm/process_group.h"
#include "runtime/error.h"

namespace spmd::dist {

using detail::check_tensor;
using detail::mark_written;

Work ProcessGroup::send(const Tensor& t, int dst, int tag) {
  return issue(point_to_point(OpType::kSend, t, dst, tag));
}

Work ProcessGroup::recv(const Tensor& t, int src, int tag) {
  CommOp op = point_to_point(OpType::kRecv, t, src, tag);
  mark_written(t);
  return issue(std::move(op));
}

Work ProcessGroup::batch_isend_irecv(const std::vector<P2POp>& ops) {
  std::vector<CommOp> checked;
  for (const P2POp& p : ops) {
    SPMD_CHECK(p.type == OpType::kSend || p.type == OpType::kRecv,
               "batch_isend_irecv: each op must be a send or a recv, got ", op_name(p.type));
    checked.push_back(point_to_point(p.type, p.tensor, p.peer, p.tag));
  }
  for (const CommOp& op : checked) {
    if (op.type == OpType::kRecv) mark_written(op.tensor);
  }
  if (checked.empty()) return Work();
  return launch_batch(std::move(checked));
}

CommOp ProcessGroup::point_to_point(OpType type, const Tensor& t, int peer, int tag) {
  const bool is_send = type == OpType::kSend;
  const char* what = is_send ? "send" : "recv";
  check_tensor(t, what, "");
  SPMD_CHECK(peer >= 0 && peer < size_ && peer != rank_, what, ": ",
             is_send ? "destination " : "source ", peer, " must be another rank of group ", name(),
             " (size ", size_, ", this is rank ", rank_, ")");
  count(type, t);
  CommOp op;
  op.type = type;
  op.seq = next_p2p_++;
  op.tensor = t;
  op.peer = peer;
  op.tag = tag;
  op.description = str_cat(what, " #", op.seq, is_send ? " to " : " from ", rank_name(peer),
                           " with tag ", tag, " in group ", name());
  return op;
}

// One Work for many: completes when the last does, with the first error.
Work ProcessGroup::launch_batch(std::vector<CommOp> ops) {
  struct Count {
    std::mutex mu;
    size_t left;
    std::exception_ptr error;
  };
  Work all(str_cat("batch of ", ops.size(), " sends/recvs in group ", name()),
           Work::Duration::max());
  auto count = std::make_shared<Count>();
  count->left = ops.size();
  std::vector<Work> parts;
  for (CommOp& op : ops) {
    Work one = issue(std::move(op));
    one.on_complete([one, all, count] {
      std::exception_ptr error = one.exception();
      std::lock_guard lock(count->mu);
      if (error && !count->error) count->error = error;
      if (--count->left == 0) all.complete(count->error);
    });
    parts.push_back(one);
  }
  // Waiting on the batch is waiting on each part, so a backend that lets a
  // waiter run an operation (Work::set_runner) does so for the batch too.
  all.set_runner([parts] {
    for (const Work& part : parts) {
      try {
        part.wait();
      } catch (...) {  // the batch reports the first error itself
      }
    }
    return true;
  });
  return all;
}

}  // namespace spmd::dist
