// What tests/train's cases share: a tiny model on a fixed text, one
// process's run of a config, and a layout's run against it (the losses and
// gradient norms per step and every parameter after the last step, each
// read whole from the run's checkpoint).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "harness.h"
#include "parallel/comm/init.h"
#include "runtime/hash_store.h"
#include "tests/parallel/ddp_test_util.h"
#include "train/config.h"
#include "train/train_checkpoint.h"
#include "train/trainer.h"

namespace spmd::train::testing {

// The message of the Error that `run` throws (FAIL when it returns).
template <class F>
std::string error_of(F&& run) {
  try {
    run();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("it did not throw");
  return "";
}

using namespace spmd::dist::testing;

// A text of pseudo-words, the same every time. Its path is the same in every
// process (a parent and the ranks it starts each name it in their configs),
// so each writer writes a file of its own and renames it over the shared
// name: the content is identical, and a reader never sees half a file.
inline std::string text_file() {
  static const std::string path = [] {
    const std::string p = "/tmp/spmd_test_trainer_text.txt";
    const std::string mine = p + "." + std::to_string(::getpid());
    const char* words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ",
                           "a ",   "lazy ",  "dog, ",  "and ", "then ",  "sleeps.\n"};
    {
      std::ofstream out(mine);
      uint64_t x = 12345;
      for (int i = 0; i < 6000; ++i) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        out << words[(x >> 33) % 12];
      }
    }
    std::filesystem::rename(mine, p);
    return p;
  }();
  return path;
}

// The metrics folder of a test's runs: one per test binary's process, since
// a run locks its folder (runtime/folder_lock.h) and ctest runs test
// binaries side by side. Fixed before main, so the ranks a test forks share
// it (their config must agree); removed when that process exits. The
// one-process reference runs that the ranks make at once each get a folder
// of their own under it (run_single_result).
inline const std::string kRunFolder = [] {
  static const pid_t maker = ::getpid();
  std::atexit([] {
    if (::getpid() == maker) {
      std::error_code ec;
      std::filesystem::remove_all("/tmp/spmd_test_trainer_runs_" + std::to_string(maker), ec);
    }
  });
  return "/tmp/spmd_test_trainer_runs_" + std::to_string(maker);
}();

inline train::TrainConfig base(int64_t steps, const std::vector<std::string>& layout) {
  std::vector<std::string> o = {"model.preset=\"custom\"",
                                "model.seq_len=16",
                                "model.n_layers=2",
                                "model.n_heads=4",
                                "model.d_model=32",
                                "training.global_batch=8",
                                "training.grad_clip=0.5",
                                "optimizer.lr=3e-3",
                                "optimizer.eps=1e-4",
                                "training.threads=1",
                                "metrics.run_folder=\"" + kRunFolder + "\"",
                                "data.path=\"" + text_file() + "\"",
                                "training.steps=" + std::to_string(steps)};
  o.insert(o.end(), layout.begin(), layout.end());
  return train::load_config("", o);
}

// One process's run of c: its result (losses and gradient norms per step).
inline train::TrainResult run_single_result(train::TrainConfig c) {
  if (c.metrics.run_folder == kRunFolder)  // beside the ranks' own references
    c.metrics.run_folder = kRunFolder + "/single_" + std::to_string(::getpid());
  dist::InitOptions init;
  init.store = std::make_shared<HashStore>();
  init.world_size = 1, init.rank = 0;
  auto world = dist::init_process_group(init);
  train::TrainResult result = train::run_training(c, world);
  dist::destroy_process_group(world);
  return result;
}

// Its losses.
inline std::vector<double> run_single(const train::TrainConfig& c) {
  return run_single_result(c).losses;
}

// The accumulation chunks of one process that match a layout's run: its
// training.microbatches, each cut again into the pipeline's microbatches.
// Each chunk's forward is one MoE routing, whose balancing loss is over that
// chunk's tokens (of every rank of the batch): the loss is not linear in the
// tokens, so only the same chunks give the same gradient.
inline std::string reference_chunks(const train::TrainConfig& c) {
  const ParallelConfig& p = c.parallel;
  const int64_t pipeline = p.pp > 1 ? (p.pp_microbatches == 0 ? p.pp : p.pp_microbatches) : 1;
  return "training.microbatches=" + std::to_string(c.training.microbatches * pipeline);
}

// got[s] within tol (relative) of want[s] at every step; `quantity` names
// what is compared ("loss", "grad_norm").
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double tol, const std::string& what,
                         const std::string& quantity = "loss") {
  expect(got.size() == want.size(), what, ": ", got.size(), " steps, not ", want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    const double rel = std::abs(got[s] - want[s]) / std::abs(want[s]);
    expect(rel <= tol, what, ": step ", s, " ", quantity, " ", got[s], " vs ", want[s]);
  }
}

// The whole model a checkpoint folder's latest step holds (any layout saved it).
inline NamedTensors whole_parameters(const TrainConfig& c, const std::string& folder) {
  auto model = std::make_shared<nn::Transformer>(transformer_config(c.model), c.training.seed + 1);
  optim::AdamW opt(model->parameters(), {});
  const auto state = load_latest_checkpoint(folder, model->named_parameters(), opt);
  expect(state.has_value(), folder, " holds no checkpoint");
  return model->named_parameters();
}

// A layout's run of 4 steps against one process's with the same model,
// data and seed: the loss and the gradient norm (before clipping) at every
// step, within 1e-5 relative, and every parameter after the last update,
// within 1e-5 of the largest magnitude of its tensor in the single
// process's, or of the initialization's scale (0.02) for a tensor that
// starts at zero and is still smaller (a bias, where the gradient's
// cancellations let AdamW magnify f32 rounding). The sums in another order
// move the parameters by 1e-7 of that; a wrong shard or a lost microbatch by
// 1e-3 and more; a gradient scaled wrongly shows in its norm even where
// clipping would rescale it away. `model`: overrides both runs share (the
// model, the training); the one process accumulates over the layout's
// chunks (reference_chunks). The parameters are read whole from each run's
// checkpoint.
inline void check_layout(int world_size, std::vector<std::string> layout, const std::string& name,
                         const std::vector<std::string>& model = {}) {
  namespace fs = std::filesystem;
  const std::string folder = "/tmp/spmd_test_train_params_" + std::to_string(::getpid());
  fs::remove_all(folder);
  layout.insert(layout.end(), model.begin(), model.end());
  layout.push_back("checkpoint.folder=\"" + folder + "\"");
  const TrainConfig c = base(4, layout);
  run_world(
      world_size,
      [&](dist::ProcessGroup& world) {
        const std::string single = folder + "_single" + std::to_string(world.rank());
        std::vector<std::string> one = model;
        one.push_back(reference_chunks(c));
        one.push_back("checkpoint.folder=\"" + single + "\"");
        fs::remove_all(single);
        const TrainResult want = run_single_result(base(4, one));
        const TrainResult got = run_training(c, dist::testing::borrow(world));
        const std::string who = str_cat(name, " (rank ", world.rank(), ")");
        expect_close(got.losses, want.losses, 1e-5, who);
        expect_close(got.grad_norms, want.grad_norms, 1e-5, who, "grad_norm");
        const NamedTensors a = whole_parameters(c, folder), b = whole_parameters(c, single);
        fs::remove_all(single);
        expect(a.size() == b.size(), who, ": ", a.size(), " parameters, not ", b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          const std::vector<float> x = ops::to_vector<float>(a[i].second),
                                   y = ops::to_vector<float>(b[i].second);
          float scale = 0.02f, diff = 0;
          for (size_t j = 0; j < y.size(); ++j) {
            scale = std::max(scale, std::abs(y[j]));
            diff = std::max(diff, std::abs(x[j] - y[j]));
          }
          expect(diff <= 1e-5f * scale, who, ": ", a[i].first, " differs by ", diff,
                 " (largest magnitude ", scale, ")");
        }
      },
      std::chrono::seconds(90));
  fs::remove_all(folder);
}

}  // namespace spmd::train::testing
