// The CUDA backend, part 1: memory and copies, elementwise ops, reductions
// and matrix products (cuda_backend_impl.h says how the methods work).
#include "tensor/cuda/cuda_backend.h"

#include "kernels/cuda_check.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_backend_impl.h"
#include "tensor/cuda/index_errors.h"
#include "tensor/cuda/transfer.h"
#include "tensor/cuda_api.h"

namespace spmd {

Backend& cuda_backend() {
  static cuda::detail::CudaBackend backend;
  return backend;
}

namespace cuda::detail {
namespace {

// spmd's op enums and kernels/' (which mirror them; -Wswitch flags a new op
// that is not mapped here).
// clang-format off
#define SPMD_SAME(Enum, name) \
  case Enum::name: return kernels::Enum::name;

kernels::UnaryOp kernel_op(UnaryOp op) {
  switch (op) {
    SPMD_SAME(UnaryOp, kNeg) SPMD_SAME(UnaryOp, kAbs) SPMD_SAME(UnaryOp, kExp)
    SPMD_SAME(UnaryOp, kLog) SPMD_SAME(UnaryOp, kSqrt) SPMD_SAME(UnaryOp, kRsqrt)
    SPMD_SAME(UnaryOp, kTanh) SPMD_SAME(UnaryOp, kSigmoid) SPMD_SAME(UnaryOp, kRelu)
    SPMD_SAME(UnaryOp, kGeluTanh) SPMD_SAME(UnaryOp, kGeluErf) SPMD_SAME(UnaryOp, kSilu)
    SPMD_SAME(UnaryOp, kSin) SPMD_SAME(UnaryOp, kCos) SPMD_SAME(UnaryOp, kSquare)
    SPMD_SAME(UnaryOp, kReciprocal) SPMD_SAME(UnaryOp, kSign) SPMD_SAME(UnaryOp, kLogicalNot)
  }
  SPMD_THROW(InvalidArgument, "unary: unknown op ", int(op));
}

kernels::BinaryOp kernel_op(BinaryOp op) {
  switch (op) {
    SPMD_SAME(BinaryOp, kAdd) SPMD_SAME(BinaryOp, kSub) SPMD_SAME(BinaryOp, kMul)
    SPMD_SAME(BinaryOp, kDiv) SPMD_SAME(BinaryOp, kPow) SPMD_SAME(BinaryOp, kMaximum)
    SPMD_SAME(BinaryOp, kMinimum) SPMD_SAME(BinaryOp, kEq) SPMD_SAME(BinaryOp, kNe)
    SPMD_SAME(BinaryOp, kLt) SPMD_SAME(BinaryOp, kLe) SPMD_SAME(BinaryOp, kGt)
    SPMD_SAME(BinaryOp, kGe) SPMD_SAME(BinaryOp, kLogicalAnd) SPMD_SAME(BinaryOp, kLogicalOr)
    SPMD_SAME(BinaryOp, kReluBackward) SPMD_SAME(BinaryOp, kGeluTanhBackward)
    SPMD_SAME(BinaryOp, kGeluErfBackward) SPMD_SAME(BinaryOp, kSiluBackward)
    SPMD_SAME(BinaryOp, kSigmoidBackward) SPMD_SAME(BinaryOp, kTanhBackward)
  }
  SPMD_THROW(InvalidArgument, "binary: unknown op ", int(op));
}

#undef SPMD_SAME
// clang-format on

kernels::ReduceOp kernel_op(Reduction op) {
  switch (op) {
    case Reduction::kSum:
      return kernels::ReduceOp::kSum;
    case Reduction::kMean:
      return kernels::ReduceOp::kMean;
    case Reduction::kMax:
      return kernels::ReduceOp::kMax;
    case Reduction::kMin:
      return kernels::ReduceOp::kMin;
    case Reduction::kProd:
      return kernels::ReduceOp::kProd;
  }
  SPMD_THROW(InvalidArgument, "reduce: unknown op ", int(op));
}

// A contiguous tensor on `device` for the backend's own temporaries.
Tensor temporary(Device device, const Shape& shape, DType dtype) {
  const size_t nbytes = size_t(shape.numel()) * element_size(dtype);
  return Tensor(std::make_shared<Storage>(cuda_backend().allocate(nbytes, device), nbytes, device),
                shape, contiguous_strides(shape), 0, dtype);
}

bool gemm_ready(const Tensor& t) {
  const int n = t.ndim();
  return kernels::gemm_layout_ok(t.size(n - 2), t.size(n - 1), t.stride(n - 2), t.stride(n - 1));
}

}  // namespace

// --- Memory ---------------------------------------------------------------------------

DataPtr CudaBackend::allocate(size_t nbytes, Device device) {
  SPMD_CHECK(device.is_cuda() && device.index >= 0 && device.index < device_count(),
             "cannot allocate on ", device, ": ", device_count(), " GPU(s) visible");
  return CachingAllocator::instance().allocate(nbytes, device.index,
                                               current_stream_handle(device.index));
}

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  SPMD_CHECK(src.shape() == dst.shape(), "copy: shapes ", src.shape(), " and ", dst.shape(),
             " differ");
  if (dst.numel() == 0) return;
  if (src.is_cpu()) return copy_host_to_device(src, dst);
  if (dst.is_cpu()) return copy_device_to_host(src, dst);
  if (src.device() != dst.device()) return copy_device_to_device(src, dst);
  Launch launch(dst.device());
  kernels::copy(tensor_arg(src), tensor_arg(dst), launch.stream);
}

void CudaBackend::synchronize(Device device) {
  DeviceScope scope(device.index);
  SPMD_CUDA_CHECK(cudaDeviceSynchronize());
  throw_index_errors(device.index);
}

// --- Elementwise ----------------------------------------------------------------------

void CudaBackend::fill(const Tensor& out, double value) {
  Launch launch(out.device());
  kernels::fill(tensor_arg(out), value, launch.stream);
}

void CudaBackend::arange(const Tensor& out, double start, double step) {
  SPMD_CHECK(out.is_contiguous(), "arange: expected a contiguous output");
  Launch launch(out.device());
  kernels::arange(tensor_arg(out), start, step, launch.stream);
}

void CudaBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  Launch launch(out.device());
  kernels::unary(kernel_op(op), tensor_arg(x), tensor_arg(out), launch.stream);
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  Launch launch(out.device());
  kernels::binary(kernel_op(op), tensor_arg(a), tensor_arg(b), tensor_arg(out), launch.stream);
}

void CudaBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out,
                                bool scalar_first) {
  Launch launch(out.device());
  kernels::binary_scalar(kernel_op(op), tensor_arg(a), s, scalar_first, tensor_arg(out),
                         launch.stream);
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  Launch launch(out.device());
  kernels::where(tensor_arg(cond), tensor_arg(a), tensor_arg(b), tensor_arg(out), launch.stream);
}

void CudaBackend::masked_fill(const Tensor& x, const Tensor& mask, double value,
                              const Tensor& out) {
  Launch launch(out.device());
  kernels::masked_fill(tensor_arg(x), tensor_arg(mask), value, tensor_arg(out), launch.stream);
}

void CudaBackend::triangle(const Tensor& x, int64_t diagonal, bool upper, const Tensor& out) {
  Launch launch(out.device());
  kernels::triangle(tensor_arg(x), diagonal, upper, tensor_arg(out), launch.stream);
}

// --- Reductions -----------------------------------------------------------------------

void CudaBackend::reduce(Reduction op, const Tensor& x, const Tensor& out) {
  Launch launch(out.device());
  AllocatorScratch scratch(launch.device, launch.stream);
  kernels::reduce(kernel_op(op), tensor_arg(x), tensor_arg(out), scratch, launch.stream);
}

void CudaBackend::arg_reduce(bool is_max, const Tensor& x, int dim, const Tensor& out) {
  Launch launch(out.device());
  kernels::arg_reduce(is_max, tensor_arg(x), dim, tensor_arg(out), launch.stream);
}

// --- Matrix products --------------------------------------------------------------------

void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
                         double beta) {
  Launch launch(out.device());
  if (out.numel() == 0) return;
  if (a.size(-1) == 0) {  // an empty sum: out = beta * out
    if (beta == 0) return fill(out, 0);
    return binary_scalar(BinaryOp::kMul, out, beta, out, false);
  }
  // Operands whose matrices have no unit stride are made contiguous first;
  // so is an output, which then receives the result by a copy.
  const Tensor a2 = gemm_ready(a) ? a : temporary(out.device(), a.shape(), a.dtype());
  const Tensor b2 = gemm_ready(b) ? b : temporary(out.device(), b.shape(), b.dtype());
  if (!a2.is_same(a)) copy(a, a2);
  if (!b2.is_same(b)) copy(b, b2);
  const Tensor o2 = gemm_ready(out) ? out : temporary(out.device(), out.shape(), out.dtype());
  if (!o2.is_same(out) && beta != 0) copy(out, o2);
  kernels::gemm(tensor_arg(a2), tensor_arg(b2), tensor_arg(o2), alpha, beta, allow_tf32(),
                launch.stream);
  if (!o2.is_same(out)) copy(o2, out);
}

}  // namespace cuda::detail
}  // namespace spmd
