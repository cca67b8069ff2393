// A tour of spmd's tensor core, the layer everything else stands on: tensors
// and views, broadcasting, reductions, matrix products on OpenBLAS, seeded
// random numbers, and the fused ops of a transformer. It ends by training a
// softmax classifier with hand-written gradients (this program links the
// tensor layer alone; autograd/ is the layer above) and saving it as
// safetensors.
//
//   build/examples/tensor_tour [--steps 200] [--out /tmp/tour.safetensors]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "runtime/flag_checks.h"
#include "tensor/ops.h"
#include "tensor/safetensors.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

void section(const char* title) { std::cout << "\n== " << title << "\n"; }

void views_and_broadcasting() {
  section("tensors are views of storage");
  const Tensor x = ops::reshape(ops::arange(0, 6, 1, {DType::kF32}), {2, 3});
  const Tensor xt = ops::transpose(x, 0, 1);  // (3, 2): new strides, same bytes
  std::cout << "x = " << x << "\nx.T = " << xt << "\n";
  std::cout << std::boolalpha << "x.T strides " << xt.strides()
            << ", shares storage with x: " << (xt.storage() == x.storage())
            << ", contiguous: " << xt.is_contiguous() << "\n";
  const Tensor bias = ops::from_vector<float>({10, 20, 30}, {3});
  std::cout << "x + bias (broadcast (2, 3) with (3)) = " << ops::add(x, bias) << "\n";
  std::cout << "x / 4 (true division) = " << ops::div(ops::arange(int64_t(4)), 4.0) << "\n";
  std::cout << "sum over dim 0 = " << ops::sum(x, {0}) << ", mean = " << ops::mean(x)
            << ", argmax over dim 1 = " << ops::argmax(x, 1) << "\n";
}

void matmul_speed() {
  section("matrix products go to OpenBLAS through Eigen");
  const Tensor a = ops::randn({1024, 1024}), b = ops::randn({1024, 1024});
  ops::matmul(a, b);  // warm up
  const auto start = std::chrono::steady_clock::now();
  const int reps = 5;
  for (int i = 0; i < reps; ++i) ops::matmul(a, b);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("1024x1024 @ 1024x1024 in f32 on %d thread(s): %.1f GFLOP/s\n", num_threads(),
              2.0 * 1024 * 1024 * 1024 * reps / s * 1e-9);
  const Tensor w = ops::randn({4, 3});
  const Tensor y = ops::linear(ops::randn({2, 5, 3}), w);  // x @ w.T, the transpose not copied
  std::cout << "linear((2, 5, 3), weight (4, 3)) has shape " << y.shape() << "\n";
}

void random_numbers() {
  section("random numbers are a function of (seed, counter)");
  manual_seed(42);
  const Tensor first = ops::randn({8});
  manual_seed(42);
  std::cout << "randn(8) after manual_seed(42), twice:\n  " << first << "\n  " << ops::randn({8})
            << "\n";
  Generator g(42);
  g.set_offset(1);  // counter 1 holds elements 4..7 of the stream
  std::cout << "4 values from counter 1 alone: " << ops::randn({4}, {}, &g) << "\n";
}

void transformer_ops() {
  section("the fused ops of a transformer");
  const Tensor scores = ops::randn({1, 4, 4});
  const Tensor causal = ops::logical_not(ops::tril(ops::ones({4, 4}, {DType::kBool})));
  const Tensor att = ops::softmax(ops::masked_fill(scores, causal, -INFINITY));
  std::cout << "causal attention weights (rows sum to 1):\n" << att << "\n";
  const ops::NormResult ln = ops::layer_norm(ops::randn({2, 8}), {}, {});
  std::cout << "layer_norm rows: mean " << ops::mean(ln.y, {1}) << ", var "
            << ops::var(ln.y, {1}, 0) << "\n";
}

// Three Gaussian blobs in 2-D, labelled by blob: (x (N, 2), y (N)).
std::pair<Tensor, Tensor> make_blobs(int64_t n, Generator& gen) {
  const Tensor centers = ops::from_vector<float>({-2, 0, 2, 2, 2, -2}, {3, 2});
  const Tensor labels = ops::randint(0, 3, {n}, {DType::kI64}, &gen);
  const Tensor x = ops::add(ops::index_select(centers, 0, labels), ops::randn({n, 2}, {}, &gen));
  return {x, labels};
}

// Softmax regression: logits = x W^T + b; the gradients of the mean
// cross-entropy are dlogits from the fused op, then dW = dlogits^T x and
// db = the column sums of dlogits.
void train_classifier(int steps, const std::string& out) {
  section("training a softmax classifier with raw ops and AdamW");
  Generator gen(7);
  const auto [x, y] = make_blobs(3000, gen);
  Tensor w = ops::zeros({3, 2}), b = ops::zeros({3});
  Tensor mw = ops::zeros_like(w), vw = ops::zeros_like(w), mb = ops::zeros_like(b),
         vb = ops::zeros_like(b);
  for (int step = 1; step <= steps; ++step) {
    const Tensor logits = ops::linear(x, w, b);  // (N, 3)
    const ops::CrossEntropyResult ce = ops::cross_entropy(logits, y);
    const Tensor dlogits = ops::cross_entropy_backward(logits, y, ce, 1.0);
    const Tensor dw = ops::matmul(ops::transpose(dlogits, 0, 1), x);  // (3, 2)
    const Tensor db = ops::sum(dlogits, {0});
    ops::adamw_step_(w, dw, mw, vw, {0.05, 0.9, 0.999, 1e-8, 0.0, step});
    ops::adamw_step_(b, db, mb, vb, {0.05, 0.9, 0.999, 1e-8, 0.0, step});
    if (step == 1 || step % 50 == 0 || step == steps) {
      const Tensor hits = ops::eq(ops::argmax(logits, 1), y);
      std::printf("step %4d  loss %.4f  accuracy %.3f\n", step, ce.loss.item<double>(),
                  ops::mean(ops::to(hits, DType::kF32)).item<double>());
    }
  }
  save_safetensors(out, {{"weight", w}, {"bias", b}}, {{"model", "softmax regression"}});
  const SafetensorsFile back = load_safetensors(out);
  std::cout << "saved to " << out << " and read back: weight " << back.tensors.at("weight") << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A tour of spmd's tensor core"};
  int steps = 200;
  std::string out = "/tmp/spmd_tensor_tour.safetensors";
  app.add_option("--steps", steps, "training steps of the classifier")
      ->check(spmd::flags::count(1));
  app.add_option("--out", out, "where to save the trained classifier");
  CLI11_PARSE(app, argc, argv);
  try {
    views_and_broadcasting();
    matmul_speed();
    random_numbers();
    transformer_ops();
    train_classifier(steps, out);
  } catch (const std::exception& e) {
    std::cerr << "tensor_tour: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
