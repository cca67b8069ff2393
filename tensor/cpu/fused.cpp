// Bias + GELU on the CPU, forward and backward, over the rows of a
// contiguous (rows, C) product u and a bias (C) (tensor/bias_gelu.cpp says
// what the pair computes and holds its unfused reference).
//
// Each row is cut into blocks of at most kBlock elements, as elementwise.cpp
// cuts its rows; a block's u + b is formed in an aligned stack buffer padded
// to whole vectors, and elementwise.cpp's own block kernel (float_blocks.h)
// turns it into the GELU or, backward, into dy * gelu'(u + b). So the
// activation is bitwise the unfused one; what the fusion saves is memory
// traffic: the bias is never broadcast into u, the sum u + b never goes to
// memory, and the backward sums dbias from the blocks it has just written
// rather than reading du again.
//
// Rows are split over threads; each thread sums its rows' du into its own
// partial dbias, and the partials are added at the end (no atomics, and the
// same result for a given thread count, as norm.cpp's weight gradients).
// f32 and f64; bf16 and f16 run the f32 kernel on widened copies of a
// chunk of rows at a time, each output rounded once (the default
// implementation also computes in f32, but unfused and over the whole u).
//
// Compiled once per CPU capability (kernels.h): these are KernelBackend's methods.
#include <algorithm>
#include <vector>

#include "tensor/backend_tensor.h"
#include "tensor/cpu/float_blocks.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu::SPMD_CPU_CAP {
namespace {

// A GELU costs tens of cycles per element (a tanh or an erf).
constexpr int64_t kGeluGrain = kCostlyGrain;

// buf[0, m) = u[0, m) + b[0, m), padded with ones to whole vectors.
template <class C>
void add_bias(const C* u, const C* b, int64_t m, C* buf) {
  for (int64_t i = 0; i < m; ++i) buf[i] = u[i] + b[i];
  std::fill(buf + m, buf + whole_vectors<C>(m), C(1));
}

template <class C>
void bias_gelu_rows(const C* u, const C* b, C* y, int64_t rows, int64_t n, UnaryOp op) {
  alignas(64) C pre[kBlock], out[kBlock];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; j += kBlock) {
      const int64_t m = std::min(kBlock, n - j);
      add_bias(u + r * n + j, b + j, m, pre);
      unary_block<C>(op, pre, out, whole_vectors<C>(m));
      std::copy(out, out + m, y + r * n + j);
    }
  }
}

// du for the rows, and their sum over rows added into db (n elements).
template <class C>
void bias_gelu_backward_rows(const C* dy, const C* u, const C* b, C* du, C* db, int64_t rows,
                             int64_t n, BinaryOp op) {
  alignas(64) C pre[kBlock], g[kBlock], out[kBlock];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; j += kBlock) {
      const int64_t m = std::min(kBlock, n - j);
      add_bias(u + r * n + j, b + j, m, pre);
      std::copy(dy + r * n + j, dy + r * n + j + m, g);
      std::fill(g + m, g + whole_vectors<C>(m), C(1));
      binary_block<C>(op, g, pre, out, whole_vectors<C>(m));
      std::copy(out, out + m, du + r * n + j);
      for (int64_t i = 0; i < m; ++i) db[j + i] += out[i];
    }
  }
}

bool fusable(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->dtype() != DType::kF32 && t->dtype() != DType::kF64) return false;
  return true;
}

// All of ts bf16 or f16 (what autocast hands the pair): run in f32.
bool half_only(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!is_half_float(t->dtype())) return false;
  return true;
}

// Rows r0..r1 of a contiguous tensor whose last dim is a row: a (r1 - r0, n) view.
Tensor rows_of(const Tensor& t, int64_t r0, int64_t r1) {
  const int64_t n = t.size(-1);
  return Tensor(t.storage(), {r1 - r0, n}, {n, 1}, t.offset() + r0 * n, t.dtype());
}

// fn(r0, r1) over u's rows in chunks of about kHalfChunk elements: the f32
// copies of the half path stay that small (and in cache), whatever u's size.
constexpr int64_t kHalfChunk = int64_t(1) << 16;
template <class F>
void for_each_row_chunk(const Tensor& u, const F& fn) {
  const int64_t n = u.size(-1), rows = n ? u.numel() / n : 0;
  const int64_t step = std::max<int64_t>(1, kHalfChunk / std::max<int64_t>(n, 1));
  for (int64_t r0 = 0; r0 < rows; r0 += step) fn(r0, std::min(rows, r0 + step));
}

}  // namespace

void KernelBackend::bias_gelu(const Tensor& u, const Tensor& bias, bool approximate,
                              const Tensor& y) {
  if (half_only({&u, &bias, &y})) {  // the f32 kernel on widened copies, y rounded once
    const Tensor b32 = widened_on(*this, bias);
    for_each_row_chunk(u, [&](int64_t r0, int64_t r1) {
      const Tensor y_rows = rows_of(y, r0, r1);
      const Tensor y32 = empty_on(*this, y.device(), y_rows.shape(), DType::kF32);
      bias_gelu(widened_on(*this, rows_of(u, r0, r1)), b32, approximate, y32);
      copy(y32, y_rows);
    });
    return;
  }
  if (!fusable({&u, &bias, &y})) return Backend::bias_gelu(u, bias, approximate, y);
  const int64_t n = u.size(-1), rows = n ? u.numel() / n : 0;
  const UnaryOp op = approximate ? UnaryOp::kGeluTanh : UnaryOp::kGeluErf;
  visit_float(u.dtype(), "bias_gelu", [&]<class C>() {
    const C *pu = u.data<C>(), *pb = bias.data<C>();
    C* py = y.data<C>();
    parallel_for(rows, row_grain(n, kGeluGrain), [&](int64_t begin, int64_t end) {
      bias_gelu_rows<C>(pu + begin * n, pb, py + begin * n, end - begin, n, op);
    });
  });
}

void KernelBackend::bias_gelu_backward(const Tensor& dy, const Tensor& u, const Tensor& bias,
                                       bool approximate, const Tensor& du, const Tensor& dbias) {
  if (half_only({&dy, &u, &bias, &du, &dbias})) {
    const int64_t n = u.size(-1);
    const Tensor b32 = widened_on(*this, bias);
    const Tensor db32 = empty_on(*this, dbias.device(), dbias.shape(), DType::kF32);
    const Tensor db_rows = empty_on(*this, dbias.device(), dbias.shape(), DType::kF32);
    fill(db32, 0);
    for_each_row_chunk(u, [&](int64_t r0, int64_t r1) {
      const Tensor du_rows = rows_of(du, r0, r1);
      const Tensor du32 = empty_on(*this, du.device(), du_rows.shape(), DType::kF32);
      bias_gelu_backward(widened_on(*this, rows_of(dy, r0, r1)),
                         widened_on(*this, rows_of(u, r0, r1)), b32, approximate, du32, db_rows);
      copy(du32, du_rows);
      float* total = db32.data<float>();
      const float* part = db_rows.data<float>();
      for (int64_t j = 0; j < n; ++j) total[j] += part[j];  // dbias summed over the chunks in f32
    });
    return copy(db32, dbias);
  }
  if (!fusable({&dy, &u, &bias, &du, &dbias})) {
    return Backend::bias_gelu_backward(dy, u, bias, approximate, du, dbias);
  }
  const int64_t n = u.size(-1), rows = n ? u.numel() / n : 0;
  const BinaryOp op = approximate ? BinaryOp::kGeluTanhBackward : BinaryOp::kGeluErfBackward;
  visit_float(u.dtype(), "bias_gelu_backward", [&]<class C>() {
    const C *pdy = dy.data<C>(), *pu = u.data<C>(), *pb = bias.data<C>();
    C* pdu = du.data<C>();
    const int threads = std::max(1, threads_for(rows, row_grain(n, kGeluGrain)));
    std::vector<C> partial(size_t(threads) * size_t(n), C(0));
    run_on_threads(rows, threads, [&](int t, int64_t begin, int64_t end) {
      bias_gelu_backward_rows<C>(pdy + begin * n, pu + begin * n, pb, pdu + begin * n,
                                 partial.data() + size_t(t) * size_t(n), end - begin, n, op);
    });
    C* pdb = dbias.data<C>();
    for (int64_t j = 0; j < n; ++j) {
      C s = 0;
      for (int t = 0; t < threads; ++t) s += partial[size_t(t) * size_t(n) + size_t(j)];
      pdb[j] = s;
    }
  });
}

}  // namespace spmd::cpu::SPMD_CPU_CAP
