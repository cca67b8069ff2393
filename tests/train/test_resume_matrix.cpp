// Any layout resumes any other, checked in full: a run saved under one
// layout after 2 of 4 steps is resumed under another, trains step 3 and
// saves; that checkpoint, read whole, must hold the single process's
// parameters and both AdamW moments after step 3 (within 1e-5 of each
// tensor's largest magnitude), its train state step 3, and the resumed
// step's loss and gradient norm must be the single process's (1e-5).
// A moment loaded into the wrong place, or not at all, shows in the
// moments after the next update (m = beta1 m + ...), and in the parameters.
//
// The saves: one process, DDP 2, FSDP 2, TP 2, CP 2, PP 2, HSDP 2 x 2,
// FSDP 2 x TP 2 and PP 2 x FSDP 2 (a dense GPT-2 of 4 blocks with an untied
// head, which a pipeline needs), and EP 2 over DDP 2 (with experts); each
// resumed under 3 or 4 other layouts of 1, 2 or 4 ranks: 36 pairs.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>

#include "tests/train/trainer_test_util.h"

using namespace spmd;
using namespace spmd::train;
using namespace spmd::train::testing;
namespace fs = std::filesystem;

namespace {

struct Layout {
  int world;
  std::vector<std::string> keys;
  const char* name;
};

const std::vector<std::string> kDense = {"model.tie_embeddings=false", "model.n_layers=4"};
const std::vector<std::string> kMoe = {"model.n_experts=4", "model.moe_top_k=2"};

const Layout kOne{1, {}, "one process"};
const Layout kDdp{2, {"parallel.dp_replicate=2"}, "ddp 2"};
const Layout kFsdp{2, {"parallel.dp_shard=2"}, "fsdp 2"};
const Layout kTp{2, {"parallel.tp=2"}, "tp 2"};
const Layout kCp{2, {"parallel.cp=2"}, "cp 2"};
const Layout kPp{2, {"parallel.pp=2"}, "pp 2"};
const Layout kFsdp4{4, {"parallel.dp_shard=4"}, "fsdp 4"};
const Layout kHsdp{4, {"parallel.dp_replicate=2", "parallel.dp_shard=2"}, "hsdp 2 x 2"};
const Layout kFsdpTp{4, {"parallel.dp_shard=2", "parallel.tp=2"}, "fsdp 2 x tp 2"};
const Layout kPpFsdp{4, {"parallel.pp=2", "parallel.dp_shard=2"}, "pp 2 x fsdp 2"};
const Layout kEp{2, {"parallel.dp_replicate=2", "parallel.ep=2"}, "ep 2"};
const Layout kFsdpEp{2, {"parallel.dp_shard=2", "parallel.ep=2"}, "fsdp 2, ep 2"};
const Layout kFsdp4Ep{4, {"parallel.dp_shard=4", "parallel.ep=2"}, "fsdp 4, ep 2"};
const Layout kCpEp{2, {"parallel.cp=2", "parallel.ep=2"}, "cp 2, ep 2"};

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs `layout` on its world: steps [from, stop) of a 4-step run, saving
// after every step into `folder`. Returns rank 0's result.
TrainResult run_layout(const Layout& layout, const std::vector<std::string>& model,
                       const std::string& folder, int64_t stop) {
  const TrainConfig c =
      base(4, joined(joined(layout.keys, model), {"checkpoint.folder=\"" + folder + "\"",
                                                  "checkpoint.interval=1", "checkpoint.keep=0"}));
  const std::string out = folder + "_result";
  run_world(
      layout.world,
      [&](dist::ProcessGroup& world) {
        const TrainResult r = run_training(c, dist::testing::borrow(world), stop);
        if (world.rank() != 0) return;
        std::ofstream f(out);
        f << std::setprecision(17) << r.first_step;
        for (size_t i = 0; i < r.losses.size(); ++i)
          f << " " << r.losses[i] << " " << r.grad_norms[i];
      },
      std::chrono::seconds(90));
  TrainResult r;
  std::ifstream f(out);
  f >> r.first_step;
  for (double loss, norm; f >> loss >> norm;) {
    r.losses.push_back(loss);
    r.grad_norms.push_back(norm);
  }
  fs::remove(out);
  return r;
}

// The parameters and AdamW moments of the checkpoint of `step` in folder,
// read whole into one process's model, by name ("w", "w.exp_avg", ...), and
// its train state's step.
std::map<std::string, std::vector<float>> whole_state(const std::vector<std::string>& model,
                                                      const std::string& folder, int64_t step,
                                                      int64_t* saved_step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", (long long)step);
  {
    std::ofstream latest(folder + "/latest");  // point a copy's reader at that step
    latest << name << "\n";
  }
  const TrainConfig c = base(4, model);
  auto m = std::make_shared<nn::Transformer>(transformer_config(c.model), c.training.seed + 1);
  optim::AdamW opt(m->parameters(), {});
  LoadCheck check;
  for (const auto& [n, p] : m->named_parameters()) check.whole_model.push_back(n);
  const auto state = load_latest_checkpoint(folder, m->named_parameters(), opt, nullptr, check);
  REQUIRE(state.has_value());
  *saved_step = state->step;
  std::map<std::string, std::vector<float>> out;
  const auto params = m->named_parameters();
  const TensorMap moments = opt.state_dict();
  for (size_t i = 0; i < params.size(); ++i) {
    out[params[i].first] = ops::to_vector<float>(params[i].second);
    for (const char* k : {"exp_avg", "exp_avg_sq"})
      out[params[i].first + "." + k] =
          ops::to_vector<float>(moments.at("state." + std::to_string(i) + "." + k));
  }
  return out;
}

// Saved under `from` after 2 steps, resumed under each of `to` for step 3.
void check_matrix(const Layout& from, const std::vector<Layout>& to,
                  const std::vector<std::string>& model) {
  const std::string dir = "/tmp/spmd_test_resume_matrix_" + std::to_string(::getpid());
  fs::remove_all(dir);
  // The reference: one process, every step saved.
  const TrainResult single = run_layout(kOne, model, dir + "/single", 4);
  int64_t ref_step = 0;
  const auto want = whole_state(model, dir + "/single", 3, &ref_step);
  REQUIRE(ref_step == 3);
  for (const Layout& r : to) {
    const std::string what = std::string(from.name) + " -> " + r.name;
    INFO(what);
    const std::string folder = dir + "/ck";
    fs::remove_all(folder);
    run_layout(from, model, folder, 2);  // saves after steps 1 and 2
    const TrainResult resumed = run_layout(r, model, folder, 3);
    CHECK(resumed.first_step == 2);
    REQUIRE(resumed.losses.size() == 1);
    expect_close(resumed.losses, {single.losses[2]}, 1e-5, what);
    expect_close(resumed.grad_norms, {single.grad_norms[2]}, 1e-5, what, "grad_norm");
    int64_t got_step = 0;
    const auto got = whole_state(model, folder, 3, &got_step);
    CHECK(got_step == 3);
    REQUIRE(got.size() == want.size());
    for (const auto& [name, y] : want) {
      const std::vector<float>& x = got.at(name);
      float scale = 1e-12f, diff = 0;
      for (size_t j = 0; j < y.size(); ++j) {
        scale = std::max(scale, std::abs(y[j]));
        diff = std::max(diff, std::abs(x[j] - y[j]));
      }
      INFO(name << " differs by " << diff << " (largest magnitude " << scale << ")");
      CHECK(diff <= 1e-5f * scale);
    }
  }
  fs::remove_all(dir);
}

}  // namespace

TEST_CASE("resume matrix: one process and DDP saves", "[train][checkpoint][matrix]") {
  check_matrix(kOne, {kFsdp, kTp, kPpFsdp, kHsdp}, kDense);
  check_matrix(kDdp, {kOne, kCp, kPp, kFsdpTp}, kDense);
}

TEST_CASE("resume matrix: FSDP and TP saves", "[train][checkpoint][matrix]") {
  check_matrix(kFsdp, {kOne, kTp, kFsdp4, kPpFsdp}, kDense);
  check_matrix(kTp, {kOne, kFsdp, kHsdp, kPp}, kDense);
}

TEST_CASE("resume matrix: CP and PP saves", "[train][checkpoint][matrix]") {
  check_matrix(kCp, {kOne, kDdp, kFsdpTp}, kDense);
  check_matrix(kPp, {kOne, kFsdp, kFsdpTp, kPpFsdp}, kDense);
}

TEST_CASE("resume matrix: HSDP, FSDP x TP and PP x FSDP saves on 4 ranks",
          "[train][checkpoint][matrix]") {
  check_matrix(kHsdp, {kOne, kTp, kPp}, kDense);
  check_matrix(kFsdpTp, {kOne, kFsdp4, kCp}, kDense);
  check_matrix(kPpFsdp, {kOne, kPp, kFsdp}, kDense);
}

TEST_CASE("resume matrix: expert-parallel saves", "[train][checkpoint][matrix][ep]") {
  // Targets whose experts' balancing loss is over the whole batch, as one
  // process's: ep over the dp ranks (plain DDP or FSDP of an MoE model
  // balances each rank's tokens alone, and is not one process).
  check_matrix(kEp, {kOne, kFsdpEp, kFsdp4Ep, kCpEp}, kMoe);
}
