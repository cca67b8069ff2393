// The command line of the examples, on CLI11. An example keeps its flags in
// a struct whose initializers are its defaults and declares them on one Cli,
// which holds the App and parses it the same way for every example. The
// flags the training examples share are added by name, each with one help
// text and one check (runtime/flag_checks.h) and the example's own default
// (the value already in the variable); the example's own flags go on app():
//
//   Flags f;  // the example's defaults
//   examples::Cli cli("Train the transformer fully sharded (run it under spmdrun).");
//   cli.data(f.data).steps(f.steps).batch(f.batch, "sequences per rank per step");
//   cli.app().add_option("--layers", f.layers, "transformer blocks")->check(flags::count(1));
//   cli.parse(argc, argv);
//
// 01 and 05 take all of 01's loop flags at once instead
// (add_train_loop_flags(cli.app(), ...), autograd/train_loop.h).
//
// The last of a repeated flag wins, so a script can append its overrides.
// --help prints the flags and exits 0; a bad flag prints what is wrong and
// exits non-zero, before any rank has started talking to another. Not here:
// checks that relate two flags, or a flag and the world size (the examples do
// those after parsing, where they know the world).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace spmd::examples {

class Cli {
 public:
  explicit Cli(const std::string& description);

  // The shared flags. Each keeps the value already in its variable as the
  // default, and returns *this so that several fit on one line.
  Cli& data(std::string& path);                                         // --data, required
  Cli& config(std::string& name);                                       // --config: tiny or small
  Cli& steps(int64_t& n);                                               // --steps, at least 1
  Cli& batch(int64_t& n, const std::string& help);                      // --batch, at least 1
  Cli& lr(double& lr, const std::string& help = "peak learning rate");  // --lr, above 0
  Cli& warmup(int64_t& n);                                              // --warmup, at least 0
  Cli& grad_clip(double& max_norm);                                     // --grad-clip, 0: none
  Cli& seed(uint64_t& seed);                                            // --seed
  Cli& threads(int& n);                                                 // --threads per rank
  Cli& log_every(int64_t& n);                                           // --log-every, at least 1

  // The App, for the example's own flags.
  CLI::App& app() { return app_; }

  // Parses the command line into the variables. On --help, or on a flag that
  // is unknown or fails its check, prints and ends the process (exit status
  // 0 for --help, non-zero otherwise).
  void parse(int argc, char** argv);

 private:
  CLI::App app_;
};

}  // namespace spmd::examples
