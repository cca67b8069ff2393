// spmd-bench-ops: how fast the CPU tensor ops run beside the libraries under
// them. It opens with the CPU, the capability the kernels run with and the
// BLAS core (tensor/cpu/capability.h, blas.h; --info prints only these
// lines), then for each thread count prints
//   GEMM GFLOP/s of ops::matmul, of the same product through Eigen with
//   EIGEN_USE_BLAS (which zeroes C, then hands C += A B to sgemm: what
//   tensor/cpu/matmul.cpp did before it called cblas directly), and of
//   OpenBLAS's cblas_sgemm, with the ratios, at square sizes
//   and at the GEMM shapes of bench/train_bench.py's small config;
//   GFLOP/s of OpenBLAS, BLIS and oneDNN (bench/gemm_libraries.h) at every
//   GEMM of a tiny- and a small-config training step (each Linear's forward
//   x W^T, its input gradient dy W and its weight gradient dy^T x), and the
//   milliseconds of a whole step's GEMMs on each library;
//   the bandwidth of an elementwise add over 64 MiB (bytes read + written per
//   second) beside memcpy of the same bytes;
//   the milliseconds of the non-GEMM ops of a small-config training step
//   under each capability this machine has, and the ratio to the first.
// The peers run interleaved with ours, repetition by repetition, and each
// figure is the best of the repetitions: on a shared machine another
// process can only add time, so the minimum is the least noisy estimate of
// what the code itself costs (and interleaving exposes all contenders to the
// same noise).
//
//   spmd-bench-ops [--threads 1,2] [--min-time 0.3] [--info] [--gemm-only]
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#if SPMD_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "bench/gemm_libraries.h"
#include "runtime/flag_checks.h"
#include "tensor/attention.h"
#include "tensor/cpu/bf16_gemm.h"
#include "tensor/cpu/blas.h"
#include "tensor/cpu/capability.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

using Clock = std::chrono::steady_clock;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double seconds_of(const std::function<void()>& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The best seconds of each contender, run in turn for `reps` rounds after
// one warm-up round; reps is chosen so the slowest gets about min_time.
std::vector<double> race(const std::vector<std::function<void()>>& contenders, double min_time) {
  double slowest = 0;
  for (const auto& f : contenders) slowest = std::max(slowest, seconds_of(f));  // warm-up
  const int reps = std::clamp(int(min_time / std::max(slowest, 1e-9)), 5, 200);
  std::vector<std::vector<double>> times(contenders.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < contenders.size(); ++i) times[i].push_back(seconds_of(contenders[i]));
  std::vector<double> best;
  for (const auto& t : times) best.push_back(*std::min_element(t.begin(), t.end()));
  return best;
}

struct Gemm {
  int64_t M, K, N;
};

void bench_gemm(const Gemm& g, double min_time) {
  const Tensor a = ops::randn({g.M, g.K}), b = ops::randn({g.K, g.N});
  const Eigen::Map<const RowMatrix> ea(a.data<float>(), g.M, g.K), eb(b.data<float>(), g.K, g.N);
  RowMatrix ec(g.M, g.N);
  std::vector<float> c(size_t(g.M * g.N));
  std::vector<std::function<void()>> contenders = {
      [&] { ops::matmul(a, b); },
      [&] { ec.noalias() = ea * eb; },
  };
#if SPMD_HAVE_OPENBLAS
  contenders.push_back([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(g.M), int(g.N), int(g.K), 1.0f,
                a.data<float>(), int(g.K), b.data<float>(), int(g.N), 0.0f, c.data(), int(g.N));
  });
#endif
  const std::vector<double> t = race(contenders, min_time);
  const double flop = 2.0 * double(g.M) * double(g.K) * double(g.N);
  std::printf("  %4ldx%-4ld . %4ldx%-4ld  %8.1f  %8.1f", long(g.M), long(g.K), long(g.K), long(g.N),
              flop / t[0] * 1e-9, flop / t[1] * 1e-9);
  if (t.size() > 2) std::printf("  %8.1f", flop / t[2] * 1e-9);
  std::printf("   %6.3f", t[1] / t[0]);
  if (t.size() > 2) std::printf("  %6.3f", t[2] / t[0]);
  std::printf("\n");
}

// One GEMM of a training step: C (M, N) = op(A) op(B), `count` times a step.
struct StepGemm {
  const char* what;
  int64_t M, N, K;
  bool trans_a, trans_b;
  int count;
};

// Every GEMM of a GPT-2 step with n_layers blocks of width C (4C hidden),
// BT tokens and vocabulary V (a tied head): per Linear (out N, in K) the
// forward x W^T (nt), the input gradient dy W (nn) and the weight gradient
// dy^T x (tn).
std::vector<StepGemm> step_gemms(int64_t BT, int64_t C, int64_t V, int n_layers) {
  struct Linear {
    const char* name;
    int64_t out, in;
    int count;
  };
  const Linear linears[] = {{"qkv", 3 * C, C, n_layers},
                            {"attn.wo", C, C, n_layers},
                            {"mlp.w1", 4 * C, C, n_layers},
                            {"mlp.w2", C, 4 * C, n_layers},
                            {"head", V, C, 1}};
  std::vector<StepGemm> gemms;
  for (const Linear& l : linears) {
    gemms.push_back({l.name, BT, l.out, l.in, false, true, l.count});   // y = x W^T
    gemms.push_back({l.name, BT, l.in, l.out, false, false, l.count});  // dx = dy W
    gemms.push_back({l.name, l.out, l.in, BT, true, false, l.count});   // dW = dy^T x
  }
  return gemms;
}

// Whether every library's C equals the first's to f32 rounding (K-term sums
// in different orders: 1e-4 of the largest magnitude).
bool same_products(const std::vector<std::vector<float>>& c) {
  float scale = 0;
  for (float v : c[0]) scale = std::max(scale, std::abs(v));
  for (size_t i = 1; i < c.size(); ++i)
    for (size_t j = 0; j < c[i].size(); ++j)
      if (!(std::abs(c[i][j] - c[0][j]) <= 1e-4f * scale)) return false;
  return true;
}

// Each library at each GEMM of the step (interleaved, best of the
// repetitions), then the step's GEMM time on each: sum of count x time.
void bench_gemm_libraries(const char* config, int64_t BT, int64_t C, int64_t V, int n_layers,
                          int threads, double min_time) {
  std::vector<const bench::GemmLibrary*> libs;
  for (const bench::GemmLibrary& l : bench::gemm_libraries())
    if (l.available) libs.push_back(&l);
  std::printf("  %-8s %-8s %-22s %2s", config, "linear", "C(MxN) = op(A) op(B), K", "op");
  for (const auto* l : libs) std::printf("  %8s", l->name.c_str());
  for (size_t i = 1; i < libs.size(); ++i) std::printf("  %s/%s", libs[i]->name.c_str(), "blas");
  std::printf("   (GFLOP/s)\n");
  std::vector<double> step_s(libs.size(), 0.0);
  for (const StepGemm& g : step_gemms(BT, C, V, n_layers)) {
    const int64_t a_rows = g.trans_a ? g.K : g.M, a_cols = g.trans_a ? g.M : g.K;
    const int64_t b_rows = g.trans_b ? g.N : g.K, b_cols = g.trans_b ? g.K : g.N;
    const Tensor a = ops::randn({a_rows, a_cols}), b = ops::randn({b_rows, b_cols});
    std::vector<std::vector<float>> c(libs.size(), std::vector<float>(size_t(g.M * g.N)));
    std::vector<std::function<void()>> contenders;
    for (size_t i = 0; i < libs.size(); ++i)
      contenders.push_back([&, i] {
        libs[i]->sgemm(g.trans_a, g.trans_b, g.M, g.N, g.K, a.data<float>(), a_cols,
                       b.data<float>(), b_cols, c[i].data(), g.N);
      });
    const std::vector<double> t = race(contenders, min_time);
    const bool agree = same_products(c);
    const double flop = 2.0 * double(g.M) * double(g.N) * double(g.K);
    char shape[64];
    std::snprintf(shape, sizeof shape, "%ldx%ld, %ld", long(g.M), long(g.N), long(g.K));
    std::printf("  %-8s %-8s %-22s %c%c", "", g.what, shape, g.trans_a ? 't' : 'n',
                g.trans_b ? 't' : 'n');
    for (size_t i = 0; i < t.size(); ++i) {
      std::printf("  %8.1f", flop / t[i] * 1e-9);
      step_s[i] += g.count * t[i];
    }
    for (size_t i = 1; i < t.size(); ++i) std::printf("  %10.2fx", t[0] / t[i]);
    std::printf("%s\n", agree ? "" : "  #wrong: the libraries' products differ");
  }
  std::printf("  %-8s a step's GEMMs (threads=%d):", config, threads);
  for (size_t i = 0; i < libs.size(); ++i)
    std::printf("  %s %.2f ms", libs[i]->name.c_str(), step_s[i] * 1e3);
  for (size_t i = 1; i < libs.size(); ++i)
    std::printf("  %s/%s %.2fx", libs[0]->name.c_str(), libs[i]->name.c_str(),
                step_s[i] > 0 ? step_s[0] / step_s[i] : 0.0);
  std::printf("\n");
}

void bench_elementwise(double min_time) {
  const int64_t n = (int64_t(64) << 20) / 4;  // 64 MiB of f32
  const size_t bytes = size_t(n) * 4;
  const Tensor a = ops::rand({n}), b = ops::rand({n});
  Tensor acc = ops::rand({n});
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const std::vector<double> t =
      race({
               [&] { ops::add(a, b); },     // allocates a fresh 64 MiB output
               [&] { ops::add_(acc, b); },  // in place: no allocation
               [&] { std::memcpy(dst.data(), src.data(), bytes); },
           },
           min_time);
  const double gib = 1024.0 * 1024 * 1024;
  const double add_bw = 3 * double(bytes) / t[0] / gib, inplace_bw = 3 * double(bytes) / t[1] / gib;
  const double memcpy_bw = 2 * double(bytes) / t[2] / gib;
  std::printf("  add (new output)  %6.2f GiB/s  %5.2f ms   %5.2f of memcpy\n", add_bw, t[0] * 1e3,
              add_bw / memcpy_bw);
  std::printf("  add_ (in place)   %6.2f GiB/s  %5.2f ms   %5.2f of memcpy\n", inplace_bw,
              t[1] * 1e3, inplace_bw / memcpy_bw);
  std::printf("  memcpy            %6.2f GiB/s  %5.2f ms\n", memcpy_bw, t[2] * 1e3);
}

// A hot op of the training step and its inputs, made once.
struct HotOp {
  const char* name;
  std::string shape;
  std::function<void()> run;
};

// The non-GEMM ops of a small-config step (B 8, T 256, C 384, 6 heads).
std::vector<HotOp> hot_ops() {
  const int64_t BT = 8 * 256, C = 384;
  const Tensor h = ops::randn({BT, 4 * C}), dh = ops::randn({BT, 4 * C});
  const Tensor x = ops::randn({BT, C}), dx = ops::randn({BT, C});
  const Tensor w = ops::ones({C}), b = ops::zeros({C});
  const Tensor scores = ops::randn({8 * 6 * 256, 256});
  const Tensor logits = ops::randn({BT, 256}), targets = ops::randint(0, 256, {BT});
  const Tensor q = ops::randn({8, 6, 256, 64}), k = ops::randn({8, 6, 256, 64});
  const Tensor v = ops::randn({8, 6, 256, 64}), dout = ops::randn({8, 6, 256, 64});
  const std::string mlp = "(2048, 1536)", model = "(2048, 384)";
  return {
      {"gelu_tanh", mlp, [=] { ops::gelu(h, true); }},
      {"gelu_tanh_backward", mlp, [=] { ops::binary(BinaryOp::kGeluTanhBackward, dh, h); }},
      {"exp", mlp, [=] { ops::exp(h); }},
      {"add", mlp, [=] { ops::add(h, dh); }},
      {"sum over rows", mlp, [=] { ops::sum(h, {0}); }},
      {"softmax", "(12288, 256)", [=] { ops::softmax(scores); }},
      {"layer_norm", model, [=] { ops::layer_norm(x, w, b); }},
      {"layer_norm fwd+bwd", model,
       [=] { ops::layer_norm_backward(dx, x, w, ops::layer_norm(x, w, b), true); }},
      {"cross_entropy", "(2048, 256)", [=] { ops::cross_entropy(logits, targets); }},
      {"attention", "(8, 6, 256, 64)", [=] { ops::attention(q, k, v, true); }},
      {"attention fwd+bwd", "(8, 6, 256, 64)",
       [=] { ops::attention_backward(dout, q, k, v, ops::attention(q, k, v, true), true); }},
  };
}

// Each hot op under each capability, interleaved capability by capability.
void bench_capabilities(double min_time) {
  const std::vector<cpu::CpuCapability> caps = cpu::available_capabilities();
  const cpu::CpuCapability before = cpu::cpu_capability();
  std::printf("  %-20s %-16s", "op", "shape");
  for (cpu::CpuCapability c : caps) std::printf("  %7s ms", cpu::capability_name(c));
  for (size_t i = 1; i < caps.size(); ++i)
    std::printf("  %s/%s", cpu::capability_name(caps[0]), cpu::capability_name(caps[i]));
  std::printf("\n");
  for (const HotOp& op : hot_ops()) {
    std::vector<std::function<void()>> contenders;
    for (cpu::CpuCapability c : caps)
      contenders.push_back([&, c] {
        cpu::set_cpu_capability(c);
        op.run();
      });
    const std::vector<double> t = race(contenders, min_time);
    std::printf("  %-20s %-16s", op.name, op.shape.c_str());
    for (double seconds : t) std::printf("  %10.3f", seconds * 1e3);
    for (size_t i = 1; i < t.size(); ++i) std::printf("  %9.2fx", t[0] / t[i]);
    std::printf("\n");
  }
  cpu::set_cpu_capability(before);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"spmd-bench-ops: CPU tensor ops beside Eigen, OpenBLAS and memcpy"};
  std::vector<int> thread_counts = {1, 2};
  double min_time = 0.3;
  app.add_option("--threads", thread_counts, "thread counts to run with")
      ->delimiter(',')
      ->check(spmd::flags::count(1, 1024));
  app.add_option("--min-time", min_time, "seconds per measurement, about")
      ->check(spmd::flags::positive(60));
  bool info_only = false, gemm_only = false;
  app.add_flag("--info", info_only, "print the CPU, capability and BLAS lines only");
  app.add_flag("--gemm-only", gemm_only, "the f32 GEMM table only (bench/gemm_cores.py)");
  CLI11_PARSE(app, argc, argv);
  try {
    std::printf("# cpu: %s\n# blas: %s\n# %s\n", cpu::describe_cpu().c_str(),
                cpu::describe_blas().c_str(), cpu::describe_bf16_gemm().c_str());
    for (const bench::GemmLibrary& l : bench::gemm_libraries())
      std::printf("# gemm %s: %s\n", l.name.c_str(), l.version.c_str());
    if (info_only) return 0;
    const std::vector<Gemm> shapes = {{512, 512, 512},   {1024, 1024, 1024}, {2048, 2048, 2048},
                                      {2048, 384, 1152}, {2048, 384, 1536},  {2048, 1536, 384}};
    for (int threads : thread_counts) {
      set_num_threads(threads);
      std::printf("threads=%d  f32 GEMM GFLOP/s (best of the repetitions)\n", threads);
      std::printf("  %-21s  %8s  %8s  %8s   %6s  %6s\n", "shape (MxK . KxN)", "ours", "eigen",
                  "openblas", "/eigen", "/blas");
      for (const Gemm& g : shapes) bench_gemm(g, min_time);
      if (gemm_only) continue;
      std::printf("threads=%d  f32 GEMM libraries at a training step's shapes\n", threads);
      for (const bench::GemmLibrary& l : bench::gemm_libraries())
        if (l.available && l.set_threads) l.set_threads(threads);
      bench_gemm_libraries("tiny", 8 * 128, 128, 256, 4, threads, min_time);
      bench_gemm_libraries("small", 8 * 256, 384, 256, 6, threads, min_time);
      std::printf("threads=%d  elementwise, 64 MiB f32 (bytes read + written per second)\n",
                  threads);
      bench_elementwise(min_time);
      std::printf("threads=%d  hot ops of a training step under each capability (best ms)\n",
                  threads);
      bench_capabilities(min_time);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-bench-ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
