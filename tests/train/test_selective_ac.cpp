// spmd-train with selective activation checkpointing, against one process
// that checkpoints nothing: the loss and the gradient norm at every step
// (1e-5) under FSDP and composed with TP, CP, PP (1F1B and zero-bubble) and
// FSDP; under FSDP every parameter after the last step too. The keys'
// values outside their choices are refused, naming the key.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>

#include "autograd/nn/checkpoint_wrapper.h"
#include "tests/train/trainer_test_util.h"

using namespace spmd;
using namespace spmd::train::testing;

namespace {

const std::vector<std::string> kUntied = {"model.tie_embeddings=false", "model.n_layers=4"};

// The grad_norm of each step a run logged in <run_folder>/metrics_rank<R>.jsonl
// (the global norm, the same on every rank).
std::vector<double> grad_norms(const std::string& run_folder, int rank) {
  std::ifstream in(run_folder + "/metrics_rank" + std::to_string(rank) + ".jsonl");
  std::vector<double> norms;
  const std::string key = "\"grad_norm\":";
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"checkpoint_ms\":") != std::string::npos) continue;  // a save's line
    const size_t at = line.find(key);
    expect(at != std::string::npos, run_folder, ": a metrics line without grad_norm");
    norms.push_back(std::strtod(line.c_str() + at + key.size(), nullptr));
  }
  return norms;
}

// Each rank: one process without checkpointing (over the layout's
// accumulation chunks, as check_layout's), then the layout; the losses and
// the gradient norms of the two at every step within 1e-5. `model`: the
// overrides both share.
void check_grad_norms(int world_size, std::vector<std::string> layout, const std::string& name,
                      const std::vector<std::string>& model = {}) {
  const std::string runs = "/tmp/spmd_test_selective_ac_" + std::to_string(::getpid());
  layout.insert(layout.end(), model.begin(), model.end());
  layout.push_back("metrics.run_folder=\"" + runs + "_layout\"");
  const train::TrainConfig c = base(4, layout);
  run_world(
      world_size,
      [&](dist::ProcessGroup& world) {
        const std::string single = runs + "_single" + std::to_string(world.rank());
        std::vector<std::string> one = model;
        one.push_back(reference_chunks(c));
        one.push_back("metrics.run_folder=\"" + single + "\"");
        const auto want = run_single(base(4, one));
        const auto got = train::run_training(c, dist::testing::borrow(world)).losses;
        const std::string who = str_cat(name, " (rank ", world.rank(), ")");
        expect_close(got, want, 1e-5, who);
        expect_close(grad_norms(runs + "_layout", world.rank()), grad_norms(single, 0), 1e-5,
                     who + ", the gradient norm at");
        std::filesystem::remove_all(single);
      },
      std::chrono::seconds(90));
  std::filesystem::remove_all(runs + "_layout");
}

}  // namespace

TEST_CASE("selective checkpointing under FSDP trains as one process without it",
          "[train][selective_ac][equivalence]") {
  const std::vector<std::string> fsdp = {"parallel.dp_shard=2",
                                         "training.activation_checkpointing=\"selective\"",
                                         "training.selective_ac_option=\"op\""};
  check_grad_norms(2, fsdp, "fsdp 2, selective op");
  check_layout(2, fsdp, "fsdp 2, selective op");
  check_layout(2,
               {"parallel.dp_shard=2", "training.activation_checkpointing=\"selective\"",
                "training.selective_ac_option=\"2\""},
               "fsdp 2, every 2nd block checkpointed", kUntied);
}

TEST_CASE("selective checkpointing composes with TP, CP and pipeline stages",
          "[train][selective_ac][equivalence]") {
  const std::string op = "training.activation_checkpointing=\"selective\"";
  check_grad_norms(2, {"parallel.tp=2", "parallel.sequence_parallel=true", op},
                   "tp 2 + sp, selective");
  check_grad_norms(2, {"parallel.cp=2", op}, "cp 2, selective");
  check_grad_norms(4, {"parallel.pp=2", "parallel.dp_shard=2", op},
                   "pp 2 x fsdp 2, 1f1b, selective", kUntied);
  check_grad_norms(2,
                   {"parallel.pp=2", "parallel.pp_schedule=\"zbh1\"", "parallel.pp_microbatches=4",
                    op, "training.selective_ac_option=\"3\""},
                   "pp 2, zbh1, every 3rd block", kUntied);
}

TEST_CASE("the checkpointing keys refuse values outside their choices, naming the key",
          "[train][selective_ac][config]") {
  auto error = [](const std::vector<std::string>& o) {
    try {
      train::load_config("", o);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error({"training.activation_checkpointing=\"some\""}) ==
        "override --training.activation_checkpointing=\"some\": "
        "training.activation_checkpointing must be one of \"none\", \"full\", \"selective\", "
        "got \"some\"");
  for (const char* bad : {"\"0\"", "\"-2\"", "\"ops\"", "\"\""}) {
    const std::string o = str_cat("training.selective_ac_option=", bad);
    CHECK(error({o}) == str_cat("override --", o,
                                ": training.selective_ac_option must be \"op\" or a positive "
                                "integer k as a string (\"2\": every 2nd block), got ",
                                bad));
  }
  const train::TrainConfig c = train::load_config(
      "",
      {"training.activation_checkpointing=\"selective\"", "training.selective_ac_option=\"4\""});
  CHECK(train::checkpoint_options(c.training).every == 4);
  CHECK(train::checkpoint_options(c.training).policy == autograd::CheckpointPolicy::kRecomputeAll);
}
