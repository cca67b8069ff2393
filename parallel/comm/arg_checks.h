// The argument checks every operation of ProcessGroup makes at the call, for
// every backend (process_group.cpp, block_collectives.cpp,
// point_to_point.cpp): a tensor is defined, contiguous and of a communication
// dtype; an input and an output agree on dtype and device; and how two
// tensors overlap. Each throws
// InvalidArgument naming the op and the values.
#pragma once

#include <string_view>
#include <vector>

#include "parallel/comm/types.h"
#include "runtime/error.h"
#include "tensor/tensor.h"

namespace spmd::dist::detail {

inline void check_tensor(const Tensor& t, std::string_view op, const char* what) {
  SPMD_CHECK(t.defined(), op, ": the ", what, " tensor is undefined");
  SPMD_CHECK(t.is_contiguous(), op, ": the ", what, " tensor of shape ", t.shape(),
             " is not contiguous; call contiguous() first");
  SPMD_CHECK(is_comm_dtype(t.dtype()), op, ": the ", what, " tensor has dtype ",
             dtype_name(t.dtype()), "; collectives carry f32, f64, bf16, f16, i32 and i64");
}

// A collective writes its result into the caller's tensor: like any in-place
// op it moves the storage's version counter (tensor/storage.h), at the call,
// so that autograd sees a tensor saved for backward being overwritten and the
// autocast cache drops a cast copy of the old values.
inline void mark_written(const Tensor& t) { t.storage()->bump_version(); }

inline void check_pair(const Tensor& out, const Tensor& in, std::string_view op) {
  check_tensor(out, op, "output");
  check_tensor(in, op, "input");
  SPMD_CHECK(out.dtype() == in.dtype(), op, ": output dtype ", dtype_name(out.dtype()),
             " differs from input dtype ", dtype_name(in.dtype()));
  SPMD_CHECK(out.device() == in.device(), op, ": output on ", out.device(), " but input on ",
             in.device());
}

// Where a tensor's first byte lies in its storage. Two views of one storage
// are compared by it rather than by address, so that the checks below hold
// for meta tensors too (which have a shape and no bytes: tensor/meta_backend.h).
inline size_t byte_offset(const Tensor& t) { return size_t(t.offset()) * element_size(t.dtype()); }

// Whether two contiguous tensors share any byte.
inline bool overlap(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0) return false;
  const size_t a0 = byte_offset(a), b0 = byte_offset(b);
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// Whether `part` is exactly block k (of part's size) of `whole`.
inline bool is_block(const Tensor& whole, const Tensor& part, int k) {
  return whole.storage() == part.storage() &&
         byte_offset(whole) + size_t(k) * part.nbytes() == byte_offset(part);
}

// Where each block starts when blocks of these sizes lie back to back.
inline std::vector<size_t> back_to_back(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

inline void check_reduce_op(ReduceOp op, DType dtype, std::string_view name) {
  SPMD_CHECK(op != ReduceOp::kAvg || is_floating(dtype), name, ": avg needs a floating dtype, got ",
             dtype_name(dtype));
}

}  // namespace spmd::dist::detail
