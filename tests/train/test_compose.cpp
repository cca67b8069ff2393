// spmd-train's compositions of pipeline stages with FSDP, context and
// sequence parallelism, of HSDP with context parallelism, and of expert
// parallelism with FSDP and context parallelism, against one process: the
// same model, data and seed trained under each layout gives the single
// process's loss at every step and its parameters after the last, to 1e-5
// relative (trainer_test_util.h).
#include <catch2/catch.hpp>

#include "tests/train/trainer_test_util.h"
#include "train/parallelize.h"

using namespace spmd;
using namespace spmd::train::testing;

namespace {

// 4 blocks, untied (a pipeline's head and embedding live on different stages).
const std::vector<std::string> kUntied = {"model.tie_embeddings=false", "model.n_layers=4"};

}  // namespace

TEST_CASE("pipeline stages FSDP-sharded over dp_shard train as one process",
          "[train][pp][fsdp][equivalence]") {
  check_layout(4, {"parallel.pp=2", "parallel.dp_shard=2", "training.microbatches=2"},
               "pp 2 x fsdp 2, 1f1b, 2 accumulation chunks", kUntied);
  check_layout(4,
               {"parallel.pp=2", "parallel.dp_shard=2", "parallel.pp_schedule=\"interleaved\"",
                "parallel.pp_stages_per_rank=2", "parallel.pp_microbatches=4"},
               "pp 2 x fsdp 2, interleaved (middle stages: blocks only)", kUntied);
  check_layout(4,
               {"parallel.pp=2", "parallel.dp_shard=2", "parallel.pp_schedule=\"gpipe\"",
                "training.activation_checkpointing=\"full\""},
               "pp 2 x fsdp 2, gpipe, activation checkpointing", kUntied);
  check_layout(8, {"parallel.pp=2", "parallel.dp_replicate=2", "parallel.dp_shard=2"},
               "pp 2 x hsdp 2 x 2 on 8 ranks", kUntied);
  check_layout(8, {"parallel.pp=2", "parallel.dp_shard=2", "parallel.tp=2"},
               "pp 2 x fsdp 2 x tp 2 on 8 ranks", kUntied);
}

TEST_CASE("pipeline stages FSDP-sharded under zbh1 train as one process",
          "[train][pp][fsdp][zbh1][equivalence]") {
  // The weight passes run after their microbatches' backwards: the units
  // stay gathered, and reduce once at the step's end.
  check_layout(4,
               {"parallel.pp=2", "parallel.dp_shard=2", "parallel.pp_schedule=\"zbh1\"",
                "parallel.pp_microbatches=4"},
               "pp 2 x fsdp 2, zbh1 over 4 microbatches", kUntied);
  check_layout(4,
               {"parallel.pp=2", "parallel.dp_shard=2", "parallel.pp_schedule=\"zbh1\"",
                "training.microbatches=2"},
               "pp 2 x fsdp 2, zbh1, 2 accumulation chunks", kUntied);
  check_layout(4,
               {"parallel.pp=2", "parallel.dp_shard=2", "parallel.pp_schedule=\"zbh1\"",
                "training.activation_checkpointing=\"full\""},
               "pp 2 x fsdp 2, zbh1, activation checkpointing", kUntied);
  check_layout(8,
               {"parallel.pp=2", "parallel.dp_replicate=2", "parallel.dp_shard=2",
                "parallel.pp_schedule=\"zbh1\""},
               "pp 2 x hsdp 2 x 2, zbh1 on 8 ranks", kUntied);
}

TEST_CASE("HSDP with context parallelism trains as one process", "[train][hsdp][cp][equivalence]") {
  // The shards over dp_shard x cp, replicated over dp_replicate.
  check_layout(8, {"parallel.dp_replicate=2", "parallel.dp_shard=2", "parallel.cp=2"},
               "hsdp 2 x 2 x cp 2 on 8 ranks");
  check_layout(8,
               {"parallel.dp_replicate=2", "parallel.dp_shard=2", "parallel.cp=2", "parallel.ep=4",
                "training.microbatches=2"},
               "hsdp 2 x 2 x cp 2, ep 4, 2 accumulation chunks",
               {"model.n_experts=4", "model.moe_top_k=2"});
}

TEST_CASE("FSDP stages reduce-scatter each unit once per step, not once per microbatch",
          "[train][pp][fsdp]") {
  for (const char* schedule : {"1f1b", "zbh1"}) {
    std::vector<std::string> o = {"parallel.pp=2", "parallel.dp_shard=2",
                                  "parallel.pp_microbatches=4",
                                  str_cat("parallel.pp_schedule=\"", schedule, "\"")};
    o.insert(o.end(), kUntied.begin(), kUntied.end());
    const train::TrainConfig c = base(1, o);
    run_world(
        4,
        [&](dist::ProcessGroup& world) {
          dist::DeviceMesh mesh = train::build_mesh(dist::testing::borrow(world), c.parallel);
          auto model = std::make_shared<nn::Transformer>(train::transformer_config(c.model),
                                                         c.training.seed);
          train::Parallelized par = train::parallelize(model, mesh, c, Device::cpu());
          Generator gen(7);
          const Tensor x =
              ops::randint(0, c.model.vocab_size, {4, c.model.seq_len}, {DType::kI64}, &gen);
          const auto reduces = [&] {  // in any of the groups the layout uses
            uint64_t calls = 0;
            for (const auto& g : par.comm_groups())
              calls += g->stats()[dist::OpType::kReduceScatter].calls;
            return calls;
          };
          const uint64_t before = reduces();
          par.forward_backward(x, x);
          expect(reduces() == before, schedule, ": ", reduces() - before,
                 " reduce-scatters during the 4 microbatches");
          // Each rank's stage: 2 of the 4 blocks, and the root over the
          // embeddings (first stage) or the norm and head (last).
          const uint64_t units = 3;
          par.sync_gradients();
          expect(reduces() - before == units, schedule, ": ", reduces() - before,
                 " reduce-scatters for ", units, " units");
        },
        std::chrono::seconds(60));
  }
}

TEST_CASE("pipeline stages on cp-local sequences train as one process",
          "[train][pp][cp][equivalence]") {
  check_layout(4, {"parallel.pp=2", "parallel.cp=2", "training.microbatches=2"},
               "pp 2 x cp 2, 1f1b, 2 accumulation chunks", kUntied);
  check_layout(8, {"parallel.pp=2", "parallel.cp=2", "parallel.dp_shard=2"},
               "pp 2 x fsdp 2 x cp 2 on 8 ranks (shards over dp_shard x cp)", kUntied);
}

TEST_CASE("pipeline stages trading sequence-parallel activations train as one process",
          "[train][pp][tp][equivalence]") {
  check_layout(4,
               {"parallel.pp=2", "parallel.tp=2", "parallel.sequence_parallel=true",
                "training.microbatches=2"},
               "pp 2 x tp 2 + sp, 1f1b, 2 accumulation chunks", kUntied);
}

TEST_CASE("experts split over ep ranks of dp_shard, the rest FSDP-sharded, train as one process",
          "[train][ep][fsdp][equivalence]") {
  const std::vector<std::string> moe = {"model.n_experts=4", "model.moe_top_k=2"};
  check_layout(2, {"parallel.dp_shard=2", "parallel.ep=2"}, "fsdp 2, ep 2", moe);
  check_layout(4, {"parallel.dp_shard=4", "parallel.ep=2"},
               "fsdp 4, ep 2 (experts replicated over 2)", moe);
  // Each chunk's balancing loss is over that chunk's tokens of all 4 ranks,
  // as one process's over the same 2 chunks (reference_chunks).
  std::vector<std::string> every_other = moe;
  every_other.push_back("model.moe_every=2");
  check_layout(4, {"parallel.dp_shard=4", "parallel.ep=2", "training.microbatches=2"},
               "fsdp 4, ep 2, MoE every other block, 2 accumulation chunks", every_other);
}

TEST_CASE("experts split over the ranks of dp x cp train as one process",
          "[train][ep][cp][equivalence]") {
  const std::vector<std::string> moe = {"model.n_experts=4", "model.moe_top_k=2"};
  check_layout(2, {"parallel.cp=2", "parallel.ep=2"}, "cp 2, ep 2 (the cp ranks' experts)", moe);
  check_layout(4, {"parallel.dp_replicate=2", "parallel.cp=2", "parallel.ep=4"},
               "ddp 2 x cp 2, ep 4", moe);
  check_layout(4, {"parallel.dp_shard=2", "parallel.cp=2", "parallel.ep=2"}, "fsdp 2 x cp 2, ep 2",
               moe);
}

TEST_CASE("experts split over dp ranks beside tensor-parallel dense blocks train as one process",
          "[train][ep][tp][equivalence]") {
  // tp splits the dense blocks; each MoE block is whole on every tp rank.
  const std::vector<std::string> moe = {"model.n_experts=4", "model.moe_top_k=2",
                                        "model.moe_every=2"};
  check_layout(4, {"parallel.dp_replicate=2", "parallel.tp=2", "parallel.ep=2"},
               "ddp 2 x tp 2, ep 2", moe);
  check_layout(4, {"parallel.dp_shard=2", "parallel.tp=2", "parallel.ep=2"}, "fsdp 2 x tp 2, ep 2",
               moe);
}

TEST_CASE("experts under tp with sequence parallel, or with no dense block, are refused",
          "[train][ep][tp]") {
  const auto error = [](const std::vector<std::string>& o) {
    try {
      train::check_layout(base(1, o), 2);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error({"model.n_experts=4", "model.moe_every=2", "parallel.tp=2",
               "parallel.sequence_parallel=true"}) ==
        "parallel: tp 2 with sequence_parallel true and model.n_experts 4: an MoE block would "
        "see each tp rank's share of the sequence and its gradients would not be summed over "
        "tp; set sequence_parallel to false");
  CHECK(error({"model.n_experts=4", "parallel.tp=2"}) ==
        "parallel: tp 2 with model.moe_every 1 of model.n_layers 2: every block is an MoE, and "
        "tensor parallelism splits only the dense MLPs (set model.moe_every to 2 or more, or tp "
        "to 1)");
}

TEST_CASE("experts in pipeline stages add their balancing loss and train as one process",
          "[train][pp][moe][equivalence]") {
  // Each pipeline microbatch's balancing loss is over its own tokens, as one
  // process's accumulating over the same chunks (reference_chunks).
  const std::vector<std::string> moe = {"model.n_experts=4", "model.moe_top_k=2",
                                        "model.tie_embeddings=false", "model.n_layers=4"};
  check_layout(2, {"parallel.pp=2", "parallel.pp_microbatches=1"},
               "pp 2 on experts, the stages' balancing losses", moe);
  check_layout(2, {"parallel.pp=2", "parallel.pp_schedule=\"zbh1\"", "parallel.pp_microbatches=1"},
               "pp 2 on experts, zbh1 (the balancing loss through the split backward)", moe);
  check_layout(2, {"parallel.pp=2"}, "pp 2 on experts over 2 microbatches (one process: 2 chunks)",
               moe);
}

TEST_CASE("experts split over ep ranks inside pipeline stages train as one process",
          "[train][pp][ep][equivalence]") {
  const std::vector<std::string> moe = {"model.n_experts=4", "model.moe_top_k=2",
                                        "model.tie_embeddings=false", "model.n_layers=4"};
  check_layout(
      4,
      {"parallel.pp=2", "parallel.dp_replicate=2", "parallel.ep=2", "parallel.pp_microbatches=1"},
      "pp 2 x ddp 2, ep 2", moe);
  check_layout(4,
               {"parallel.pp=2", "parallel.dp_shard=2", "parallel.ep=2", "training.microbatches=2"},
               "pp 2 x fsdp 2, ep 2, 2 pipeline microbatches x 2 accumulation chunks "
               "(one process: 4 chunks)",
               moe);
}

TEST_CASE("experts split within dp_shard under HSDP train as one process",
          "[train][ep][hsdp][equivalence]") {
  check_layout(4, {"parallel.dp_replicate=2", "parallel.dp_shard=2", "parallel.ep=2"},
               "hsdp 2 x 2, ep 2", {"model.n_experts=4", "model.moe_top_k=2"});
}

TEST_CASE("ep under FSDP that does not divide dp_shard x cp is refused, naming the dims",
          "[train][ep][fsdp]") {
  const train::TrainConfig c = base(
      1, {"parallel.dp_replicate=2", "parallel.dp_shard=2", "parallel.ep=4", "model.n_experts=4"});
  CHECK_THROWS_WITH(train::check_supported(c.parallel),
                    "parallel: ep 4 with dp_shard 2 x cp 1: under FSDP the expert ranks come from "
                    "dp_shard x cp, so ep must divide it");
}
