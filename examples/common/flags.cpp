// The shared flags of the training examples (see flags.h).
#include "examples/common/flags.h"

#include <cstdlib>

#include "runtime/flag_checks.h"

namespace spmd::examples {

Cli::Cli(const std::string& description) : app_(description) {
  app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later wins
}

Cli& Cli::data(std::string& path) {
  app_.add_option("--data", path, "text file to train on")->required();
  return *this;
}

Cli& Cli::config(std::string& name) {
  app_.add_option("--config", name, "model size: tiny (0.8M parameters) or small (10.8M)")
      ->check(CLI::IsMember({"tiny", "small"}));
  return *this;
}

Cli& Cli::steps(int64_t& n) {
  app_.add_option("--steps", n, "optimizer steps")->check(flags::count(1));
  return *this;
}

Cli& Cli::batch(int64_t& n, const std::string& help) {
  app_.add_option("--batch", n, help)->check(flags::count(1));
  return *this;
}

Cli& Cli::lr(double& lr, const std::string& help) {
  app_.add_option("--lr", lr, help)->check(flags::positive());
  return *this;
}

Cli& Cli::warmup(int64_t& n) {
  app_.add_option("--warmup", n, "warm-up steps")->check(flags::count(0));
  return *this;
}

Cli& Cli::grad_clip(double& max_norm) {
  app_.add_option("--grad-clip", max_norm, "global gradient-norm limit (0: none)")
      ->check(flags::number(0));
  return *this;
}

Cli& Cli::seed(uint64_t& seed) {
  app_.add_option("--seed", seed, "seed of the weights and of the batches");
  return *this;
}

Cli& Cli::threads(int& n) {
  app_.add_option("--threads", n, "CPU threads per rank")->check(flags::count(1, 1024));
  return *this;
}

Cli& Cli::log_every(int64_t& n) {
  app_.add_option("--log-every", n, "steps between log lines")->check(flags::count(1));
  return *this;
}

void Cli::parse(int argc, char** argv) {
  try {
    app_.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app_.exit(e));  // prints the help (exit status 0) or what is wrong (non-zero)
  }
}

}  // namespace spmd::examples
