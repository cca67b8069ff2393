// spmd-plan's search over the axes beyond the dense dims (train/planner.h,
// train/step_time.h): selective activation checkpointing, expert
// parallelism for a model with experts, and interleaved schedules of more
// than 2 stages per rank. Each time term against a number worked out by hand
// for a small shape; the search tries each axis where the checks allow it
// and leaves it out where they do not.
#include <catch2/catch.hpp>
#include <set>

#include "runtime/error.h"
#include "tests/train/planner_test_util.h"
#include "train/config.h"
#include "train/planner.h"
#include "train/step_traffic.h"

using namespace spmd;
using namespace spmd::train;
using namespace spmd::train::testing;
using Catch::Matchers::Contains;

namespace {

// The same with 4 experts, top 2, in place of every block's MLP.
TrainConfig small_moe(std::vector<std::string> more = {}) {
  more.insert(more.begin(), {"model.n_experts=4", "model.moe_top_k=2"});
  return small_llama(more);
}

// The step time of `layout` on a slow cluster of `devices`.
StepTime time_of(const TrainConfig& c, const std::string& layout, int64_t devices) {
  return spmd::train::testing::time_of(c, layout, slow_cluster(devices));
}

// The first term of `t` over `axis` with `op`.
CommTerm term(const StepTime& t, const std::string& axis, const std::string& op) {
  for (const CommTerm& c : t.comm)
    if (c.axis == axis && c.op == op) return c;
  FAIL("no " << op << " over " << axis);
  return {};
}

}  // namespace

TEST_CASE("selective checkpointing: what each option recomputes, by hand", "[planner][time]") {
  // A block's forward per token: 2 x 36,864 weights + 4 C T = 81,920
  // FLOPs; two blocks three passes each and the head's 6 V C = 98,304:
  // 589,824 a token, x 256 tokens at 1 GFLOP/s.
  const TrainConfig c = small_llama();
  const double none = 589824.0 * 256 / 1e9;
  // "op" keeps the products' outputs: no GEMM runs again.
  CHECK(time_of(c, "ac=op", 1).compute == Approx(none));
  // "2": the second block (its count from 1 divides by 2) runs its forward
  // again: 589,824 + 81,920 = 671,744 a token.
  CHECK(time_of(c, "ac=2", 1).compute == Approx(671744.0 * 256 / 1e9));
  // The written config names TorchTitan's keys.
  const TrainConfig op = with_layout(c, parse_layout("ac=op"));
  CHECK(op.training.activation_checkpointing == "selective");
  CHECK(op.training.selective_ac_option == "op");
  CHECK(with_layout(c, parse_layout("ac=3")).training.selective_ac_option == "3");
  CHECK(describe(parse_layout("ac=2")) == "1 device · ac every 2");

  // tp 2 with sequence parallelism: 4 collectives a block and pass, and the
  // ends' 4. "op" runs every block's forward collectives again (they are
  // not on the save list): 4 x (2 x 2 + 2) + 4 = 28 calls; "2" the second
  // block's only: 4 x (4 + 1) + 4 = 24; none 20. Each 65,536 bytes x 1/2.
  CHECK(term(time_of(c, "tp=2,ac=op", 2), "tp", "all_gather").calls == 28);
  CHECK(term(time_of(c, "tp=2,ac=2", 2), "tp", "all_gather").calls == 24);
  CHECK(term(time_of(c, "tp=2,ac=2", 2), "tp", "all_gather").seconds == Approx(24 * 32768e-9));
  // cp 2: ring attention is kept under "op" (8 sends as without
  // checkpointing); a recomputed block passes K and V forward once more.
  CHECK(term(time_of(c, "cp=2,ac=op", 2), "cp", "sendrecv").calls == 8);
  CHECK(term(time_of(c, "cp=2,ac=2", 2), "cp", "sendrecv").calls == 9);
  CHECK(term(time_of(c, "cp=2,ac=full", 2), "cp", "sendrecv").calls == 10);
}

TEST_CASE("expert parallelism: the all_to_alls and the experts' gradients, by hand",
          "[planner][time]") {
  // Each block an MoE of 4 experts, top 2: its weights per token are the
  // attention's 12,288, the router's C E = 256 and 2 experts' 3 C F =
  // 24,576 each: 61,696; forward 2 x 61,696 + 8,192 = 131,584, x 3 passes
  // x 2 blocks + the head's 98,304 = 887,808 FLOPs a token; over dp 2, 128
  // tokens a rank.
  const TrainConfig c = small_moe();
  const StepTime ep = time_of(c, "dp_replicate=2,ep=2", 2);
  CHECK(ep.compute == Approx(887808.0 * 128 / 1e9));
  // Per MoE block, dispatch and combine forward and backward: 4 x 2 blocks
  // = 8 all_to_alls of 128 tokens x 2 copies x 64 x 4 bytes = 65,536, of
  // which (n - 1)/n = 1/2 leaves the rank; not hidden.
  const CommTerm a2a = term(ep, "ep", "all_to_all");
  CHECK(a2a.calls == 8);
  CHECK(a2a.bytes == 65536);
  CHECK(a2a.seconds == Approx(8 * 32768e-9));
  CHECK_FALSE(a2a.overlapped);
  // Before each dispatch, the counts: 4 experts' int64s, 1 call a block.
  const auto counts = [](const StepTime& t) {
    for (const CommTerm& c : t.comm)
      if (c.what == "EP routing counts") return c;
    FAIL("no routing counts");
    return CommTerm{};
  };
  CHECK(counts(ep).calls == 2);
  CHECK(counts(ep).bytes == 32);
  // Full checkpointing runs both blocks' dispatch and combine again.
  CHECK(term(time_of(c, "dp_replicate=2,ep=2,ac=full", 2), "ep", "all_to_all").calls == 12);
  CHECK(term(time_of(c, "dp_replicate=2,ep=2,ac=2", 2), "ep", "all_to_all").calls == 10);
  CHECK(counts(time_of(c, "dp_replicate=2,ep=2,ac=full", 2)).calls == 4);

  // Without FSDP, ep's sync all_reduces the dense gradients over the data
  // ranks after the step (not DDP's hidden buckets): the embedding and the
  // head, 16,384 each, the final norm's 64, and per block the attention's
  // 12,288, the two norms' 128 and the router's 256: 58,176 floats.
  const CommTerm dense = term(ep, "dp_replicate", "all_reduce");
  CHECK(dense.bytes == 58176 * 4);
  CHECK(dense.after_step);
  // On 4 data ranks over ep 2, each expert has 2 copies, 2 apart: their
  // gradients, 2 experts x 3 x 64 x 128 x 2 blocks = 98,304 floats, are
  // all_reduced over those 2 after the step.
  const StepTime four = time_of(c, "dp_replicate=4,ep=2", 4);
  const CommTerm experts = term(four, "expert dp", "all_reduce");
  CHECK(experts.group == 2);
  CHECK(experts.bytes == 98304 * 4);
  CHECK(experts.after_step);
  CHECK(experts.seconds == Approx(98304.0 * 4 / 1e9));  // 2(n - 1)/n = 1
  // Under FSDP the experts are left out of the gathered units: the dense
  // 58,176 floats over 3 units (two blocks and the root), f32.
  const StepTime fsdp = time_of(c, "dp_shard=2,ep=2", 2);
  CHECK(term(fsdp, "dp_shard", "all_gather").bytes == Approx(58176.0 / 3 * 4));
}

TEST_CASE("an MoE block runs whole on each tp rank", "[planner][time]") {
  // Block 0 an MoE (moe_every 2), block 1 dense, tp 2: block 0's attention
  // (2 x 12,288 + 8,192) / 2 = 16,384 and its router and experts whole,
  // 2 x 49,408 = 98,816; block 1 81,920 / 2 = 40,960; 3 passes: 468,480;
  // the head 98,304 / 2: 517,632 FLOPs a token on each rank, 256 tokens.
  const TrainConfig c = small_moe({"model.moe_every=2"});
  CHECK(time_of(c, "tp=2", 2).compute == Approx(517632.0 * 256 / 1e9));
}

TEST_CASE("ep: the values the trainer takes, and the reason for the others", "[planner]") {
  const TrainConfig c = small_moe();
  CHECK(refusal(c, "dp_replicate=4,ep=4", 4) == "(no refusal)");
  CHECK_THAT(refusal(c, "dp_replicate=6,ep=3", 6), Contains("must divide model.n_experts 4"));
  CHECK_THAT(refusal(c, "tp=2,dp_replicate=2,ep=4", 4), Contains("must divide dp_replicate 2"));
  CHECK_THAT(refusal(c, "dp_replicate=2,dp_shard=2,ep=4", 4),
             Contains("under FSDP the expert ranks come from dp_shard x cp"));
  CHECK_THAT(refusal(small_llama(), "dp_replicate=2,ep=2", 2),
             Contains("a model without experts has nothing to split"));

  // The search tries every ep the checks allow, and only those.
  const Search s = search_layouts(c, slow_cluster(4));
  std::set<int64_t> eps;
  for (const Fit& f : s.fits) {
    eps.insert(f.layout.ep);
    CHECK_NOTHROW(check_planned_layout(with_layout(c, f.layout), 4));
    if (f.layout.ep > 1) CHECK(term(*f.time, "ep", "all_to_all").calls > 0);
  }
  CHECK(eps == std::set<int64_t>{1, 2, 4});
  for (const Fit& f : search_layouts(small_llama(), slow_cluster(4)).fits) CHECK(f.layout.ep == 1);
}

TEST_CASE("the search tries selective checkpointing before full", "[planner]") {
  // One device, 8 microbatches of one row: a memory that "op" fits exactly
  // and no checkpointing does not; then one that only "2" or full fits.
  const TrainConfig c = small_llama({"model.n_layers=4"});
  Cluster one;
  const auto peak = [&](const std::string& ac) {
    return evaluate(c, parse_layout("microbatches=8,ac=" + ac), 1).plan.peak();
  };
  REQUIRE(peak("none") > peak("op"));
  one.device_memory = peak("op");
  const Search s = search_layouts(c, one);
  REQUIRE(s.fits.size() == 1);
  CHECK(s.fits[0].layout.checkpointing == "op");
  CHECK(s.fits[0].layout.microbatches == 8);
  // Below "op"'s need, the next in order of recomputation that fits.
  one.device_memory = peak("op") - 1;
  const Search less = search_layouts(c, one);
  REQUIRE(less.fits.size() == 1);
  const std::string next = peak("2") <= one.device_memory ? "2" : "full";
  CHECK(less.fits[0].layout.checkpointing == next);
}

TEST_CASE("interleaved schedules of up to 7 stages per rank, as the layers allow",
          "[planner][time]") {
  // On a slow device the bubble outweighs the sends: more stages per rank
  // are faster, up to 8 layers / pp 2 = 4.
  const auto best_pp2 = [](const TrainConfig& c) {
    for (const Fit& f : search_layouts(c, slow_cluster(2)).fits)
      if (f.layout.pp == 2) return f.layout;
    FAIL("no pipeline of 2 in the search");
    return Layout{};
  };
  const Layout eight = best_pp2(small_llama({"model.n_layers=8"}));
  CHECK(eight.schedule == "interleaved");
  CHECK(eight.stages_per_rank == 4);
  CHECK_THAT(describe(eight), Contains("pp 2 interleaved x 4"));
  // 32 layers would allow 16; the search stops at 7.
  CHECK(best_pp2(small_llama({"model.n_layers=32"})).stages_per_rank == 7);
  // The bubble of v stages per rank is 1/v of 1F1B's.
  const TrainConfig c = small_llama({"model.n_layers=8"});
  const StepTime v4 = time_of(c, "pp=2,microbatches=2,schedule=interleaved,v=4", 2);
  const StepTime f1 = time_of(c, "pp=2,microbatches=2,schedule=1f1b", 2);
  CHECK(v4.compute == Approx(f1.compute));
  CHECK(v4.bubble == Approx((v4.compute + v4.exposed) / 2 / 4));
}

TEST_CASE("a timed search keeps the fastest checkpointing that fits, not the first",
          "[planner][time]") {
  // configs/llama.toml's shape (4 layers, C 128, T 128) on 2 nodes of 4
  // devices of 8 MB with the chapter's H100 figures: all latency, so fewer
  // microbatches under full checkpointing beat more without (cp 2 x pp 4:
  // none fits with 8 microbatches only, full with 4).
  const TrainConfig c = load_config(
      "", {"model.preset=custom", "model.shape=llama", "model.vocab_size=256", "model.seq_len=128",
           "model.n_layers=4", "model.n_heads=4", "model.n_kv_heads=2", "model.d_model=128"});
  Cluster cluster;
  cluster.devices = 8, cluster.devices_per_node = 4, cluster.device_memory = 8000000;
  cluster.flops = 0.7 * 989e12, cluster.peak_flops = 989e12;
  cluster.within = {360e9, 2e-6}, cluster.between = {40e9, 5e-6};
  const Search s = search_layouts(c, cluster);
  REQUIRE(s.fits.size() > 5);
  // Against every checkpointing and microbatch count of the same dims and
  // schedule, tried one by one: none that fits is faster.
  int64_t compared = 0;
  for (const Fit& f : s.fits) {
    for (const char* ac : {"none", "op", "2", "full"}) {
      for (int64_t m : {1, 2, 4, 8}) {
        Layout l = f.layout;
        l.checkpointing = ac, l.microbatches = m;
        try {
          check_planned_layout(with_layout(c, l), 8);
        } catch (const InvalidArgument&) {
          continue;
        }
        const Fit other = evaluate(c, l, cluster);
        if (other.plan.peak() > cluster.device_memory) continue;
        CHECK(other.time->total >= f.time->total * (1 - 1e-12));
        ++compared;
      }
    }
  }
  CHECK(compared > int64_t(s.fits.size()));
}

TEST_CASE("memory traffic: the other ops' bytes and their time, by hand", "[planner][time]") {
  // The small Llama on one device, 8 sequences of 32: 256 tokens. A block
  // per token, in elements (docs/planner.md, "Memory traffic"; C 64, A 64,
  // A_kv 32, H 128): the residual stream in f32, two norms and two adds,
  // forward 10 C = 640, backward 12 C = 768; the rest, forward: the head
  // layout of v and the output 2 A_kv + 2 A = 192, RoPE 2 (A + A_kv) = 192,
  // SwiGLU 5 H = 640 (1024); backward: 192, 192, q, k, v's and w1, w3's
  // input gradients summed 6 C + 3 C = 576, SwiGLU 9 H = 1152 (2112). So
  // 4 (1408 + 3136) = 18,176 bytes a block, 36,352 for two; the embedding
  // 2 C x 4 = 512, the final norm 5 C x 4 = 1,280 and the loss 3 V x 4 =
  // 3,072: 41,216 bytes a token, 10,551,296 a step; and the embedding's
  // gradient table, V x C zeroed once (one microbatch), 65,536 bytes:
  // 10,616,832.
  const TrainConfig c = small_llama({"training.global_batch=8"});
  const MemoryPlan plan = plan_memory(c, 0);
  const StepTraffic t = step_traffic(c, plan, 0);
  CHECK(t.passes == 10616832.0);
  // 106,816 parameters (embedding and head 2 x 16,384, the final norm 64,
  // a block 36,992): the norm 44, AdamW 28 and the clip 8 bytes each.
  REQUIRE(plan.parameters == 4 * 106816);
  CHECK(t.clip == 8.0 * 106816);
  CHECK(t.update == 80.0 * 106816);

  // Given a bandwidth of 1 GB/s, the step's compute grows by the bytes'
  // seconds; without one, it does not.
  Cluster with_memory = slow_cluster(1);
  with_memory.memory_bw = 1e9;
  const StepTime plain = testing::time_of(c, "dp_shard=1", slow_cluster(1));
  const StepTime timed = testing::time_of(c, "dp_shard=1", with_memory);
  CHECK(plain.memory == 0);
  CHECK(timed.memory == Approx((10616832.0 + 80.0 * 106816) / 1e9));
  CHECK(timed.compute == Approx(plain.compute + timed.memory));
}
