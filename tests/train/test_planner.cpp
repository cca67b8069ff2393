// spmd-plan's logic (train/planner.h) against numbers worked out by hand:
// the parameter count and the model states of a small Llama shape and of
// Llama 3.1's published shapes, each memory-plan term of a small layout,
// the sizes and layouts it reads, and each refusal's message. No model is
// built: the planner works from shapes alone.
#include <catch2/catch.hpp>

#include "runtime/error.h"
#include "tensor/cpu/allocator.h"
#include "train/config.h"
#include "train/planner.h"
#include "train/trained_model.h"

using namespace spmd;
using namespace spmd::train;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// A small Llama: vocabulary 256, C 64, 2 layers, 4 heads of 16, 2 kv heads
// (kv dim 32), FFN 128, T 32, untied head, global batch 8.
TrainConfig small_llama(std::vector<std::string> more = {}) {
  std::vector<std::string> o = {
      "model.preset=custom", "model.shape=llama",    "model.vocab_size=256",
      "model.d_model=64",    "model.n_layers=2",     "model.n_heads=4",
      "model.n_kv_heads=2",  "model.ffn_hidden=128", "model.seq_len=32"};
  o.insert(o.end(), more.begin(), more.end());
  return load_config("", o);
}

std::string refusal(const TrainConfig& c, const std::string& layout, int64_t devices) {
  try {
    check_planned_layout(with_layout(c, parse_layout(layout)), devices);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no refusal)";
}

}  // namespace

TEST_CASE("the model states of a small shape, by hand", "[planner]") {
  // Embedding 256 x 64 = 16,384 and the head as many; per block wq 64 x 64
  // = 4,096, wk and wv 64 x 32 = 2,048 each, wo 4,096 (12,288), the SwiGLU
  // MLP 3 x 64 x 128 = 24,576, two norms of 64: 36,992; two blocks 73,984;
  // the final norm 64. 16,384 + 16,384 + 73,984 + 64 = 106,816.
  const ModelStates s = model_states(small_llama());
  CHECK(s.parameters == 106816);
  CHECK(s.bf16_weights == 2 * 106816);  // 213,632
  CHECK(s.f32_master == 4 * 106816);    // 427,264
  CHECK(s.f32_gradients == 4 * 106816);
  CHECK(s.adam_moments == 8 * 106816);  // 854,528
  CHECK(s.total() == 1922688);          // 18 x 106,816
  CHECK(s.zero_total() == 1709056);     // ZeRO's 16 x 106,816
}

TEST_CASE("each memory term of a small FSDP layout, by hand", "[planner]") {
  // dp_shard 2: every parameter's rows are even, so each rank holds half.
  const TrainConfig c = small_llama();
  const MemoryPlan p = evaluate(c, parse_layout("dp_shard=2"), 2).plan;
  CHECK(p.parameters == 106816 / 2 * 4);  // 53,408 f32: 213,632
  CHECK(p.gradients == 213632);
  CHECK(p.optimizer == 427264);  // AdamW's two moments
  CHECK(p.ddp_buckets == 0);
  // Gathered, f32: the root (embedding, head, final norm: 32,832 floats,
  // 131,328 bytes) plus two blocks at once (2 x 36,992 x 4 = 295,936), for
  // the parameters and again for the gradients: 2 x 427,264.
  CHECK(p.gathered == 854528);
  // Activations: 8 sequences / 2 ranks = 4 rows of 32, 128 tokens. A block
  // saves, per token, 2C + (2C + 2) = 258 floats whole, q k v, the output
  // and the log-sum-exp C + 2 kv + C + H = 196, the SwiGLU's 4F = 512: 966.
  // The stage: its input C = 64, two blocks 1,932, the final norm's output
  // and statistics C + 4 = 68: 2,064 floats x 128 tokens x 4 B = 1,056,768.
  CHECK(p.activations == 1056768);
  CHECK(p.logits == 2 * 128 * 256 * 4);  // the (4, 32, 256) logits and their gradient
  CHECK(p.buffers == 2 * 32 * 16 * 4);   // RoPE's tables: layers x T x head dim
  CHECK(p.microbatch_rows == 4);
  // Full checkpointing: each block keeps its input (64) and one is recomputed
  // whole (966): 64 + 128 + 966 + 68 = 1,226 floats x 128 x 4 = 627,712.
  CHECK(evaluate(c, parse_layout("dp_shard=2,ac=full"), 2).plan.activations == 627712);
  // Two microbatches of gradient accumulation halve the tokens in flight.
  CHECK(evaluate(c, parse_layout("dp_shard=2,microbatches=2"), 2).plan.activations == 1056768 / 2);
}

TEST_CASE("Llama 3.1's presets have their published parameter counts", "[planner]") {
  // 405B: embedding and head 2 x 128,256 x 16,384 = 4,202,692,608; a block:
  // wq, wo 16,384^2 = 268,435,456 each, wk, wv 16,384 x 1,024 = 16,777,216
  // each, the MLP 3 x 16,384 x 53,248 = 2,617,245,696, norms 32,768:
  // 3,187,703,808; x 126 = 401,650,679,808; the final norm 16,384.
  const ModelStates s = model_states(load_config("", {"model.preset=llama3.1-405b"}));
  CHECK(s.parameters == 405853388800);
  CHECK(s.bf16_weights == 811706777600);  // 811.7 GB
  CHECK(s.f32_master == 1623413555200);   // 1,623.4 GB
  CHECK(s.f32_gradients == 1623413555200);
  CHECK(s.adam_moments == 3246827110400);  // 3,246.8 GB
  CHECK(s.total() == 7305360998400);       // 7,305.4 GB: 92 devices of 80 GB
  CHECK(format_gb(s.total()) == "7305.4 GB");
  CHECK(model_states(load_config("", {"model.preset=llama3.1-8b"})).parameters == 8030261248);
  CHECK(model_states(load_config("", {"model.preset=llama3.1-70b"})).parameters == 70553706496);
}

TEST_CASE("planning the Llama presets allocates no tensor", "[planner]") {
  // The presets are shapes: the plan of a 405B layout holds no storage, and
  // the allocator's peak does not move while it is worked out.
  cpu::reset_host_peak_memory();
  const size_t before = cpu::host_memory_stats().peak_allocated;
  for (const char* preset : {"llama3.1-8b", "llama3.1-70b", "llama3.1-405b"}) {
    const TrainConfig c = load_config("", {std::string("model.preset=") + preset});
    CHECK(model_states(c).parameters > 0);
    CHECK(evaluate(c, parse_layout("dp_shard=8"), 8).plan.peak() > 0);
  }
  CHECK(cpu::host_memory_stats().peak_allocated == before);
  // The one path that builds a model whole (spmd-generate, spmd-train
  // export) refuses the 405B before it allocates: 1.6 TB in f32, 4.9 TB with
  // AdamW's moments from a checkpoint.
  const TrainConfig big = load_config("", {"model.preset=llama3.1-405b"});
  CHECK_THROWS_AS(load_trained_model(big, "no-such.safetensors"), OutOfMemoryError);
  CHECK_THROWS_WITH(load_trained_model(big),
                    StartsWith("the whole model of model.preset \"llama3.1-405b\" (405853388800 "
                               "parameters in f32, and AdamW's two moments from the checkpoint) "
                               "needs about"));
  CHECK(cpu::host_memory_stats().peak_allocated == before);
}

TEST_CASE("Meta's 405B layout fits 80 GB per device on 16,384 devices", "[planner]") {
  const TrainConfig c = load_config("", {"model.preset=llama3.1-405b", "training.global_batch=2048",
                                         "training.mixed_precision=bf16"});
  const Layout meta = parse_layout("dp_shard=128,tp=8,pp=16,microbatches=16,ac=full");
  check_planned_layout(with_layout(c, meta), 16384);
  const MemoryPlan p = evaluate(c, meta, 16384).plan;
  CHECK(p.peak() < 80000000000ull);
  // Its model states are about 16 B x 405.9e9 / 16,384 devices = 396 MB,
  // a little more on a stage of 8 blocks than the average of 7.875.
  const uint64_t states = p.parameters + p.gradients + p.optimizer;
  CHECK(states > 396000000);
  CHECK(states < 460000000);
  CHECK(p.in_flight == 16);  // 1F1B's first stage holds every microbatch
}

TEST_CASE("sizes and layouts are read, or refused by flag and value", "[planner]") {
  CHECK(parse_bytes("--device-memory", "80GB") == 80000000000ull);
  CHECK(parse_bytes("--device-memory", "80GiB") == 80ull << 30);
  CHECK(parse_bytes("--device-memory", "1.5tb") == 1500000000000ull);
  CHECK(parse_bytes("--device-memory", "512MiB") == 512ull << 20);
  CHECK(parse_bytes("--device-memory", "4096") == 4096);
  const std::string not_a_size =
      "\" is not a size: give a number and a unit, 80GB (80 x 10^9 bytes) or 80GiB (80 x 2^30), "
      "MB, MiB, TB, TiB, or whole bytes alone";
  for (const char* bad : {"80XB", "", "GB", "1.5", "8..0GB", "-80GB"})
    CHECK_THROWS_WITH(parse_bytes("--device-memory", bad),
                      std::string("--device-memory \"") + bad + not_a_size);
  CHECK_THROWS_WITH(parse_bytes("--device-memory", "0GB"),
                    "--device-memory \"0GB\" must be at least 1 byte and less than 2^64");

  CHECK(parse_layout("dp_shard=4,tp=2,ac=full") == Layout{1, 4, 2, 1, 1, 0, "full"});
  CHECK_THROWS_WITH(parse_layout("tp=2,tq=2"),
                    "--layout \"tp=2,tq=2\": unknown key \"tq\" (keys: dp_replicate, dp_shard, "
                    "tp, pp, cp, microbatches, ac)");
  CHECK_THROWS_WITH(parse_layout("tp=0"),
                    "--layout \"tp=0\": tp must be a positive integer, got \"0\"");
  CHECK_THROWS_WITH(parse_layout("tp"), "--layout \"tp\": \"tp\" is not key=value");
  CHECK_THROWS_WITH(parse_layout("ac=some"),
                    "--layout \"ac=some\": ac must be none or full, got \"some\"");
}

TEST_CASE("a layout the devices or the model cannot take is refused with its reason", "[planner]") {
  const TrainConfig c = small_llama();
  CHECK(refusal(c, "dp_shard=2,tp=2", 8) ==
        "parallel: dp_replicate 1 x dp_shard 2 x cp 1 x tp 2 x pp 1 = 4 ranks, but the world "
        "has 8");
  CHECK(refusal(c, "tp=4", 4) == "parallel: tp 4 must divide model.n_heads 4 and the kv heads 2");
  CHECK(refusal(c, "cp=32", 32) ==
        "parallel: model.seq_len 32 is not divisible by 2 x cp = 64 (ring attention's "
        "load-balanced chunks, two per cp rank)");
  CHECK(refusal(c, "pp=2,microbatches=1", 2) ==
        "parallel: pp_microbatches 1 is fewer than the pipeline's 2 stages: each stage would "
        "idle for more of the step than it works (the bubble is (pp - 1) / (microbatches + pp "
        "- 1))");
  CHECK(refusal(c, "pp=2,microbatches=2", 2) == "(no refusal)");
}

TEST_CASE("the search keeps what fits, best first, and names the smallest need", "[planner]") {
  const TrainConfig c = small_llama();
  const Search roomy = search_layouts(c, {4, 8, 80000000000ull});
  REQUIRE(!roomy.fits.empty());
  CHECK(roomy.fits.size() == size_t(roomy.layouts));  // every valid layout fits 80 GB
  // The order of fits_before: no model split first, without recomputation.
  CHECK(roomy.fits[0].layout == Layout{1, 4, 1, 1, 1, 1, "none"});
  for (size_t i = 1; i < roomy.fits.size(); ++i)
    CHECK_FALSE(fits_before(roomy.fits[i], roomy.fits[i - 1]));

  const Cluster tiny{4, 8, 1000};
  const Search none = search_layouts(c, tiny);
  CHECK(none.fits.empty());
  REQUIRE(none.smallest);
  const uint64_t need = none.smallest->plan.peak();
  for (const Fit& f : roomy.fits) CHECK(f.plan.peak() >= need);
  CHECK(evaluate(c, none.smallest->layout, 4).plan.peak() == need);
  CHECK_THROWS_WITH(
      check_some_layout_fits(none, tiny),
      StartsWith("no layout of 4 devices fits 1.0 kB per device: the smallest "
                 "need is " +
                 format_gb(need) + " per device (" + describe(none.smallest->layout)));
}
