// spmd against PyTorch on one GPT-2 training step: spmd builds a small
// GPT-2-shaped model, runs a batch forward and backward and one AdamW step,
// and writes its weights, the batch and every result to safetensors files;
// torch_reference.py (Debian's python3-torch) rebuilds the model from those
// weights and checks the loss, the logits, every parameter's gradient and
// every parameter after the step to 1e-4 relative.
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "tensor/ops.h"
#include "tests/run_command.h"

using namespace spmd;

namespace {

// Runs a shell command (tests/run_command.h).
std::pair<int, std::string> run(const std::string& command) { return test::run_command(command); }

}  // namespace

TEST_CASE("a GPT-2 training step matches PyTorch: loss, logits, gradients, AdamW", "[torch]") {
  const char* root = std::getenv("SPMD_SOURCE_DIR");
  REQUIRE(root != nullptr);
  const std::string dir = "/tmp/spmd_torch_ref_" + std::to_string(::getpid());
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);

  const nn::TransformerConfig config = nn::TransformerConfig::gpt2(64, 16, 2, 2, 32);
  const optim::AdamWOptions adamw{.lr = 1e-3, .weight_decay = 0.1};
  nn::Transformer model(config, 42);
  model.save(dir + "/model.safetensors");
  Generator gen(1);
  const int64_t B = 3, T = 16;
  const Tensor x = ops::randint(0, config.vocab_size, {B, T}, {DType::kI64}, &gen);
  const Tensor y = ops::randint(0, config.vocab_size, {B, T}, {DType::kI64}, &gen);
  save_safetensors(dir + "/batch.safetensors", {{"x", x}, {"y", y}});

  TensorMap results;
  const Tensor logits = model(x);
  const Tensor loss = cross_entropy(logits, y);
  backward(loss);
  results["loss"] = loss;
  results["logits"] = logits;
  for (auto& [name, p] : model.named_parameters()) results["grad." + name] = ops::clone(p.grad());
  optim::AdamW(model.parameters(), adamw).step();
  for (auto& [name, p] : model.named_parameters()) results["step." + name] = p;
  save_safetensors(dir + "/spmd.safetensors", results);
  std::ofstream(dir + "/config.json")
      << "{\"vocab_size\": " << config.vocab_size << ", \"max_seq_len\": " << config.max_seq_len
      << ", \"n_layers\": " << config.n_layers << ", \"n_heads\": " << config.n_heads
      << ", \"d_model\": " << config.d_model << ", \"lr\": " << adamw.lr
      << ", \"beta1\": " << adamw.beta1 << ", \"beta2\": " << adamw.beta2
      << ", \"eps\": " << adamw.eps << ", \"weight_decay\": " << adamw.weight_decay << "}\n";

  const auto [status, output] =
      run("/usr/bin/python3 " + std::string(root) + "/tests/autograd/torch_reference.py " + dir);
  run("rm -rf " + dir);
  INFO(output);
  CHECK(status == 0);
  CHECK_THAT(output, Catch::Contains("tensors within"));
  std::printf("%s", output.substr(output.rfind("torch ")).c_str());
}
