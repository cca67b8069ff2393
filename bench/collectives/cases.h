// The collectives spmd-bench measures, and one benchmark case: an op at one
// size, dtype, reduction and placement, with its buffers allocated once.
//
// Sizes follow nccl-tests: for all_gather, reduce_scatter, gather, scatter
// and all_to_all(v) the byte count given is the size of the larger (total)
// buffer, rounded down to a multiple of the group size, and `count` is the
// elements per rank (per peer for all_to_all; the mean block for
// all_to_allv). The bus bandwidth factors make results comparable across
// group sizes: busbw = algbw · factor, where algbw = size / time and the
// factor is what each link must carry relative to the size on the best
// algorithm:
//   all_reduce 2(p-1)/p; all_gather, reduce_scatter, gather, scatter,
//   all_to_all, all_to_allv (p-1)/p; broadcast, reduce and sendrecv 1.
//
// Placement, as nccl-tests' two column sets: out of place (input and output
// are separate tensors) or in place (one buffer: all_reduce's, broadcast's
// and reduce's tensor; all_gather's and gather's input is its block of the
// output, reduce_scatter's and scatter's output its block of the input).
// spmd's all_reduce, broadcast and reduce take one tensor (as
// torch.distributed's), so out of place they are what a program that keeps
// its input does: all_reduce copies the input into the output and reduces
// that; reduce's root does the same, the others reduce from their input,
// which the call leaves unchanged; broadcast's root sends from its input and
// copies it into its output (as NCCL does), the others receive into their
// output. all_to_all(v) and sendrecv refuse an output that overlaps the
// input: offers() says they have no in-place form.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "parallel/comm/process_group.h"
#include "tensor/tensor.h"

namespace spmd::bench {

enum class OpKind {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kGather,
  kScatter,
  kAllToAll,
  kAllToAllv,
  kSendRecv
};

enum class Placement { kOutOfPlace, kInPlace };

// Every op, in the order `all` runs them.
const std::vector<OpKind>& all_op_kinds();
std::string_view op_kind_name(OpKind op);
std::optional<OpKind> parse_op_kind(std::string_view name);
bool reduces(OpKind op);  // has a reduction op (-o)
bool rooted(OpKind op);   // has a root (-r)
bool offers(OpKind op, Placement placement);
double bus_factor(OpKind op, int world_size);

// The buffers an op of `bytes` uses, as nccl-tests derives them.
struct CaseShape {
  size_t size_bytes = 0;  // the size column: the larger buffer
  size_t count = 0;       // the count column
  size_t in_count = 0;    // elements of the input tensor (gather: each rank's; scatter: root's)
  size_t out_count = 0;   // elements of the output tensor (all_reduce...: when out of place)
};
CaseShape case_shape(OpKind op, size_t bytes, DType dtype, int world_size);

// all_to_allv's uneven blocks: rank `from` cuts its n elements in proportion
// 1 : 2 : ... : p and sends part (to - from) mod p to rank `to`, so every
// rank sends and receives n elements but the pairs' blocks differ up to p
// times. Blocks leave back to back in rank order and land in reverse rank
// order (the last rank's block first), so the offsets are not the counts'
// running sums.
size_t a2av_count(size_t n, int p, int from, int to);
std::vector<int64_t> a2av_send_offsets(size_t n, int p, int rank);
std::vector<int64_t> a2av_recv_offsets(size_t n, int p, int rank);

class Case {
 public:
  // Allocates the buffers on `device` (zeros until fill()).
  // REQUIRES: offers(op, placement).
  Case(OpKind op, Placement placement, DType dtype, dist::ReduceOp redop, int root, size_t bytes,
       dist::ProcessGroup& group, Device device);

  const CaseShape& shape() const { return shape_; }
  // The buffers (handles: writes through them change the case's memory). In
  // place, one is a view of the other; on gather's non-roots the output, on
  // scatter's the input, is undefined.
  const Tensor& input() const { return input_; }
  const Tensor& output() const { return output_; }
  // Issues one call of the op and returns its Work. Out of place, all_reduce
  // and reduce's root first wait for the previous call to be done with the
  // output, then copy the input into it.
  dist::Work launch();
  // Writes the inputs a check expects (values.h), and a distinct pattern into
  // the outputs so that a result that never arrives is caught.
  void fill();
  // Counts the elements this rank holds that differ from the expected values
  // (outputs, and inputs that the op must leave untouched).
  int64_t count_wrong() const;

 private:
  const Tensor& copy_into_output();
  double own(size_t i) const;  // this rank's input value at index i
  double expected_output(size_t i) const;
  double expected_input(size_t i) const;
  int64_t wrong_in(const Tensor& t, const std::function<double(size_t)>& expected) const;

  OpKind op_;
  Placement placement_;
  DType dtype_;
  dist::ReduceOp redop_;
  int root_;
  dist::ProcessGroup& group_;
  int rank_, p_;
  CaseShape shape_;
  Tensor input_, output_;
  bool output_in_input_ = false;  // in place: the output is a block of the input
  bool input_in_output_ = false;  // in place: the input is a block of the output
  dist::Work previous_;           // the last call that copied into the output first
  // all_to_allv: this rank's counts and offsets, and where each source's
  // block for this rank starts in that source's input.
  std::vector<int64_t> send_counts_, recv_counts_, send_offsets_, recv_offsets_, source_offsets_;
};

}  // namespace spmd::bench
