// bf16 matrix products on the CPU: bf16 operands, f32 accumulation and an
// f32 result, as a GPU's tensor cores and PyTorch's CPU autocast run them.
//
// On a CPU with AVX512_BF16 (Cooper Lake, Sapphire Rapids, AMD Zen 4 and 5)
// one instruction (vdpbf16ps) multiplies two bf16 pairs per f32 lane, twice
// the f32 FMA's products. OpenBLAS 0.3.21 as Debian builds it exports no
// bf16 GEMM; oneDNN (libdnnl, Debian's libdnnl2) does:
// dnnl_gemm_bf16bf16f32, row-major, BLAS's flags. spmd opens it at the first
// bf16 product, where the CPU has AVX512_BF16; elsewhere (or without
// libdnnl, or with SPMD_BF16_GEMM=f32) the operands are widened to f32 and
// go to the f32 GEMM, which gives the same products (a bf16 value is exact
// in f32), summed in another order.
//
// Not here: AMX tiles (oneDNN 2.6's gemm does not use them; its matmul
// primitive does), bf16 outputs (the caller rounds the f32 result once).
#pragma once

#include <cstdint>
#include <string>

namespace spmd::cpu {

// Whether bf16 products run on a bf16 GEMM (else through f32): decided at
// the first call, from the CPU, libdnnl and SPMD_BF16_GEMM ("auto", the
// default; "f32" widens always; "onednn" requires oneDNN and throws
// InvalidArgument where it cannot run).
bool have_bf16_gemm();

// One line for start-up and benchmark headers: "bf16 GEMM oneDNN 2.6.3
// (dnnl_gemm_bf16bf16f32, AVX512_BF16)" or "bf16 GEMM through f32 (why)".
std::string describe_bf16_gemm();

// C = alpha op(A) op(B) + beta C, A and B bf16 (raw uint16_t bits), C f32,
// all row-major with their row strides, as gemm_rows (gemm.h).
// REQUIRES: have_bf16_gemm().
void gemm_bf16_rows(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                    float* C, int64_t ldc);

}  // namespace spmd::cpu
