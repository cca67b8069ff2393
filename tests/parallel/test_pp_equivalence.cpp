// The core property of pipeline parallelism: the model cut into stages and
// fed microbatch by microbatch trains exactly as the whole model does. The
// Llama shape (untied head), trained k = 3 AdamW steps under GPipe, 1F1B,
// interleaved 1F1B (2 stages per rank) and ZB-H1 (split backward) on 2 and
// 4 ranks with 1, 2 and 4 microbatches (and 4 stages on one rank), gives the
// loss and the gradient norm of every step and every parameter of one
// process on the same data and seed, to 1e-5 relative in f32. On a
// pp x dp = 2 x 2 mesh the stages' copies are kept in step the two ways the
// trainer keeps them: DDP's average_gradients once per step, and FSDP, each
// stage's blocks and the stage itself sharded over dp and reduce-scattered
// once per step. Plus the cuts themselves, and the errors refused before
// anything runs.
#include <catch2/catch.hpp>
#include <cmath>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/ddp/gradient_average.h"
#include "parallel/device_mesh.h"
#include "parallel/fsdp/fully_shard.h"
#include "parallel/pipeline/executor.h"
#include "parallel/placement.h"
#include "tensor/ops.h"
#include "tests/skip.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kRowsPerReplica = 4;
constexpr uint64_t kSeed = 21;

// 4 blocks, so 2 and 4 stages both cut between blocks; 8 for 4 ranks x 2.
nn::TransformerConfig config(int64_t layers = 4) {
  auto c = nn::TransformerConfig::llama(/*V=*/64, /*T=*/8, layers, /*heads=*/4, /*kv=*/2,
                                        /*C=*/32);
  return c;
}

struct Batch {
  Tensor x, y;
};
Batch batch(int step, int64_t rows, Device device) {
  Generator gen(3000 + uint64_t(step));
  const auto c = config();
  return {
      ops::to(ops::randint(0, c.vocab_size, {rows, c.max_seq_len}, {DType::kI64}, &gen), device),
      ops::to(ops::randint(0, c.vocab_size, {rows, c.max_seq_len}, {DType::kI64}, &gen), device)};
}

// eps 1e-4, near the gradients' own scale: the update then depends on the
// gradient's size (a uniformly mis-scaled gradient changes it), and an
// element whose gradient is ~0 is not driven by rounding alone (AdamW's
// default 1e-8 makes m / sqrt(v) a sign there, which one process and a
// pipeline, summing the microbatches in another order, may disagree on).
optim::AdamWOptions adamw() { return {.lr = 3e-3, .eps = 1e-4, .weight_decay = 0.1}; }

struct Run {
  std::vector<double> losses, grad_norms;
  std::shared_ptr<nn::Transformer> model;
};

Run train_reference(int dp, Device device, int64_t layers) {
  Run run{{}, {}, std::make_shared<nn::Transformer>(config(layers), kSeed)};
  run.model->to(device);
  optim::AdamW opt(run.model->parameters(), adamw());
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = batch(step, dp * kRowsPerReplica, device);
    const Tensor loss = cross_entropy((*run.model)(b.x), b.y);
    run.losses.push_back(loss.item<double>());
    opt.zero_grad();
    backward(loss);
    run.grad_norms.push_back(grad_norm(run.model->parameters()));
    opt.step();
  }
  return run;
}

// How a stage's copies on the dp axis agree at each step.
enum class Replicas {
  kDdp,   // DDP's average_gradients over dp, once per step (the trainer's pp x ddp)
  kFsdp,  // each stage sharded over dp (the trainer's pp x fsdp)
};

// FSDP per stage, as the trainer's pp x fsdp does it: each block of the
// stage a unit, the stage itself the root over them where it holds the
// embeddings or the norm and head. The backwards of the microbatches only
// accumulate full gradients (sync off); reduce_gradients() reduce-scatters
// them once per step. Under a split backward (ZB-H1) the weight passes
// accumulate into the gathered parameters after their microbatch's
// backward, so the units stay gathered for the whole step.
std::vector<std::shared_ptr<FsdpModule>> shard_stages(std::vector<pp::TransformerStage>& stages,
                                                      const DeviceMesh& mesh, bool split_backward) {
  FsdpOptions o;
  o.shard_axis = "dp_shard";
  std::vector<std::shared_ptr<FsdpModule>> units;
  for (pp::TransformerStage& st : stages) {
    for (int64_t i = st.first_layer(); i < st.end_layer(); ++i)
      units.push_back(fully_shard(st.model().layers->at(size_t(i)), mesh, o));
    if (st.is_first() || st.is_last()) units.push_back(fully_shard(st.as_module(), mesh, o));
  }
  for (const auto& u : units) {
    u->set_requires_gradient_sync(false, /*recurse=*/false);
    if (!split_backward) continue;
    u->set_reshard_after_forward(false);
    u->set_reshard_after_backward(false, /*recurse=*/false);
  }
  return units;
}

// The step's values that stage 0's rank cannot see: the loss (the last
// stage's, NaN elsewhere) and the gradient norm over every stage.
double on_every_stage(ProcessGroup& pp_group, double mine) {
  Tensor t = ops::full({1}, mine, {DType::kF64});
  pp_group.wait(pp_group.all_reduce(t, ReduceOp::kSum), OpType::kAllReduce);
  return t.item<double>();
}

void expect_close(double got, double want, const std::string& what, const char* name, int step) {
  const double rel = std::abs(got - want) / std::abs(want);
  expect(rel <= 1e-5, what, ": step ", step, " ", name, " ", got, " vs ", want);
}

// pp x dp ranks (pp innermost): each replica's stages on its pp line, v
// stages per rank.
void check_pipeline(ProcessGroup& world, int dp, pp::ScheduleKind kind, int microbatches,
                    Device device = Device::cpu(), int v = 1, int64_t layers = 4,
                    Replicas replicas = Replicas::kDdp) {
  const int pp_size = world.size() / dp;
  DeviceMesh mesh(borrow(world), {dp, pp_size}, {"dp", "pp"});
  const bool fsdp = replicas == Replicas::kFsdp;
  const std::string what =
      str_cat(pp::schedule_name(kind), " on ", pp_size, " ranks x ", v, " stages x dp ", dp,
              fsdp ? " (FSDP)" : "", ", ", microbatches, " microbatches (rank ", world.rank(), ")");
  const Run want = train_reference(dp, device, layers);
  auto model = std::make_shared<nn::Transformer>(config(layers), kSeed);
  model->to(device);
  std::vector<pp::TransformerStage> stages =
      pp::split_model_interleaved(model, int(mesh.coordinate("pp")), pp_size, v);
  std::vector<std::shared_ptr<FsdpModule>> units;
  if (fsdp) {
    const DeviceMesh shard_mesh(mesh.group_ptr("dp"), {dp}, {"dp_shard"});
    units = shard_stages(stages, shard_mesh, pp::splits_backward(kind));
  }
  std::vector<pp::TransformerStage*> mine;
  std::vector<Tensor> params;  // under FSDP, this rank's shards
  std::vector<std::pair<std::string, Tensor>> named;
  for (pp::TransformerStage& st : stages) {
    mine.push_back(&st);
    for (auto& np : st.named_parameters()) named.push_back(np), params.push_back(np.second);
  }
  const bool last = stages.back().is_last();
  pp::PipelineExecutor executor =
      v == 1 ? pp::PipelineExecutor(stages[0], mesh.group("pp"), kind, microbatches)
             : pp::PipelineExecutor(mine, mesh.group("pp"), kind, microbatches);
  optim::AdamW opt(params, adamw());
  const int64_t first_row = mesh.coordinate("dp") * kRowsPerReplica;
  ProcessGroup& dp_group = mesh.group("dp");
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = batch(step, dp * kRowsPerReplica, device);
    opt.zero_grad();
    double loss = executor.step(ops::narrow(b.x, 0, first_row, kRowsPerReplica),
                                ops::narrow(b.y, 0, first_row, kRowsPerReplica));
    if (fsdp) {
      std::vector<FsdpModule*> raw;
      for (const auto& u : units) raw.push_back(u.get());
      FsdpModule::reduce_gradients(raw);
    } else {
      average_gradients(params, &dp_group);
    }
    // Every replica's loss, averaged (the dp group's ranks hold the same stage).
    Tensor l = ops::full({1}, last ? loss : 0.0, {DType::kF64});
    dp_group.wait(dp_group.all_reduce(l, ReduceOp::kAvg), OpType::kAllReduce);
    if (!last) expect(std::isnan(loss), what, ": a stage before the last reported a loss");
    const double step_loss = on_every_stage(mesh.group("pp"), l.item<double>());
    const double mine_norm = grad_norm(params);  // over the shards' dp ranks, under FSDP
    const double norm = std::sqrt(on_every_stage(mesh.group("pp"), mine_norm * mine_norm));
    opt.step();
    expect_close(step_loss, want.losses[size_t(step)], what, "loss", step);
    expect_close(norm, want.grad_norms[size_t(step)], what, "gradient norm", step);
  }
  // Every parameter this stage trained (gathered whole under FSDP), against
  // the same name in the reference.
  const auto reference = want.model->named_parameters();
  int compared = 0;
  for (auto& [name, p] : named) {
    for (auto& [ref_name, ref] : reference) {
      if (ref_name != name) continue;
      const double rel = relative_difference(fsdp ? full_tensor(p) : p, ref);
      expect(rel <= 1e-5, what, ": parameter ", name, " differs by ", rel, " (relative)");
      ++compared;
    }
  }
  expect(compared == int(named.size()) && compared > 0, what, ": compared ", compared,
         " parameters");
}

}  // namespace

TEST_CASE("the cuts: even by default, at split points when given", "[pp]") {
  CHECK(pp::split_layers(8, 4) == std::vector<int64_t>{2, 4, 6});
  CHECK(pp::split_layers(6, 4) == std::vector<int64_t>{2, 4, 5});  // the first stages one more
  CHECK(pp::split_layers(4, 1).empty());
  CHECK(pp::split_layers(8, 2, {"layers.3"}) == std::vector<int64_t>{3});
  // Interleaved, the stages that take one more block are the middle ones:
  // 6 blocks on 2 x 2 stages as 1, 2, 2, 1; 10 as 2, 3, 3, 2; one extra on
  // rank 0's middle stage (1, 1, 2, 1); three starting at stage 0 (rank 0
  // takes two of them).
  CHECK(pp::split_layers_interleaved(6, 2, 2) == std::vector<int64_t>{1, 3, 5});
  CHECK(pp::split_layers_interleaved(10, 2, 2) == std::vector<int64_t>{2, 5, 8});
  CHECK(pp::split_layers_interleaved(5, 2, 2) == std::vector<int64_t>{1, 2, 4});
  CHECK(pp::split_layers_interleaved(7, 2, 2) == std::vector<int64_t>{2, 4, 6});
  CHECK(pp::split_layers_interleaved(8, 2, 2) == pp::split_layers(8, 4));  // they divide
  CHECK(pp::split_layers_interleaved(7, 2, 1) == pp::split_layers(7, 2));  // one stage a rank
  {
    auto six = std::make_shared<nn::Transformer>(config(6), 1);
    const std::vector<pp::TransformerStage> r0 = pp::split_model_interleaved(six, 0, 2, 2);
    CHECK(r0[0].end_layer() == 1);    // stage 0: block 0
    CHECK(r0[1].first_layer() == 3);  // stage 2: blocks 3, 4
    CHECK(r0[1].end_layer() == 5);
  }
  auto model = std::make_shared<nn::Transformer>(config(), 1);
  // The stages in a row are the model: their parameters are the model's, each once.
  size_t total = 0;
  for (int s = 0; s < 4; ++s) total += pp::split_model(model, s, 4).named_parameters().size();
  CHECK(total == model->named_parameters().size());
  CHECK(pp::split_model(model, 0, 2).named_parameters().front().first == "tok_embeddings.weight");
  CHECK(pp::split_model(model, 1, 2).named_parameters().back().first == "output.weight");
}

TEST_CASE("bad cuts and batches are refused before anything runs", "[pp][errors]") {
  CHECK_THROWS_WITH(pp::split_layers(4, 5), Catch::Contains("5 stages for a model of 4 blocks"));
  CHECK_THROWS_WITH(pp::split_layers(4, 2, {"layers.9"}),
                    Catch::Contains("\"layers.9\" names no block"));
  CHECK_THROWS_WITH(pp::split_layers(4, 2, {"norm"}), Catch::Contains("\"norm\" names no block"));
  CHECK_THROWS_WITH(pp::split_layers(8, 3, {"layers.4", "layers.2"}),
                    Catch::Contains("\"layers.2\" does not come after"));
  auto tied = std::make_shared<nn::Transformer>(nn::TransformerConfig::gpt2(64, 8, 4, 4, 32), 1);
  CHECK_THROWS_WITH(pp::split_model(tied, 0, 2), Catch::Contains("tie_embeddings"));
  run_world(2, [](ProcessGroup& world) {
    auto model = std::make_shared<nn::Transformer>(config(), 1);
    pp::TransformerStage stage = pp::split_model(model, world.rank(), 2);
    pp::PipelineExecutor executor(stage, world, pp::ScheduleKind::k1F1B, 3);
    world.reset_stats();
    const Tensor ids = ops::zeros({4, 8}, {DType::kI64});
    bool refused = false;
    try {
      executor.step(ids, ids);
    } catch (const InvalidArgument& e) {
      refused = std::string(e.what()).find("4 sequences does not divide into 3 microbatches") !=
                std::string::npos;
    }
    expect(refused && world.stats().total_bytes() == 0, "an indivisible batch was not refused");
  });
}

TEST_CASE("neighbours that disagree on the activations say so, naming both stages",
          "[pp][errors]") {
  run_world(2, [](ProcessGroup& world) {
    // Rank 1 built a wider model than rank 0: its stage expects (b, T, 48).
    auto c = config();
    if (world.rank() == 1) c.d_model = 48, c.n_heads = 4, c.n_kv_heads = 2;
    auto model = std::make_shared<nn::Transformer>(c, 1);
    pp::TransformerStage stage = pp::split_model(model, world.rank(), 2);
    pp::PipelineExecutor executor(stage, world, pp::ScheduleKind::kGPipe, 2);
    const Tensor ids = ops::zeros({4, 8}, {DType::kI64});
    std::string message;
    try {
      executor.step(ids, ids);
    } catch (const InvalidArgument& e) {
      message = e.what();
    }
    expect(message.find("stage 0 sends activations f32 (2, 8, 32) for each microbatch, but stage "
                        "1 expects f32 (2, 8, 48)") != std::string::npos,
           "rank ", world.rank(), ": ", message);
  });
}

TEST_CASE("GPipe and 1F1B on 2 stages train as one process", "[pp][equivalence]") {
  run_world(2, [](ProcessGroup& world) {
    for (auto kind : {pp::ScheduleKind::kGPipe, pp::ScheduleKind::k1F1B})
      for (int m : {1, 2, 4}) check_pipeline(world, 1, kind, m);
  });
}

TEST_CASE("GPipe and 1F1B on 4 stages train as one process", "[pp][equivalence]") {
  run_world(4, [](ProcessGroup& world) {
    for (auto kind : {pp::ScheduleKind::kGPipe, pp::ScheduleKind::k1F1B})
      check_pipeline(world, 1, kind, 4);
  });
}

TEST_CASE("interleaved 1F1B and ZB-H1 on 2 ranks train as one process", "[pp][equivalence]") {
  run_world(2, [](ProcessGroup& world) {
    for (int m : {2, 4})  // 4 stages, 0 and 2 on rank 0: the activations wrap round to it
      check_pipeline(world, 1, pp::ScheduleKind::kInterleaved1F1B, m, Device::cpu(), 2);
    for (int m : {1, 2, 4}) check_pipeline(world, 1, pp::ScheduleKind::kZeroBubbleH1, m);
  });
}

TEST_CASE("interleaved 1F1B and ZB-H1 on 4 ranks train as one process", "[pp][equivalence]") {
  run_world(4, [](ProcessGroup& world) {
    check_pipeline(world, 1, pp::ScheduleKind::kInterleaved1F1B, 4, Device::cpu(), 2, 8);
    check_pipeline(world, 1, pp::ScheduleKind::kZeroBubbleH1, 4);
  });
}

TEST_CASE("interleaving refuses a microbatch count and more stages than blocks", "[pp][errors]") {
  auto model = std::make_shared<nn::Transformer>(config(), 1);
  CHECK_THROWS_WITH(pp::split_model_interleaved(model, 0, 4, 2),
                    Catch::Contains("8 stages for a model of 4 blocks"));
  CHECK_THROWS_WITH(pp::split_model_interleaved(model, 0, 2, 0),
                    Catch::Contains("0 stages per rank"));
  run_world(2, [](ProcessGroup& world) {
    auto m = std::make_shared<nn::Transformer>(config(), 1);
    std::vector<pp::TransformerStage> stages = pp::split_model_interleaved(m, world.rank(), 2, 2);
    std::vector<pp::TransformerStage*> mine{&stages[0], &stages[1]};
    std::string message;
    try {
      pp::PipelineExecutor executor(mine, world, pp::ScheduleKind::kInterleaved1F1B, 3);
    } catch (const InvalidArgument& e) {
      message = e.what();
    }
    expect(message.find("3 microbatches is not a multiple of the 2 ranks") != std::string::npos,
           "rank ", world.rank(), ": ", message);
    message.clear();
    try {  // the stages in the wrong order
      pp::PipelineExecutor executor({&stages[1], &stages[0]}, world,
                                    pp::ScheduleKind::kInterleaved1F1B, 2);
    } catch (const InvalidArgument& e) {
      message = e.what();
    }
    expect(message.find("rank r must own stages r, r + p") != std::string::npos, "rank ",
           world.rank(), ": ", message);
  });
}

TEST_CASE("pp x dp = 2 x 2 through DDP trains as one process on both batches",
          "[pp][dp][equivalence]") {
  run_world(4, [](ProcessGroup& world) {
    check_pipeline(world, 2, pp::ScheduleKind::k1F1B, 2);
    check_pipeline(world, 2, pp::ScheduleKind::kInterleaved1F1B, 2, Device::cpu(), 2);
    check_pipeline(world, 2, pp::ScheduleKind::kZeroBubbleH1, 2);
  });
}

TEST_CASE("pp x dp = 2 x 2 through FSDP trains as one process on both batches",
          "[pp][fsdp][equivalence]") {
  run_world(4, [](ProcessGroup& world) {
    const auto fsdp = Replicas::kFsdp;
    check_pipeline(world, 2, pp::ScheduleKind::k1F1B, 2, Device::cpu(), 1, 4, fsdp);
    check_pipeline(world, 2, pp::ScheduleKind::kInterleaved1F1B, 2, Device::cpu(), 2, 4, fsdp);
    check_pipeline(world, 2, pp::ScheduleKind::kZeroBubbleH1, 2, Device::cpu(), 1, 4, fsdp);
  });
}

TEST_CASE("one rank holding every stage passes the activations to itself", "[pp][equivalence]") {
  run_world(1, [](ProcessGroup& world) {  // interleaved over 1 rank: stages 0..3 local
    check_pipeline(world, 1, pp::ScheduleKind::kInterleaved1F1B, 2, Device::cpu(), 4);
  });
}

// On a GPU: two stages share it over the TCP backend (NCCL refuses two ranks
// on one device), the reference runs on the same GPU.
TEST_CASE("1F1B, interleaved and ZB-H1 on 2 ranks sharing one GPU train as one process on it",
          "[pp][gpu][equivalence]") {
  if (!have_gpu()) SPMD_SKIP_WITHOUT_GPU("no GPU: skipping");
  run_world(2, [](ProcessGroup& world) {
    check_pipeline(world, 1, pp::ScheduleKind::k1F1B, 2, Device::cuda(0));
    check_pipeline(world, 1, pp::ScheduleKind::kInterleaved1F1B, 2, Device::cuda(0), 2);
    check_pipeline(world, 1, pp::ScheduleKind::kZeroBubbleH1, 2, Device::cuda(0));
  });
}
