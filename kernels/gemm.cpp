// Matrix products through cuBLAS (kernels/gemm.h): the row-major to
// column-major mapping, the merging of batch dims, and one cuBLAS handle per
// thread and device (cuBLAS itself is opened on first use: kernels/cublas.h).
#include "kernels/gemm.h"

#include <algorithm>
#include <array>
#include <climits>
#include <unordered_map>

#include "kernels/cublas.h"
#include "kernels/cuda_check.h"

namespace spmd::kernels {
namespace {

// One handle per (thread, device): cuBLAS handles are tied to the device that
// was current at creation and must not be used by two threads at once. They
// live until the process ends (destroying them at exit would race the
// teardown of the CUDA context).
//
// Each handle computes in a workspace of our own per stream (two streams must
// not share one), 32 MiB as cuBLAS recommends for Hopper: its split-K and
// stream-K kernels need one, and its default pool may be smaller. The
// workspace comes from cudaMalloc, outside the caching allocator's
// statistics, like cuBLAS's own pool; it is never freed. cublasSetStream
// resets the workspace to the default pool, so both are set together, and
// only when the stream changes.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct HandleState {
  cublasHandle_t handle = nullptr;
  cudaStream_t bound = nullptr;  // the stream the handle is set to
  bool has_bound = false;
  std::unordered_map<cudaStream_t, void*> workspaces;
};

cublasHandle_t handle_for(cudaStream_t stream) {
  constexpr int kMaxDevices = 64;
  thread_local std::array<HandleState, kMaxDevices> states;
  int device = 0;
  SPMD_CUDA_CHECK(cudaGetDevice(&device));
  SPMD_CHECK(device < kMaxDevices, "gemm: device ", device, " is beyond the supported ",
             kMaxDevices);
  HandleState& s = states[device];
  const CublasApi& api = cublas();
  if (!s.handle) SPMD_CUBLAS_CHECK(api.create(&s.handle));
  if (s.has_bound && s.bound == stream) return s.handle;
  void*& workspace = s.workspaces[stream];
  if (!workspace) SPMD_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  SPMD_CUBLAS_CHECK(api.set_stream(s.handle, stream));
  SPMD_CUBLAS_CHECK(api.set_workspace(s.handle, workspace, kWorkspaceBytes));
  s.bound = stream;
  s.has_bound = true;
  return s.handle;
}

// A matrix as cuBLAS sees it: row-major storage is the column-major transpose.
struct Layout {
  bool row_major;
  int64_t ld;
};

Layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= std::max<int64_t>(1, cols)))
    return {true, rows == 1 ? std::max<int64_t>(1, cols) : rs};
  return {false, cols == 1 ? std::max<int64_t>(1, rows) : cs};
}

Layout matrix_layout(const TensorArg& t) {
  const int r = t.ndim - 2, c = t.ndim - 1;
  return layout_of(t.sizes[r], t.sizes[c], t.strides[r], t.strides[c]);
}

cudaDataType_t cuda_type(ScalarType t) {
  switch (t) {
    case ScalarType::kF32:
      return CUDA_R_32F;
    case ScalarType::kF64:
      return CUDA_R_64F;
    case ScalarType::kBF16:
      return CUDA_R_16BF;
    case ScalarType::kF16:
      return CUDA_R_16F;
    default:
      SPMD_THROW(InvalidArgument, "matmul on CUDA: unsupported dtype ", scalar_name(t),
                 " (expected f32, f64, bf16 or f16)");
  }
}

// The batch dims of the three operands with size-1 dims dropped and
// neighbours merged where all three strides allow.
struct Batch {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[3][kMaxDims];  // a, b, out
};

Batch merge_batch(const TensorArg& a, const TensorArg& b, const TensorArg& out) {
  Batch batch;
  const TensorArg* ops[3] = {&a, &b, &out};
  for (int d = out.ndim - 3; d >= 0; --d) {  // innermost batch dim first
    if (out.sizes[d] == 1) continue;
    bool merge = batch.ndim > 0;
    for (int k = 0; k < 3 && merge; ++k) {
      const int i = batch.ndim - 1;
      merge = ops[k]->strides[d] == batch.strides[k][i] * batch.sizes[i];
    }
    if (merge) {
      batch.sizes[batch.ndim - 1] *= out.sizes[d];
      continue;
    }
    batch.sizes[batch.ndim] = out.sizes[d];
    for (int k = 0; k < 3; ++k) batch.strides[k][batch.ndim] = ops[k]->strides[d];
    ++batch.ndim;
  }
  return batch;  // innermost first
}

struct Call {
  cublasOperation_t op_a, op_b;
  int64_t m, n, k, lda, ldb, ldc;
  const void* A;  // cuBLAS's first operand
  const void* B;
  bool swapped;  // A is our b (row-major output)
};

// Fills in the cuBLAS arguments of out = a @ b for one batch element.
Call plan_call(const TensorArg& a, const TensorArg& b, const TensorArg& out) {
  const int64_t M = out.sizes[out.ndim - 2], N = out.sizes[out.ndim - 1];
  const int64_t K = a.sizes[a.ndim - 1];
  const Layout la = matrix_layout(a), lb = matrix_layout(b), lo = matrix_layout(out);
  Call c{};
  c.k = K;
  c.ldc = lo.ld;
  if (lo.row_major) {  // C^T = B^T A^T
    c.swapped = true;
    c.m = N;
    c.n = M;
    c.op_a = lb.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
    c.lda = lb.ld;
    c.op_b = la.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
    c.ldb = la.ld;
  } else {  // C = A B
    c.swapped = false;
    c.m = M;
    c.n = N;
    c.op_a = la.row_major ? CUBLAS_OP_T : CUBLAS_OP_N;
    c.lda = la.ld;
    c.op_b = lb.row_major ? CUBLAS_OP_T : CUBLAS_OP_N;
    c.ldb = lb.ld;
  }
  return c;
}

}  // namespace

bool gemm_layout_ok(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  const bool row_major =
      (cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= std::max<int64_t>(1, cols));
  const bool col_major =
      (rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= std::max<int64_t>(1, rows));
  return row_major || col_major;
}

void gemm(const TensorArg& a, const TensorArg& b, const TensorArg& out, double alpha, double beta,
          bool allow_tf32, Stream stream) {
  SPMD_CHECK(a.dtype == b.dtype, "matmul: operands of different dtypes (", scalar_name(a.dtype),
             ", ", scalar_name(b.dtype), ")");
  const bool widening = out.dtype == ScalarType::kF32 &&
                        (a.dtype == ScalarType::kBF16 || a.dtype == ScalarType::kF16);
  SPMD_CHECK(out.dtype == a.dtype || widening, "matmul: a ", scalar_name(a.dtype),
             " product cannot be written to a ", scalar_name(out.dtype), " output");
  const Call c = plan_call(a, b, out);
  if (c.m == 0 || c.n == 0) return;
  for (int64_t v : {c.m, c.n, c.k, c.lda, c.ldb, c.ldc})
    SPMD_CHECK(v <= INT_MAX, "matmul: size or stride ", v, " exceeds cuBLAS's 32-bit limit");

  const cudaDataType_t in_type = cuda_type(a.dtype), out_type = cuda_type(out.dtype);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (a.dtype == ScalarType::kF64) compute = CUBLAS_COMPUTE_64F;
  if (a.dtype == ScalarType::kF32 && allow_tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  const float alpha_f = float(alpha), beta_f = float(beta);
  const void* alpha_p = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha)
                                                      : static_cast<const void*>(&alpha_f);
  const void* beta_p = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta)
                                                     : static_cast<const void*>(&beta_f);

  cublasHandle_t handle = handle_for(stream);
  const CublasApi& api = cublas();

  const Batch batch = merge_batch(a, b, out);
  // The innermost batch dim goes to one strided-batched call; outer ones loop.
  const int64_t count = batch.ndim ? batch.sizes[0] : 1;
  const int64_t sa = batch.ndim ? batch.strides[0][0] : 0,
                sb = batch.ndim ? batch.strides[1][0] : 0;
  const int64_t so = batch.ndim ? batch.strides[2][0] : 0;
  int64_t outer = 1;
  for (int d = 1; d < batch.ndim; ++d) outer *= batch.sizes[d];
  const size_t ea = scalar_size(a.dtype), eo = scalar_size(out.dtype);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off_a = 0, off_b = 0, off_o = 0, rest = o;
    for (int d = 1; d < batch.ndim; ++d) {
      const int64_t i = rest % batch.sizes[d];
      rest /= batch.sizes[d];
      off_a += i * batch.strides[0][d];
      off_b += i * batch.strides[1][d];
      off_o += i * batch.strides[2][d];
    }
    const char* pa = static_cast<const char*>(a.data) + off_a * int64_t(ea);
    const char* pb = static_cast<const char*>(b.data) + off_b * int64_t(ea);
    char* po = static_cast<char*>(out.data) + off_o * int64_t(eo);
    const void* A = c.swapped ? pb : pa;
    const void* B = c.swapped ? pa : pb;
    const int64_t stride_A = c.swapped ? sb : sa, stride_B = c.swapped ? sa : sb;
    if (count == 1) {  // one product (every Linear layer): the plain GEMM entry point
      SPMD_CUBLAS_CHECK(api.gemm_ex(handle, c.op_a, c.op_b, int(c.m), int(c.n), int(c.k), alpha_p,
                                    A, in_type, int(c.lda), B, in_type, int(c.ldb), beta_p, po,
                                    out_type, int(c.ldc), compute, CUBLAS_GEMM_DEFAULT));
      continue;
    }
    SPMD_CUBLAS_CHECK(api.gemm_strided_batched_ex(
        handle, c.op_a, c.op_b, int(c.m), int(c.n), int(c.k), alpha_p, A, in_type, int(c.lda),
        stride_A, B, in_type, int(c.ldb), stride_B, beta_p, po, out_type, int(c.ldc), so,
        int(count), compute, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace spmd::kernels
