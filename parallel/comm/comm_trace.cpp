// A communicator operation's trace interval: its fields taken at the issue,
// recorded by a completion callback on its Work.
#include "parallel/comm/comm_trace.h"

#include <algorithm>

#include "parallel/comm/work.h"
#include "runtime/trace.h"

namespace spmd::dist {

CommSpan::CommSpan(const CommOp& op, const std::string& group) {
  if (!trace_enabled()) return;
  on_ = true;
  type_ = op.type;
  seq_ = op.seq;
  // The larger of the op's tensors, as the flight recorder counts it (all_gather:
  // the gathered output; reduce_scatter: the input; all_reduce: the buffer).
  bytes_ = std::max<uint64_t>(op.tensor.defined() ? op.tensor.nbytes() : 0,
                              op.input.defined() ? op.input.nbytes() : 0);
  const Tensor& t = op.tensor.defined() ? op.tensor : op.input;
  dtype_ = t.defined() ? std::string(dtype_name(t.dtype())) : std::string();
  peer_ = op.peer;
  root_ = op.root;
  group_ = group;
  issued_us_ = trace_now_us();
}

const Work& CommSpan::end_with(const Work& work) const {
  if (!on_) return work;
  work.on_complete([span = *this, work] {
    TraceArgs args = {{"op", std::string(op_name(span.type_))},
                      {"group", span.group_},
                      {"seq", int64_t(span.seq_)},
                      {"bytes", int64_t(span.bytes_)}};
    if (!span.dtype_.empty()) args.emplace_back("dtype", span.dtype_);
    if (span.peer_ >= 0) args.emplace_back("peer", int64_t(span.peer_));
    if (span.root_ >= 0) args.emplace_back("root", int64_t(span.root_));
    args.emplace_back("ok", int64_t(work.exception() ? 0 : 1));
    trace_record_async(op_name(span.type_), "comm", span.issued_us_,
                       trace_now_us() - span.issued_us_, std::move(args));
  });
  return work;
}

}  // namespace spmd::dist
