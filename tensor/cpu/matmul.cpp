// Matrix products on the CPU. When OpenBLAS is found the build defines
// EIGEN_USE_BLAS, and each product goes to cblas_sgemm/dgemm directly; else
// Eigen's own GEMM (OpenMP-parallel) runs. This is the only translation unit
// that instantiates Eigen's products.
//
// Each operand's last two dims are mapped in place, row-major when the
// column stride is 1 and column-major when the row stride is 1, so a
// transposed view reaches the GEMM as a transposed operand, not a copy.
// Batched products run one GEMM per batch: the GEMM itself is threaded for
// large matrices, the batches are spread over threads for small ones (the
// attention scores of many heads). bf16 products go to a bf16 GEMM with f32
// accumulation where the CPU has one (bf16_gemm.h); f16 ones, and bf16
// elsewhere, are multiplied through f32.
#include <Eigen/Core>
#include <algorithm>
#include <limits>
#include <type_traits>

#include "tensor/cpu/bf16_gemm.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu {
namespace {

// How BLAS sees one matrix: its storage order and leading dimension.
struct MatLayout {
  bool row_major = true;
  int64_t ld = 1;
};

// The layout of a (rows, cols) matrix with these strides; throws when
// neither order fits (the front end makes such operands contiguous first).
MatLayout layout_of(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col) {
  if ((cols <= 1 || s_col == 1) && (rows <= 1 || s_row >= std::max<int64_t>(cols, 1)))
    return {true, rows <= 1 ? std::max<int64_t>(cols, 1) : s_row};
  if ((rows <= 1 || s_row == 1) && (cols <= 1 || s_col >= std::max<int64_t>(rows, 1)))
    return {false, cols <= 1 ? std::max<int64_t>(rows, 1) : s_col};
  SPMD_THROW(InvalidArgument, "matmul: a (", rows, ", ", cols, ") operand with strides (", s_row,
             ", ", s_col, ") is neither row- nor column-major");
}

template <class T, int Order>
using MatMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, Eigen::Unaligned,
                          Eigen::OuterStride<>>;
template <class T, int Order>
using ConstMatMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>,
                               Eigen::Unaligned, Eigen::OuterStride<>>;

#ifdef EIGEN_USE_BLAS
// CBLAS, as OpenBLAS exports it (32-bit ints, cblas.h's enum values).
extern "C" {
void cblas_sgemm(int layout, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc);
void cblas_dgemm(int layout, int trans_a, int trans_b, int M, int N, int K, double alpha,
                 const double* A, int lda, const double* B, int ldb, double beta, double* C,
                 int ldc);
}
constexpr int kCblasRowMajor = 101, kCblasColMajor = 102, kCblasNoTrans = 111, kCblasTrans = 112;

// The product straight to BLAS, in C's storage order: an operand stored in
// the other order is its transpose. Eigen's `C = A B` would first zero C and
// then ask BLAS for C += A B, a memset and a read of C that BLAS's beta = 0
// never makes. False when a size does not fit BLAS's int.
template <class T, int OA, int OB, int OC>
bool blas_gemm(const T* a, const T* b, T* c, int64_t M, int64_t N, int64_t K, const MatLayout* ld,
               T alpha, T beta) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (std::max({M, N, K, ld[0].ld, ld[1].ld, ld[2].ld}) > kMax) return false;
  const int layout = OC == Eigen::RowMajor ? kCblasRowMajor : kCblasColMajor;
  const int ta = OA == OC ? kCblasNoTrans : kCblasTrans,
            tb = OB == OC ? kCblasNoTrans : kCblasTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(layout, ta, tb, int(M), int(N), int(K), alpha, a, int(ld[0].ld), b, int(ld[1].ld),
                beta, c, int(ld[2].ld));
  } else {
    cblas_dgemm(layout, ta, tb, int(M), int(N), int(K), alpha, a, int(ld[0].ld), b, int(ld[1].ld),
                beta, c, int(ld[2].ld));
  }
  return true;
}
#endif

// c = alpha a b + beta c for one (M, K) x (K, N) product.
template <class T, int OA, int OB, int OC>
void gemm(const T* a, const T* b, T* c, int64_t M, int64_t N, int64_t K, const MatLayout* ld,
          T alpha, T beta) {
#ifdef EIGEN_USE_BLAS
  if (K > 0 && blas_gemm<T, OA, OB, OC>(a, b, c, M, N, K, ld, alpha, beta)) return;
#endif
  const ConstMatMap<T, OA> A(a, M, K, Eigen::OuterStride<>(ld[0].ld));
  const ConstMatMap<T, OB> B(b, K, N, Eigen::OuterStride<>(ld[1].ld));
  MatMap<T, OC> C(c, M, N, Eigen::OuterStride<>(ld[2].ld));
  if (beta == T(0)) {
    C.noalias() = alpha * A * B;
  } else {
    if (beta != T(1)) C *= beta;
    C.noalias() += alpha * A * B;
  }
}

using GemmFn = void (*)(const void*, const void*, void*, int64_t, int64_t, int64_t,
                        const MatLayout*, double, double);

// The gemm instantiation for these three storage orders.
template <class T>
GemmFn pick_gemm(const MatLayout* ld) {
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  auto wrap = []<int OA, int OB, int OC>() -> GemmFn {
    return [](const void* a, const void* b, void* c, int64_t M, int64_t N, int64_t K,
              const MatLayout* l, double alpha, double beta) {
      gemm<T, OA, OB, OC>(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c), M,
                          N, K, l, T(alpha), T(beta));
    };
  };
  const int key = ld[0].row_major * 4 + ld[1].row_major * 2 + ld[2].row_major;
  switch (key) {
    case 0:
      return wrap.template operator()<C, C, C>();
    case 1:
      return wrap.template operator()<C, C, R>();
    case 2:
      return wrap.template operator()<C, R, C>();
    case 3:
      return wrap.template operator()<C, R, R>();
    case 4:
      return wrap.template operator()<R, C, C>();
    case 5:
      return wrap.template operator()<R, C, R>();
    case 6:
      return wrap.template operator()<R, R, C>();
    default:
      return wrap.template operator()<R, R, R>();
  }
}

// One GEMM per batch index of out's leading dims.
void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  const int nd = out.ndim();
  const int64_t M = out.size(-2), N = out.size(-1), K = a.size(-1);
  const MatLayout ld[3] = {layout_of(M, K, a.stride(-2), a.stride(-1)),
                           layout_of(K, N, b.stride(-2), b.stride(-1)),
                           layout_of(M, N, out.stride(-2), out.stride(-1))};
  const GemmFn fn = out.dtype() == DType::kF64 ? pick_gemm<double>(ld) : pick_gemm<float>(ld);
  const int64_t batches = out.numel() / std::max<int64_t>(M * N, 1);
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  char* pc = static_cast<char*>(out.raw_data());
  auto run = [&](int64_t i) {
    fn(pa + byte_offset(a, nd - 2, i), pb + byte_offset(b, nd - 2, i),
       pc + byte_offset(out, nd - 2, i), M, N, K, ld, alpha, beta);
  };
  // Many small products: one per thread, each single-threaded (BLAS and Eigen
  // run serially inside a parallel region). Otherwise the GEMM uses the threads.
  constexpr int64_t kSmallGemm = int64_t(1) << 21;    // M*N*K (about 128^3)
  if (omp_get_max_threads() > 1) note_thread_team();  // we or the BLAS may start one
  if (batches > 1 && M * N * K <= kSmallGemm && threads_for(batches, 1) > 1) {
#pragma omp parallel for schedule(static) num_threads(threads_for(batches, 1))
    for (int64_t i = 0; i < batches; ++i) run(i);
  } else {
    for (int64_t i = 0; i < batches; ++i) run(i);
  }
}

// batched_gemm for bf16 a and b into an f32 out, on the bf16 GEMM
// (bf16_gemm.h). Returns false, having done nothing, when out is not
// row-major (the GEMM writes rows); the caller then widens to f32.
bool batched_gemm_bf16(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
                       double beta) {
  const int nd = out.ndim();
  const int64_t M = out.size(-2), N = out.size(-1), K = a.size(-1);
  const MatLayout ld[3] = {layout_of(M, K, a.stride(-2), a.stride(-1)),
                           layout_of(K, N, b.stride(-2), b.stride(-1)),
                           layout_of(M, N, out.stride(-2), out.stride(-1))};
  if (!ld[2].row_major) return false;
  const int64_t batches = out.numel() / std::max<int64_t>(M * N, 1);
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  char* pc = static_cast<char*>(out.raw_data());
  // A column-major operand is its transpose stored row-major, same ld.
  auto run = [&](int64_t i) {
    gemm_bf16_rows(!ld[0].row_major, !ld[1].row_major, M, N, K, float(alpha),
                   reinterpret_cast<const uint16_t*>(pa + byte_offset(a, nd - 2, i)), ld[0].ld,
                   reinterpret_cast<const uint16_t*>(pb + byte_offset(b, nd - 2, i)), ld[1].ld,
                   float(beta), reinterpret_cast<float*>(pc + byte_offset(out, nd - 2, i)),
                   ld[2].ld);
  };
  constexpr int64_t kSmallGemm = int64_t(1) << 21;  // as batched_gemm
  if (omp_get_max_threads() > 1) note_thread_team();
  if (batches > 1 && M * N * K <= kSmallGemm && threads_for(batches, 1) > 1) {
#pragma omp parallel for schedule(static) num_threads(threads_for(batches, 1))
    for (int64_t i = 0; i < batches; ++i) run(i);
  } else {
    for (int64_t i = 0; i < batches; ++i) run(i);
  }
  return true;
}

}  // namespace

template <class T>
void gemm_rows(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  // A stored transposed is A^T row-major: A itself column-major, same ld.
  const MatLayout ld[3] = {{!trans_a, lda}, {!trans_b, ldb}, {true, ldc}};
  pick_gemm<T>(ld)(A, B, C, M, N, K, ld, double(alpha), double(beta));
}
template void gemm_rows<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                               const float*, int64_t, float, float*, int64_t);
template void gemm_rows<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
                                int64_t, const double*, int64_t, double, double*, int64_t);

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
                        double beta) {
  SPMD_CHECK(a.ndim() == out.ndim() && b.ndim() == out.ndim() && out.ndim() >= 2,
             "matmul: operands of shapes ", a.shape(), ", ", b.shape(), " and out ", out.shape(),
             " must have the same number (>= 2) of dims");
  // bf16/f16 operands: multiply f32 copies (then round once into a 16-bit out).
  auto empty_f32 = [this](const Shape& shape) {
    const size_t bytes = size_t(shape.numel()) * 4;
    return Tensor(std::make_shared<Storage>(allocate(bytes, Device::cpu()), bytes, Device::cpu()),
                  shape, contiguous_strides(shape), 0, DType::kF32);
  };
  auto to_f32 = [&](const Tensor& t) {
    Tensor f = empty_f32(t.shape());
    copy(t, f);
    return f;
  };
  // bf16 operands go to the bf16 GEMM where there is one (bf16_gemm.h).
  const bool bf16_direct =
      a.dtype() == DType::kBF16 && b.dtype() == DType::kBF16 && have_bf16_gemm();
  if (out.dtype() == DType::kF32 || out.dtype() == DType::kF64) {
    if (a.dtype() == out.dtype()) return batched_gemm(a, b, out, alpha, beta);
    SPMD_CHECK(out.dtype() == DType::kF32 && is_half_float(a.dtype()) && b.dtype() == a.dtype(),
               "matmul: ", dtype_name(a.dtype()), " operands cannot write a ",
               dtype_name(out.dtype()), " out");
    if (bf16_direct && batched_gemm_bf16(a, b, out, alpha, beta)) return;
    return batched_gemm(to_f32(a), to_f32(b), out, alpha, beta);
  }
  SPMD_CHECK(is_half_float(out.dtype()), "matmul: expected a floating dtype, got ",
             dtype_name(out.dtype()));
  // beta reads out; with beta == 0 the widening copy is skipped.
  const Tensor out32 = beta == 0 ? empty_f32(out.shape()) : to_f32(out);
  if (!(bf16_direct && batched_gemm_bf16(a, b, out32, alpha, beta)))
    batched_gemm(to_f32(a), to_f32(b), out32, alpha, beta);
  copy(out32, out);
}

}  // namespace spmd::cpu
