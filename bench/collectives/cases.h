// The collectives spmd-bench measures, and one benchmark case: an op at one
// size, dtype and reduction, with its buffers allocated once.
//
// Sizes follow nccl-tests: for all_gather, reduce_scatter and all_to_all the
// byte count given is the size of the larger (total) buffer, rounded down to
// a multiple of the group size, and `count` is the elements per rank (or per
// peer). The bus bandwidth factors make results comparable across group
// sizes: busbw = algbw · factor, where algbw = size / time and the factor is
// what each link must carry relative to the size on the best algorithm:
//   all_reduce 2(p-1)/p; all_gather, reduce_scatter, all_to_all (p-1)/p;
//   broadcast, reduce and sendrecv 1.
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
  kAllToAll,
  kSendRecv
};

// Every op, in the order `all` runs them.
const std::vector<OpKind>& all_op_kinds();
std::string_view op_kind_name(OpKind op);
std::optional<OpKind> parse_op_kind(std::string_view name);
bool reduces(OpKind op);  // has a reduction op (-o)
bool rooted(OpKind op);   // has a root (-r)
double bus_factor(OpKind op, int world_size);

// The buffers an op of `bytes` uses, as nccl-tests derives them.
struct CaseShape {
  size_t size_bytes = 0;  // the size column: the larger buffer
  size_t count = 0;       // the count column
  size_t in_count = 0;    // elements of the input tensor
  size_t out_count = 0;   // elements of the output tensor (0: the op is in place)
};
CaseShape case_shape(OpKind op, size_t bytes, DType dtype, int world_size);

class Case {
 public:
  // Allocates the buffers on `device` (uninitialized until fill()).
  Case(OpKind op, DType dtype, dist::ReduceOp redop, int root, size_t bytes,
       dist::ProcessGroup& group, Device device);

  const CaseShape& shape() const { return shape_; }
  // The buffers (a handle: writes through it change the case's memory).
  const Tensor& input() const { return input_; }
  const Tensor& output() const { return output_; }
  // Issues one call of the op and returns its Work.
  dist::Work launch();
  // Writes the inputs a check expects (values.h), and a distinct pattern into
  // the outputs so that a result that never arrives is caught.
  void fill();
  // Counts the elements this rank holds that differ from the expected values
  // (outputs, and inputs that the op must leave untouched).
  int64_t count_wrong() const;

 private:
  Tensor host_input() const;
  Tensor host_output() const;
  int64_t wrong_in(const Tensor& host, size_t count,
                   const std::function<double(size_t)>& expected) const;

  OpKind op_;
  DType dtype_;
  dist::ReduceOp redop_;
  int root_;
  dist::ProcessGroup& group_;
  int rank_, p_;
  CaseShape shape_;
  Tensor input_, output_;  // output_ undefined for in-place ops
};

}  // namespace spmd::bench
