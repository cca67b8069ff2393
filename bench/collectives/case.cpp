// One benchmark case: its buffers (out of place or in place), the call, the
// known inputs a check writes, and the count of wrong values it finds.
#include "bench/collectives/cases.h"
#include "bench/collectives/values.h"
#include "runtime/error.h"
#include "tensor/copy.h"
#include "tensor/factory.h"
#include "tensor/views.h"

namespace spmd::bench {

using dist::ReduceOp;

namespace {

// Written into outputs before a check: no correct result is ever this large
// (sums of up to 100 ranks stay below it), and it is exact in every dtype.
constexpr double kSentinel = 1000;

Tensor block(const Tensor& whole, size_t k, size_t count) {
  return ops::narrow(whole, 0, int64_t(k * count), int64_t(count));
}

// Fills a tensor with value_of(i), through a host copy for a CUDA tensor.
void fill_tensor(const Tensor& dst, const std::function<double(size_t)>& value_of) {
  Tensor host = dst.is_cpu() ? dst : ops::empty(dst.shape(), {dst.dtype()});
  with_storage_type(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = host.data<T>();
    for (size_t i = 0; i < size_t(dst.numel()); ++i) p[i] = T(value_of(i));
  });
  if (!dst.is_cpu()) {
    ops::copy_(dst, host);
    ops::synchronize(dst.device());
  }
}

}  // namespace

// --- Buffers -------------------------------------------------------------------------

Case::Case(OpKind op, Placement placement, DType dtype, ReduceOp redop, int root, size_t bytes,
           dist::ProcessGroup& group, Device device)
    : op_(op),
      placement_(placement),
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
  SPMD_CHECK(offers(op, placement), "spmd-bench ", op_kind_name(op), " has no ",
             placement == Placement::kInPlace ? "in-place" : "out-of-place", " form");
  // Zeros, not garbage: uninitialized floats may be NaNs or subnormals, which
  // would slow the timed reductions down.
  const ops::TensorOptions opts{dtype, device};
  auto buffer = [&](size_t n) { return ops::zeros({int64_t(n)}, opts); };
  const bool in_place = placement == Placement::kInPlace;
  const bool is_root = rank_ == root_;
  const size_t m = shape_.count;
  switch (op) {
    case OpKind::kAllGather:
    case OpKind::kGather:
      if (op == OpKind::kAllGather || is_root) output_ = buffer(m * size_t(p_));
      input_in_output_ = in_place && output_.defined();
      input_ = input_in_output_ ? block(output_, size_t(op == OpKind::kGather ? root_ : rank_), m)
                                : buffer(m);
      break;
    case OpKind::kReduceScatter:
    case OpKind::kScatter:
      if (op == OpKind::kReduceScatter || is_root) input_ = buffer(m * size_t(p_));
      output_in_input_ = in_place && input_.defined();
      output_ = output_in_input_ ? block(input_, size_t(op == OpKind::kScatter ? root_ : rank_), m)
                                 : buffer(m);
      break;
    default:
      input_ = buffer(shape_.in_count);
      if (!in_place) output_ = buffer(shape_.out_count);
  }
  if (op == OpKind::kAllToAllv) {
    const size_t n = shape_.in_count;
    for (int j = 0; j < p_; ++j) {
      send_counts_.push_back(int64_t(a2av_count(n, p_, rank_, j)));
      recv_counts_.push_back(int64_t(a2av_count(n, p_, j, rank_)));
      source_offsets_.push_back(a2av_send_offsets(n, p_, j)[rank_]);
    }
    send_offsets_ = a2av_send_offsets(n, p_, rank_);
    recv_offsets_ = a2av_recv_offsets(n, p_, rank_);
  }
}

dist::Work Case::launch() {
  const bool in_place = placement_ == Placement::kInPlace;
  switch (op_) {
    case OpKind::kAllReduce:
      if (in_place) return group_.all_reduce(input_, redop_);
      return previous_ = group_.all_reduce(copy_into_output(), redop_);
    case OpKind::kBroadcast:
      if (in_place) return group_.broadcast(input_, root_);
      if (rank_ != root_) return group_.broadcast(output_, root_);
      {
        dist::Work w = group_.broadcast(input_, root_);  // both only read the input
        ops::copy_(output_, input_);
        return w;
      }
    case OpKind::kReduce:
      if (in_place || rank_ != root_) return group_.reduce(input_, root_, redop_);
      return previous_ = group_.reduce(copy_into_output(), root_, redop_);
    case OpKind::kAllGather:
      return group_.all_gather(output_, input_);
    case OpKind::kReduceScatter:
      return group_.reduce_scatter(output_, input_, redop_);
    case OpKind::kGather:
      return group_.gather(output_, input_, root_);
    case OpKind::kScatter:
      return group_.scatter(output_, input_, root_);
    case OpKind::kAllToAll:
      return group_.all_to_all(output_, input_);
    case OpKind::kAllToAllv:
      return group_.all_to_allv(output_, input_, recv_counts_, send_counts_, recv_offsets_,
                                send_offsets_);
    case OpKind::kSendRecv: {
      // The ring exchange: send to the right, receive from the left, together.
      using dist::OpType;
      return group_.batch_isend_irecv({{OpType::kSend, input_, (rank_ + 1) % p_, 0},
                                       {OpType::kRecv, output_, (rank_ + p_ - 1) % p_, 0}});
    }
  }
  SPMD_THROW(Error, "spmd-bench: unknown op");
}

// The output, once it holds a copy of the input: the previous call that
// worked on the output must be done with it first (with -z 0 the calls are
// issued before any completes).
const Tensor& Case::copy_into_output() {
  previous_.wait();
  ops::copy_(output_, input_);
  return output_;
}

// --- Known values --------------------------------------------------------------------

double Case::own(size_t i) const {
  return input_value(reduces(op_) ? redop_ : ReduceOp::kSum, rank_, i);
}

void Case::fill() {
  // In place the outer buffer is written first: an output that holds the
  // input keeps the input's values (they are what the op reads), an input
  // inside the output overwrites its block of the sentinel.
  if (output_.defined() && !output_in_input_) {
    fill_tensor(output_, [](size_t) { return kSentinel; });
  }
  const bool holds_data = op_ != OpKind::kBroadcast || rank_ == root_;
  if (input_.defined()) {
    fill_tensor(input_, [&](size_t i) { return holds_data ? own(i) : kSentinel; });
  }
}

// What output element i must hold afterwards (in place, the results of
// all_reduce, broadcast and reduce are the input's: expected_input).
double Case::expected_output(size_t i) const {
  const size_t m = shape_.count;
  const int r = rank_, p = p_;
  switch (op_) {
    case OpKind::kAllReduce:
      return reduced_value(redop_, p, i);
    case OpKind::kBroadcast:
      return input_value(ReduceOp::kSum, root_, i);
    case OpKind::kReduce:
      return r == root_ ? reduced_value(redop_, p, i) : kSentinel;  // untouched off the root
    case OpKind::kAllGather:
    case OpKind::kGather:
      return input_value(ReduceOp::kSum, int(i / m), i % m);
    case OpKind::kReduceScatter:
      return reduced_value(redop_, p, size_t(r) * m + i);
    case OpKind::kScatter:
      return input_value(ReduceOp::kSum, root_, size_t(r) * m + i);
    case OpKind::kAllToAll:
      return input_value(ReduceOp::kSum, int(i / m), size_t(r) * m + i % m);
    case OpKind::kAllToAllv:
      for (int s = 0; s < p; ++s) {  // the block from rank s, if i lies in it
        const size_t begin = size_t(recv_offsets_[s]);
        if (i >= begin && i < begin + size_t(recv_counts_[s])) {
          return input_value(ReduceOp::kSum, s, size_t(source_offsets_[s]) + (i - begin));
        }
      }
      return kSentinel;  // between blocks: untouched
    case OpKind::kSendRecv:
      return input_value(ReduceOp::kSum, (r + p - 1) % p, i);
    default:
      return 0;
  }
}

// What input element i must hold afterwards: in place, the result for
// all_reduce, broadcast and reduce; else the input as fill() wrote it (but
// for the output's block inside it).
double Case::expected_input(size_t i) const {
  if (placement_ == Placement::kOutOfPlace) {
    return op_ == OpKind::kBroadcast && rank_ != root_ ? kSentinel : own(i);
  }
  switch (op_) {
    case OpKind::kAllReduce:
      return reduced_value(redop_, p_, i);
    case OpKind::kBroadcast:
      return input_value(ReduceOp::kSum, root_, i);
    case OpKind::kReduce:
      return rank_ == root_ ? reduced_value(redop_, p_, i) : own(i);
    default:
      break;
  }
  if (output_in_input_) {  // in place: the output is block k of the input
    const size_t m = shape_.count;
    const size_t k = size_t(op_ == OpKind::kScatter ? root_ : rank_);
    if (i >= k * m && i < (k + 1) * m) return expected_output(i - k * m);
  }
  return own(i);
}

int64_t Case::count_wrong() const {
  int64_t wrong = 0;
  // An input inside the output is checked as part of the output.
  if (input_.defined() && !input_in_output_) {
    wrong += wrong_in(input_, [&](size_t i) { return expected_input(i); });
  }
  // An output inside the input was checked as part of the input.
  if (output_.defined() && !output_in_input_) {
    wrong += wrong_in(output_, [&](size_t i) { return expected_output(i); });
  }
  return wrong;
}

int64_t Case::wrong_in(const Tensor& t, const std::function<double(size_t)>& expected) const {
  const Tensor host = t.is_cpu() ? t : ops::to(t, Device::cpu());
  int64_t wrong = 0;
  const bool rounded = redop_ == ReduceOp::kAvg && reduces(op_);
  with_storage_type(host.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = host.data<T>();
    for (size_t i = 0; i < size_t(host.numel()); ++i) wrong += !matches(p[i], expected(i), rounded);
  });
  return wrong;
}

}  // namespace spmd::bench
