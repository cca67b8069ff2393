// The op table and one case's buffers, call, fill and check.
#include "bench/collectives/cases.h"

#include "bench/collectives/values.h"
#include "runtime/error.h"
#include "tensor/copy.h"
#include "tensor/factory.h"

namespace spmd::bench {

using dist::ReduceOp;

namespace {
// Written into outputs before a check: no correct result is ever this large
// (sums of up to 100 ranks stay below it), and it is exact in every dtype.
constexpr double kSentinel = 1000;
}  // namespace

const std::vector<OpKind>& all_op_kinds() {
  static const std::vector<OpKind> kAll = {
      OpKind::kAllReduce,     OpKind::kBroadcast, OpKind::kReduce,  OpKind::kAllGather,
      OpKind::kReduceScatter, OpKind::kAllToAll,  OpKind::kSendRecv};
  return kAll;
}

std::string_view op_kind_name(OpKind op) {
  switch (op) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

std::optional<OpKind> parse_op_kind(std::string_view name) {
  for (OpKind op : all_op_kinds()) {
    if (op_kind_name(op) == name) return op;
  }
  return std::nullopt;
}

bool reduces(OpKind op) {
  return op == OpKind::kAllReduce || op == OpKind::kReduce || op == OpKind::kReduceScatter;
}

bool rooted(OpKind op) { return op == OpKind::kBroadcast || op == OpKind::kReduce; }

double bus_factor(OpKind op, int p) {
  switch (op) {
    case OpKind::kAllReduce:
      return 2.0 * (p - 1) / p;
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
      return double(p - 1) / p;
    default:
      return 1;
  }
}

CaseShape case_shape(OpKind op, size_t bytes, DType dtype, int p) {
  const size_t elem = element_size(dtype);
  const size_t total = bytes / elem;
  CaseShape s;
  switch (op) {
    case OpKind::kAllGather:  // count: each rank's input
      s.count = total / size_t(p);
      s.in_count = s.count;
      s.out_count = s.count * size_t(p);
      break;
    case OpKind::kReduceScatter:  // count: each rank's output
      s.count = total / size_t(p);
      s.in_count = s.count * size_t(p);
      s.out_count = s.count;
      break;
    case OpKind::kAllToAll:  // count: the block for each peer
      s.count = total / size_t(p);
      s.in_count = s.out_count = s.count * size_t(p);
      break;
    case OpKind::kSendRecv:
      s.count = s.in_count = s.out_count = total;
      break;
    default:  // in place
      s.count = s.in_count = total;
      break;
  }
  s.size_bytes = std::max(s.in_count, s.out_count) * elem;
  return s;
}

// --- One case ------------------------------------------------------------------------

Case::Case(OpKind op, DType dtype, ReduceOp redop, int root, size_t bytes,
           dist::ProcessGroup& group, Device device)
    : op_(op),
      dtype_(dtype),
      redop_(redop),
      root_(root),
      group_(group),
      rank_(group.rank()),
      p_(group.size()),
      shape_(case_shape(op, bytes, dtype, group.size())) {
  SPMD_CHECK(op != OpKind::kSendRecv || p_ >= 2,
             "spmd-bench sendrecv: needs at least 2 ranks (got ", p_, ")");
  SPMD_CHECK(!rooted(op) || (root >= 0 && root < p_), "spmd-bench ", op_kind_name(op), ": root ",
             root, " is not a rank of a group of ", p_);
  // Zeros, not garbage: uninitialized floats may be NaNs or subnormals, which
  // would slow the timed reductions down.
  const ops::TensorOptions opts{dtype, device};
  input_ = ops::zeros({int64_t(shape_.in_count)}, opts);
  if (shape_.out_count > 0) output_ = ops::zeros({int64_t(shape_.out_count)}, opts);
}

dist::Work Case::launch() {
  switch (op_) {
    case OpKind::kAllReduce:
      return group_.all_reduce(input_, redop_);
    case OpKind::kBroadcast:
      return group_.broadcast(input_, root_);
    case OpKind::kReduce:
      return group_.reduce(input_, root_, redop_);
    case OpKind::kAllGather:
      return group_.all_gather(output_, input_);
    case OpKind::kReduceScatter:
      return group_.reduce_scatter(output_, input_, redop_);
    case OpKind::kAllToAll:
      return group_.all_to_all(output_, input_);
    case OpKind::kSendRecv: {
      // The ring exchange: send to the right, receive from the left, together.
      using dist::OpType;
      return group_.batch_isend_irecv({{OpType::kSend, input_, (rank_ + 1) % p_, 0},
                                       {OpType::kRecv, output_, (rank_ + p_ - 1) % p_, 0}});
    }
  }
  SPMD_THROW(Error, "spmd-bench: unknown op");
}

// Fills a host tensor of `count` elements with value_of(i) and copies it into `dst`.
static void fill_tensor(const Tensor& dst, size_t count,
                        const std::function<double(size_t)>& value_of) {
  Tensor host = dst.is_cpu() ? dst : ops::empty(dst.shape(), {dst.dtype()});
  with_storage_type(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = host.data<T>();
    for (size_t i = 0; i < count; ++i) p[i] = T(value_of(i));
  });
  if (!dst.is_cpu()) {
    ops::copy_(dst, host);
    ops::synchronize(dst.device());
  }
}

void Case::fill() {
  const ReduceOp values_op = reduces(op_) ? redop_ : ReduceOp::kSum;
  const int r = rank_;
  const bool holds_data = op_ != OpKind::kBroadcast || r == root_;
  fill_tensor(input_, shape_.in_count,
              [&](size_t i) { return holds_data ? input_value(values_op, r, i) : kSentinel; });
  if (output_.defined()) fill_tensor(output_, shape_.out_count, [](size_t) { return kSentinel; });
}

Tensor Case::host_input() const {
  return input_.is_cpu() ? input_ : ops::to(input_, Device::cpu());
}

Tensor Case::host_output() const {
  return output_.is_cpu() ? output_ : ops::to(output_, Device::cpu());
}

int64_t Case::wrong_in(const Tensor& host, size_t count,
                       const std::function<double(size_t)>& expected) const {
  int64_t wrong = 0;
  const bool rounded = redop_ == ReduceOp::kAvg && reduces(op_);
  with_storage_type(host.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = host.data<T>();
    for (size_t i = 0; i < count; ++i) wrong += !matches(p[i], expected(i), rounded);
  });
  return wrong;
}

int64_t Case::count_wrong() const {
  const int p = p_, r = rank_;
  const size_t m = shape_.count;
  const ReduceOp rop = redop_;
  auto own = [&](size_t i) { return input_value(reduces(op_) ? rop : ReduceOp::kSum, r, i); };
  auto reduced = [&](size_t i) { return reduced_value(rop, p, i); };
  const Tensor in = host_input();
  switch (op_) {
    case OpKind::kAllReduce:
      return wrong_in(in, m, reduced);
    case OpKind::kBroadcast:
      return wrong_in(in, m, [&](size_t i) { return input_value(ReduceOp::kSum, root_, i); });
    case OpKind::kReduce:
      return r == root_ ? wrong_in(in, m, reduced) : wrong_in(in, m, own);
    case OpKind::kAllGather:
      return wrong_in(in, m, own) + wrong_in(host_output(), m * p, [&](size_t i) {
               return input_value(ReduceOp::kSum, int(i / m), i % m);
             });
    case OpKind::kReduceScatter:
      return wrong_in(in, m * p, own) +
             wrong_in(host_output(), m, [&](size_t i) { return reduced(r * m + i); });
    case OpKind::kAllToAll:
      return wrong_in(in, m * p, own) + wrong_in(host_output(), m * p, [&](size_t i) {
               return input_value(ReduceOp::kSum, int(i / m), r * m + i % m);
             });
    case OpKind::kSendRecv:
      return wrong_in(in, m, own) + wrong_in(host_output(), m, [&](size_t i) {
               return input_value(ReduceOp::kSum, (r + p - 1) % p, i);
             });
  }
  return 0;
}

}  // namespace spmd::bench
