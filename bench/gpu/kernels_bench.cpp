// spmd-bench-gpu-kernels: how close the CUDA backend's kernels come to the
// hardware, each measured beside its peer in the same run:
//
//   - memory-bound kernels (elementwise, reductions, softmax, norms,
//     cross-entropy, AdamW) in GB/s, against a device-to-device cudaMemcpy
//     of the same size (bytes read + written). Target: >= 80% of the copy.
//   - matrix products through spmd's matmul against cublasGemmEx called
//     directly on the same operands. Target: within 5% of raw cuBLAS.
//   - the fused attention against the composed (cuBLAS + softmax) version of
//     the Backend base class, for information.
//
// Each figure is the median of several timed runs (CUDA events) after
// warm-up. Prints a table; --json FILE also writes one JSON object per line.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "tensor/backend.h"
#include "tensor/cuda_api.h"

namespace spmd {
namespace {

const Device kGpu = Device::cuda(0);

struct Row {
  std::string name;
  double ms;
  double rate;       // GB/s or TFLOP/s
  const char* unit;  // "GB/s" or "TFLOP/s"
  std::string peer;  // what it is compared with
  double ratio;      // ours / peer (rates), or peer time / our time (GEMM)
  const char* target;
};

Tensor empty(const Shape& shape, DType dtype) {
  const size_t nbytes = size_t(shape.numel()) * element_size(dtype);
  Backend& be = backend_for(kGpu);
  return Tensor(std::make_shared<Storage>(be.allocate(nbytes, kGpu), nbytes, kGpu), shape,
                contiguous_strides(shape), 0, dtype);
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -1,
                     double hi = 1) {
  Tensor t = empty(shape, dtype);
  backend_for(kGpu).random_uniform(t, lo, hi, seed, 0);
  return t;
}

// The median time of fn in milliseconds, after `warmup` untimed calls.
double time_ms(const std::function<void()>& fn, int warmup = 3, int reps = 15) {
  for (int i = 0; i < warmup; ++i) fn();
  cuda::synchronize();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    cuda::Event start(true), stop(true);
    start.record();
    fn();
    stop.record();
    stop.synchronize();
    times.push_back(start.elapsed_ms(stop));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

class Bench {
 public:
  explicit Bench(bool quick) : n_(quick ? int64_t(1) << 24 : int64_t(1) << 28) {}

  void run_all() {
    bandwidth();
    gemm();
    attention();
  }
  const std::vector<Row>& rows() const { return rows_; }

 private:
  Backend& be_ = backend_for(kGpu);
  int64_t n_;  // elements of the large f32 buffers
  double copy_gbps_ = 0;
  std::vector<Row> rows_;

  void memory_row(const std::string& name, double bytes, const std::function<void()>& fn) {
    const double ms = time_ms(fn);
    const double gbps = bytes / ms / 1e6;
    rows_.push_back({name, ms, gbps, "GB/s", "D2D copy", gbps / copy_gbps_, ">= 0.80"});
  }

  void bandwidth() {
    Tensor a = random_tensor({n_}, DType::kF32, 1), b = random_tensor({n_}, DType::kF32, 2);
    Tensor out = empty({n_}, DType::kF32);
    const double f4 = double(n_) * 4;
    const auto stream = static_cast<cudaStream_t>(cuda::current_stream().handle());
    const double copy_ms = time_ms([&] {
      SPMD_CUDA_CHECK(cudaMemcpyAsync(out.raw_data(), a.raw_data(), size_t(f4),
                                      cudaMemcpyDeviceToDevice, stream));
    });
    copy_gbps_ = 2 * f4 / copy_ms / 1e6;
    rows_.push_back({"cudaMemcpy D2D f32", copy_ms, copy_gbps_, "GB/s", "itself", 1, "-"});

    memory_row("add f32 a + b", 3 * f4, [&] { be_.binary(BinaryOp::kAdd, a, b, out); });
    const int64_t C = 768, R = n_ / C;
    Tensor bias = random_tensor({C}, DType::kF32, 3);
    Tensor a2 = Tensor(a.storage(), {R, C}, {C, 1}, 0, DType::kF32);
    Tensor o2 = Tensor(out.storage(), {R, C}, {C, 1}, 0, DType::kF32);
    memory_row("add f32 bias broadcast (strided path)", 2 * f4, [&] {
      be_.binary(BinaryOp::kAdd, a2, Tensor(bias.storage(), {R, C}, {0, 1}, 0, DType::kF32), o2);
    });
    Tensor h = empty({n_}, DType::kBF16), h2 = empty({n_}, DType::kBF16);
    memory_row("cast f32 -> bf16", 6.0 * double(n_), [&] { be_.copy(a, h); });
    memory_row("gelu_tanh bf16", 4.0 * double(n_), [&] { be_.unary(UnaryOp::kGeluTanh, h, h2); });
    memory_row("mul bf16 by scalar", 4.0 * double(n_),
               [&] { be_.binary_scalar(BinaryOp::kMul, h, 0.5, h2, false); });
    reductions(a, f4);
    rows_nn(a, out, f4);
  }

  void reductions(const Tensor& a, double f4) {
    Tensor one = empty({1}, DType::kF32);
    memory_row("sum f32, all elements", f4, [&] { be_.reduce(Reduction::kSum, a, one); });
    const int64_t C = 4096, R = n_ / C;
    Tensor rows = empty({R, 1}, DType::kF32), cols = empty({1, C}, DType::kF32);
    const Tensor a2 = Tensor(a.storage(), {R, C}, {C, 1}, 0, DType::kF32);
    memory_row("sum f32 over the last dim (R, 4096)", f4,
               [&] { be_.reduce(Reduction::kSum, a2, rows); });
    memory_row("sum f32 over the first dim (R, 4096)", f4,
               [&] { be_.reduce(Reduction::kSum, a2, cols); });
  }

  void rows_nn(const Tensor& a, const Tensor& out, double f4) {
    const int64_t C = 768, R = n_ / C;
    const Tensor x = Tensor(a.storage(), {R, C}, {C, 1}, 0, DType::kF32);
    const Tensor y = Tensor(out.storage(), {R, C}, {C, 1}, 0, DType::kF32);
    Tensor w = random_tensor({C}, DType::kF32, 4), bias = random_tensor({C}, DType::kF32, 5);
    Tensor mean = empty({R}, DType::kF32), rstd = empty({R}, DType::kF32);
    memory_row("softmax f32 rows of 768", 2 * f4, [&] { be_.softmax(x, y, false); });
    memory_row("layer_norm f32 rows of 768", 2 * f4,
               [&] { be_.layer_norm(x, w, bias, 1e-5, y, mean, rstd); });
    const int64_t N = 8192, V = 50304;
    Tensor logits = random_tensor({N, V}, DType::kBF16, 6, -4, 4);
    Tensor targets = empty({N}, DType::kI64);
    be_.random_uniform(targets, 0, double(V), 7, 0);
    Tensor loss = empty({N}, DType::kF32), lse = empty({N}, DType::kF32);
    memory_row("cross_entropy bf16 (8192, 50304), incl. target check", 2.0 * N * V,
               [&] { be_.cross_entropy(logits, targets, -100, loss, lse); });
    const int64_t P = 124'000'000;
    Tensor p = random_tensor({P}, DType::kF32, 8), g = random_tensor({P}, DType::kF32, 9);
    Tensor m = random_tensor({P}, DType::kF32, 10), v = random_tensor({P}, DType::kF32, 11, 0, 1);
    memory_row("adamw_step f32, 124M parameters", 28.0 * double(P), [&] {
      be_.adamw_step(p, g, m, v, {1e-4, 0.9, 0.95, 1e-8, 0.1, 10});
    });
  }

  // Our matmul against cublasGemmEx on the same row-major operands.
  void gemm_row(int64_t M, int64_t N, int64_t K, DType dtype, bool b_transposed) {
    Tensor a = random_tensor({M, K}, dtype, 20);
    Tensor b = b_transposed ? random_tensor({N, K}, dtype, 21) : random_tensor({K, N}, dtype, 21);
    Tensor c = empty({M, N}, dtype);
    const Tensor b_op = b_transposed ? Tensor(b.storage(), {K, N}, {1, K}, 0, dtype) : b;
    const double ours = time_ms([&] { be_.matmul(a, b_op, c, 1, 0); });

    // The peer's handle gets the same 32 MiB workspace as spmd's (kernels/gemm.cpp),
    // so that the comparison measures our op's overhead, not a kernel choice.
    static cublasHandle_t handle = [] {
      cublasHandle_t h;
      SPMD_CUBLAS_CHECK(cublasCreate(&h));
      return h;
    }();
    static void* workspace = [] {
      void* w = nullptr;
      SPMD_CUDA_CHECK(cudaMalloc(&w, size_t(32) << 20));
      return w;
    }();
    SPMD_CUBLAS_CHECK(
        cublasSetStream(handle, static_cast<cudaStream_t>(cuda::current_stream().handle())));
    SPMD_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace, size_t(32) << 20));
    const cudaDataType_t t = dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t compute =
        dtype == DType::kF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float one = 1, zero = 0;
    // Row-major C = A B is column-major C^T = B^T A^T.
    const double raw = time_ms([&] {
      SPMD_CUBLAS_CHECK(cublasGemmEx(handle, b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
                                     int(N), int(M), int(K), &one, b.raw_data(), t,
                                     int(b_transposed ? K : N), a.raw_data(), t, int(K), &zero,
                                     c.raw_data(), t, int(N), compute, CUBLAS_GEMM_DEFAULT));
    });
    const double tflops = 2.0 * double(M) * double(N) * double(K) / ours / 1e9;
    char name[96];
    std::snprintf(name, sizeof name, "matmul %s %ldx%ldx%ld%s", dtype_name(dtype).data(), long(M),
                  long(N), long(K), b_transposed ? " (b^T)" : "");
    rows_.push_back({name, ours, tflops, "TFLOP/s", "raw cublasGemmEx", raw / ours, ">= 0.95"});
  }

  void gemm() {
    cuda::set_allow_tf32(true);
    gemm_row(8192, 2304, 768, DType::kBF16, true);   // GPT-2 qkv: x @ W^T
    gemm_row(8192, 3072, 768, DType::kBF16, true);   // MLP up
    gemm_row(8192, 768, 3072, DType::kBF16, true);   // MLP down
    gemm_row(8192, 50304, 768, DType::kBF16, true);  // logits
    gemm_row(4096, 4096, 4096, DType::kBF16, false);
    gemm_row(4096, 4096, 4096, DType::kF32, false);  // TF32
    cuda::set_allow_tf32(false);
  }

  void attention() {
    const int64_t B = 8, H = 12, T = 1024, D = 64;
    Tensor q = random_tensor({B, H, T, D}, DType::kBF16, 30);
    Tensor k = random_tensor({B, H, T, D}, DType::kBF16, 31);
    Tensor v = random_tensor({B, H, T, D}, DType::kBF16, 32);
    Tensor dout = random_tensor({B, H, T, D}, DType::kBF16, 33);
    Tensor out = empty({B, H, T, D}, DType::kBF16), lse = empty({B, H, T}, DType::kF32);
    Tensor dq = empty({B, H, T, D}, DType::kBF16), dk = empty({B, H, T, D}, DType::kBF16);
    Tensor dv = empty({B, H, T, D}, DType::kBF16);
    const double scale = 0.125;
    // causal: half the (T x T) products, 4 (fwd) + 10 (bwd incl. recompute) flops per pair and dim
    const double pairs = double(B * H) * double(T) * double(T + 1) / 2 * double(D);
    auto fwd = [&] { be_.attention(q, k, v, true, scale, out, lse); };
    auto bwd = [&] { be_.attention_backward(dout, q, k, v, out, lse, true, scale, dq, dk, dv); };
    auto composed_fwd = [&] { be_.Backend::attention(q, k, v, true, scale, out, lse); };
    auto composed_bwd = [&] {
      be_.Backend::attention_backward(dout, q, k, v, out, lse, true, scale, dq, dk, dv);
    };
    const double f = time_ms(fwd, 2, 5), cf = time_ms(composed_fwd, 2, 5);
    const double b = time_ms(bwd, 2, 5), cb = time_ms(composed_bwd, 2, 5);
    setenv("SPMD_ATTENTION", "simt", 1);  // the f32 CUDA-core kernels
    const double sf = time_ms(fwd, 1, 3), sb = time_ms(bwd, 1, 3);
    unsetenv("SPMD_ATTENTION");
    const char* shape = " bf16 (8,12,1024,64) causal";
    rows_.push_back({std::string("attention fwd, tensor cores") + shape, f, 4 * pairs / f / 1e9,
                     "TFLOP/s", "composed (cuBLAS)", cf / f, "info"});
    rows_.push_back({std::string("attention bwd, tensor cores") + shape, b, 10 * pairs / b / 1e9,
                     "TFLOP/s", "composed (cuBLAS)", cb / b, "info"});
    rows_.push_back({std::string("attention fwd, f32 CUDA cores") + shape, sf, 4 * pairs / sf / 1e9,
                     "TFLOP/s", "composed (cuBLAS)", cf / sf, "info"});
    rows_.push_back({std::string("attention bwd, f32 CUDA cores") + shape, sb,
                     10 * pairs / sb / 1e9, "TFLOP/s", "composed (cuBLAS)", cb / sb, "info"});
  }
};

void print(const std::vector<Row>& rows) {
  std::printf("%-56s %9s %10s %-8s %-18s %7s %s\n", "kernel", "ms", "rate", "", "vs", "ratio",
              "target");
  for (const Row& r : rows) {
    std::printf("%-56s %9.3f %10.1f %-8s %-18s %7.3f %s\n", r.name.c_str(), r.ms, r.rate, r.unit,
                r.peer.c_str(), r.ratio, r.target);
  }
}

void write_json(const std::vector<Row>& rows, const std::string& path) {
  std::ofstream f(path);
  SPMD_CHECK(f.good(), "cannot write ", path);
  for (const Row& r : rows) {
    const nlohmann::ordered_json line = {
        {"bench", "gpu_kernels"}, {"name", r.name}, {"ms", r.ms},       {"rate", r.rate},
        {"unit", r.unit},         {"peer", r.peer}, {"ratio", r.ratio}, {"target", r.target}};
    f << line.dump() << "\n";
  }
}

}  // namespace
}  // namespace spmd

int main(int argc, char** argv) {
  CLI::App app{"spmd-bench-gpu-kernels: CUDA kernels against a D2D copy and raw cuBLAS"};
  bool quick = false;
  std::string json;
  app.add_flag("--quick", quick, "small buffers (a smoke test, not a measurement)");
  app.add_option("--json", json, "also write the rows as JSON lines to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!spmd::cuda::is_available()) {
      std::fprintf(stderr, "spmd-bench-gpu-kernels: no CUDA GPU is available\n");
      return 2;
    }
    spmd::Bench bench(quick);
    bench.run_all();
    spmd::print(bench.rows());
    if (!json.empty()) spmd::write_json(bench.rows(), json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-bench-gpu-kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
