// spmd-plan's logic (train/planner.h) against numbers worked out by hand:
// the parameter count and the model states of a small Llama shape and of
// Llama 3.1's published shapes, each memory-plan term of a small layout,
// the sizes and layouts it reads, and each refusal's message. No model is
// built: the planner works from shapes alone.
#include <catch2/catch.hpp>

#include "runtime/error.h"
#include "tensor/cpu/allocator.h"
#include "tests/train/planner_test_util.h"
#include "train/config.h"
#include "train/planner.h"
#include "train/trained_model.h"

using namespace spmd;
using namespace spmd::train;
using namespace spmd::train::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// A cluster of `devices`, 8 a node, with memory and no step time.
Cluster memory_cluster(int64_t devices, uint64_t memory) {
  Cluster c;
  c.devices = devices, c.device_memory = memory;
  return c;
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
                    "tp, pp, cp, ep, microbatches, ac, schedule, v)");
  const Layout interleaved = parse_layout("pp=2,schedule=interleaved,v=2");
  CHECK(interleaved == Layout{1, 1, 1, 2, 1, 0, "none", "interleaved", 2});
  CHECK(describe(interleaved) == "pp 2 interleaved x 2 · 2 microbatches · ac none");
  CHECK(with_layout(small_llama(), interleaved).parallel.pp_stages_per_rank == 2);
  CHECK_THROWS_WITH(parse_layout("schedule=fast"),
                    "--layout \"schedule=fast\": schedule must be gpipe, 1f1b, interleaved or "
                    "zbh1, got \"fast\"");
  CHECK_THROWS_WITH(parse_layout("tp=0"),
                    "--layout \"tp=0\": tp must be a positive integer, got \"0\"");
  CHECK_THROWS_WITH(parse_layout("tp"), "--layout \"tp\": \"tp\" is not key=value");
  CHECK_THROWS_WITH(
      parse_layout("ac=some"),
      "--layout \"ac=some\": ac must be none, full, op (selective, the products kept) or a "
      "positive integer k (selective, every k-th block), got \"some\"");
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
  const Search roomy = search_layouts(c, memory_cluster(4, 80000000000ull));
  REQUIRE(!roomy.fits.empty());
  CHECK(roomy.fits.size() == size_t(roomy.layouts));  // every valid layout fits 80 GB
  // The order of fits_before: no model split first, without recomputation.
  CHECK(roomy.fits[0].layout == Layout{1, 4, 1, 1, 1, 1, "none"});
  for (size_t i = 1; i < roomy.fits.size(); ++i)
    CHECK_FALSE(fits_before(roomy.fits[i], roomy.fits[i - 1]));

  const Cluster tiny = memory_cluster(4, 1000);
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

// --- Step time ----------------------------------------------------------------------------

namespace {

double seconds_of(const StepTime& t, const std::string& op) {
  double s = 0;
  for (const CommTerm& c : t.comm)
    if (c.op == op) s += c.seconds;
  return s;
}

}  // namespace

TEST_CASE("compute: FLOPs per token over the achievable rate, by hand", "[planner][time]") {
  // The small Llama: a block's weights C(C + 2 kv) + C^2 + 3 C F = 8,192 +
  // 4,096 + 24,576 = 36,864; its forward per token 2 x 36,864 + attention's
  // 4 C T = 8,192: 81,920; forward and backward 3 x that per block, two
  // blocks 491,520, the head 6 V C = 98,304: 589,824 per token (flops.h's
  // count), x 8 x 32 tokens = 150,994,944 FLOPs at 1 GFLOP/s.
  const TrainConfig c = small_llama();
  const StepTime one = time_of(c, "", slow_cluster(1));
  CHECK(one.compute == Approx(0.150994944));
  CHECK(one.total == Approx(0.150994944));
  CHECK(one.comm.empty());
  CHECK(one.bubble == 0);
  CHECK(one.tokens_per_s == Approx(256 / 0.150994944));
  CHECK(one.mfu == Approx(0.5));  // the achievable rate is half the peak
  CHECK(one.bound == "compute 100%");
  // Full checkpointing runs each block's forward again: 4 x 81,920 x 2 +
  // 98,304 = 753,664 per token; MFU still counts the model's 589,824.
  const StepTime ac = time_of(c, "ac=full", slow_cluster(1));
  CHECK(ac.compute == Approx(753664.0 * 256 / 1e9));
  CHECK(ac.mfu == Approx(589824.0 * 256 / (ac.total * 2e9)));
}

TEST_CASE("data parallel: DDP's all_reduce and FSDP's gathers, hidden or exposed",
          "[planner][time]") {
  const TrainConfig c = small_llama();
  // DDP over 2: each rank computes half the tokens; its all_reduce carries
  // 106,816 f32 gradients = 427,264 bytes x 2(n - 1)/n = 1, one bucket.
  const StepTime ddp = time_of(c, "dp_replicate=2", slow_cluster(2));
  CHECK(ddp.compute == Approx(0.150994944 / 2));
  REQUIRE(ddp.comm.size() == 1);
  CHECK(ddp.comm[0].op == "all_reduce");
  CHECK(ddp.comm[0].calls == 1);
  CHECK(ddp.comm[0].seconds == Approx(427264e-9));
  CHECK(ddp.total == Approx(0.150994944 / 2));  // hidden behind backward
  Cluster serial = slow_cluster(2);
  serial.overlap = false;
  CHECK(time_of(c, "dp_replicate=2", serial).total == Approx(0.150994944 / 2 + 427264e-9));

  // FSDP over 2: three units (two blocks and the root) of 106,816 / 3
  // parameters, f32: each all_gather 142,421.3 bytes x (n - 1)/n, gathered
  // for forward and again for backward, the root once: 5 calls; one
  // reduce_scatter per unit: 3.
  const StepTime fsdp = time_of(c, "dp_shard=2", slow_cluster(2));
  const double unit = 106816.0 / 3 * 4;
  CHECK(seconds_of(fsdp, "all_gather") == Approx(5 * unit / 2 / 1e9));
  CHECK(seconds_of(fsdp, "reduce_scatter") == Approx(3 * unit / 2 / 1e9));
  CHECK(fsdp.total == Approx(0.150994944 / 2));
  // On a link of 1 MB/s the gathers outlast the compute: the step is the
  // communication, and what bounds it is dp_shard's.
  Cluster thin = slow_cluster(2);
  thin.within.busbw = 1e6;
  const StepTime slow = time_of(c, "dp_shard=2", thin);
  const double comm = 8 * unit / 2 / 1e6;
  CHECK(slow.total == Approx(comm));
  CHECK(slow.exposed == Approx(comm - 0.150994944 / 2));
  CHECK(slow.bound == "dp_shard comm 87%");  // (0.5697 - 0.0755) / 0.5697
}

TEST_CASE("tensor, context and pipeline parallel terms, by hand", "[planner][time]") {
  const TrainConfig c = small_llama();
  // tp 2 with sequence parallelism: per block two all_gathers and two
  // reduce_scatters forward and again backward, and the embedding's and the
  // head's four: 2 x 4 x 2 + 4 = 20 calls of the (8, 32, 64) f32 activations,
  // 65,536 bytes x (n - 1)/n; not hidden. Each rank computes half.
  const StepTime tp = time_of(c, "tp=2", slow_cluster(2));
  REQUIRE(tp.comm.size() == 1);
  CHECK(tp.comm[0].calls == 20);
  CHECK(tp.comm[0].seconds == Approx(20 * 32768e-9));
  CHECK(tp.total == Approx(0.150994944 / 2 + 20 * 32768e-9));
  // A latency of 1 us per hop adds one hop per call at n = 2.
  Cluster hop = slow_cluster(2);
  hop.within.latency = 1e-6;
  CHECK(time_of(c, "tp=2", hop).total == Approx(0.150994944 / 2 + 20 * (32768e-9 + 1e-6)));

  // cp 2: each rank holds 128 of the 256 tokens; per block K and V (2 C
  // floats a token, 65,536 bytes) pass cp - 1 = 1 time forward and, with
  // the gradients' accumulator, 2 cp - 1 = 3 times backward: 8 sends, hidden.
  const StepTime cp = time_of(c, "cp=2", slow_cluster(2));
  double ring = 0;
  for (const CommTerm& t : cp.comm) {
    if (t.axis != "cp") continue;
    ring = t.seconds;
    CHECK(t.calls == 8);
  }
  CHECK(ring == Approx(8 * 65536e-9));

  // pp 2 over 4 microbatches of 2 rows: a block per stage, the last with
  // the head: 3 x 81,920 + 98,304 = 344,064 FLOPs per token, x 64 tokens x 4
  // = 0.088080384 s; 8 sends of (2, 32, 64) f32 (16,384 bytes); 1F1B's
  // bubble one microbatch's time, (0.088080384 + 8 x 16,384e-9) / 4.
  const double work = 0.088080384, sends = 8 * 16384e-9;
  const StepTime pp = time_of(c, "pp=2,microbatches=4", slow_cluster(2));
  CHECK(pp.compute == Approx(work));
  CHECK(pp.bubble == Approx((work + sends) / 4));
  CHECK(pp.total == Approx(work + sends + (work + sends) / 4));
  // Under pp the FSDP gradients are reduce-scattered once, after the last
  // backward: exposed whole, and outside the microbatches (not in the bubble).
  const StepTime pf = time_of(c, "pp=2,dp_shard=2,microbatches=2", slow_cluster(4));
  double after = 0;
  for (const CommTerm& t : pf.comm) {
    CHECK(t.after_step == (t.op == "reduce_scatter"));
    if (t.after_step) after += t.seconds;
  }
  CHECK(after > 0);
  // The pipeline's 4 sends of (2, 32, 64) f32, 16,384 bytes each; the
  // gathers hide behind the compute.
  CHECK(pf.exposed == Approx(after + 4 * 16384e-9));
  CHECK(pf.bubble == Approx((pf.compute + 4 * 16384e-9) / 2));
  CHECK(pf.total == Approx(pf.compute + pf.bubble + pf.exposed));
  // ZB-H1 leaves a third of it.
  const StepTime zb =
      time_of(small_llama({"parallel.pp_schedule=zbh1"}), "pp=2,microbatches=4", slow_cluster(2));
  CHECK(zb.bubble == Approx((work + sends) / 12));
}

TEST_CASE("an axis across nodes runs on the slower link, a ring per device", "[planner][time]") {
  Cluster c = slow_cluster(8, 2);
  c.within.latency = 1e-6, c.between.latency = 1e-5;
  // One rank per node (a stride of a node or more): the network's busbw and
  // its latency at each of the all_reduce's 2(n - 1) hops.
  CHECK(collective_seconds(c, "all_reduce", 2, 1, 1, 1e6) == Approx(1e6 / 1e8 + 2 * 1e-5));
  // Eight ranks, two per node: two rings at once, 2 x 1e8 (below NVLink's
  // 1e9); of the 7 hops of an all_gather, 4 / 7 x 7 = 4 cross a node.
  CHECK(collective_seconds(c, "all_gather", 8, 2, 1, 8e6) ==
        Approx(8e6 * 7 / 8 / 2e8 + 4 * 1e-5 + 3 * 1e-6));
  // Within a node: the node's link.
  CHECK(collective_seconds(c, "all_gather", 2, 2, 3, 8e6) == Approx(3 * (8e6 / 2 / 1e9 + 1e-6)));
}

TEST_CASE("measured busbw: interpolated in log size, nearest ranks, refusals", "[planner][time]") {
  const BusbwTable t(
      {{"all_reduce", 2, 1000, 1e9}, {"all_reduce", 2, 100000, 3e9}, {"all_reduce", 8, 1000, 5e9}});
  CHECK(t.busbw("all_reduce", 2, 10000) == Approx(2e9));  // halfway in log(size)
  CHECK(t.busbw("all_reduce", 2, 10) == Approx(1e9));     // the nearest end
  CHECK(t.busbw("all_reduce", 3, 1e9) == Approx(3e9));    // 2 ranks are nearer 3 than 8
  CHECK(t.busbw("all_reduce", 6, 1000) == Approx(5e9));
  CHECK_THROWS_WITH(t.busbw("all_gather", 2, 1000),
                    "the measured busbw has no rows of all_gather (run spmd-bench with it: "
                    "spmd-bench all_gather --json FILE)");
  Cluster c = slow_cluster(2);
  c.busbw_within = t;
  c.within.latency = 1;  // a measured busbw already holds the latency
  CHECK(collective_seconds(c, "all_reduce", 2, 2, 1, 10000) == Approx(10000 / 2e9));

  const std::string path = "test_planner_busbw.json";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("{\"op\": \"sendrecv\", \"nranks\": 2, \"size\": 4096, \"busbw\": 1.5}\n\n", f);
  std::fputs("{\"op\": \"sendrecv\", \"size\": 8192}\n", f);
  std::fclose(f);
  CHECK_THROWS_WITH(BusbwTable::read("--busbw", path),
                    "--busbw \"test_planner_busbw.json\" line 3: not a row of spmd-bench --json "
                    "(an object with op, nranks, size and busbw)");
  f = std::fopen(path.c_str(), "w");
  std::fputs("{\"op\": \"sendrecv\", \"nranks\": 2, \"size\": 4096, \"busbw\": 1.5}\n", f);
  std::fclose(f);
  CHECK(BusbwTable::read("--busbw", path).busbw("sendrecv", 2, 1) == Approx(1.5e9));
  std::remove(path.c_str());
  CHECK_THROWS_WITH(BusbwTable::read("--busbw", "no-such.json"),
                    "--busbw \"no-such.json\": cannot read it");
}

TEST_CASE("a timed search puts the shortest step first", "[planner][time]") {
  const Search s = search_layouts(small_llama(), slow_cluster(4));
  REQUIRE(s.fits.size() > 3);
  for (const Fit& f : s.fits) REQUIRE(f.time);
  for (size_t i = 1; i < s.fits.size(); ++i)
    CHECK(s.fits[i - 1].time->total <= s.fits[i].time->total);
  // The table says what bounds each step.
  const std::string table = fits_table(s.fits, 3);
  CHECK_THAT(table, Contains("tokens/s") && Contains("MFU") && Contains("bound by"));
}
