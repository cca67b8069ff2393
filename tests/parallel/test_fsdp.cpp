// FSDP's mechanics, each against something independent of it: the shards
// and their placements against torch.chunk's arithmetic; prefetch against
// the order the trace recorded; memory against the allocator's own peak and
// the model's sizes; bf16 compute against f32; state dicts against the
// unsharded model; and every refused input by its message.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/checkpoint/checkpoint.h"
#include "parallel/ddp/ddp.h"
#include "parallel/device_mesh.h"
#include "parallel/fsdp/fully_shard.h"
#include "parallel/fsdp/state_dict.h"
#include "parallel/placement.h"
#include "runtime/trace.h"
#include "tensor/cpu/allocator.h"
#include "tensor/ops.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

nn::TransformerConfig small_config(int64_t C = 32, int64_t layers = 3) {
  return nn::TransformerConfig::gpt2(/*V=*/64, /*T=*/8, layers, /*heads=*/4, C);
}

std::shared_ptr<FsdpModule> shard_transformer(nn::Transformer& model, const DeviceMesh& mesh,
                                              FsdpOptions o = {}) {
  for (size_t i = 0; i < model.layers->size(); ++i) fully_shard(model.layers->at(i), mesh, o);
  return fully_shard(std::shared_ptr<nn::Module>(model.shared_from_this()), mesh, o);
}

Tensor ids(int64_t rows, int64_t T, uint64_t seed) {
  Generator gen(seed);
  return ops::randint(0, 64, {rows, T}, {DType::kI64}, &gen);
}

}  // namespace

TEST_CASE("shards are torch.chunk's rows, unpadded, with Shard(0) recorded", "[fsdp]") {
  run_world(3, [](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {3}, {"dp"});
    auto model = std::make_shared<nn::Transformer>(small_config(), 1);
    const TensorMap whole = model->state_dict();
    TensorMap copy;
    for (const auto& [k, v] : whole) copy[k] = ops::clone(v);
    shard_transformer(*model, mesh);
    const int64_t r = world.rank();
    for (const auto& [name, shard] : model->named_parameters()) {
      const Tensor& w = copy.at(name);
      const int64_t rows = w.size(0), chunk = (rows + 2) / 3;
      const int64_t first = std::min(r * chunk, rows), mine = std::min(chunk, rows - first);
      expect(shard.size(0) == mine, name, ": rank ", r, " holds ", shard.size(0), " rows, not ",
             mine);
      const LayoutMeta* layout = placements_of(shard);
      expect(layout && layout->placements[0].is_shard() && layout->placements[0].dim == 0 &&
                 layout->global_shape == w.shape(),
             name, ": placement not Shard(0) of ", w.shape());
      expect(relative_difference(shard, ops::narrow(w, 0, first, mine)) == 0 || mine == 0, name,
             ": the shard is not rows ", first, "+", mine);
    }
    // The full state dict is the unsharded model, exactly.
    for (const auto& [name, t] : full_state_dict(*model))
      expect(relative_difference(t, copy.at(name)) == 0, name, ": full_state_dict differs");
  });
}

TEST_CASE("a full state dict loads into a sharded model and back out", "[fsdp]") {
  run_world(2, [](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"dp"});
    auto plain = std::make_shared<nn::Transformer>(small_config(), 7);  // the values to load
    auto model = std::make_shared<nn::Transformer>(small_config(), 1);
    shard_transformer(*model, mesh);
    load_full_state_dict(*model, plain->state_dict());
    for (const auto& [name, t] : full_state_dict(*model))
      expect(relative_difference(t, plain->state_dict().at(name)) == 0, name, " did not load");
    TensorMap bad = plain->state_dict();
    bad["norm.weight"] = ops::zeros({3});
    bool refused = false;
    try {
      load_full_state_dict(*model, bad);
    } catch (const Error& e) {
      refused =
          std::string(e.what()).find("norm.weight is [3] in the state dict") != std::string::npos;
    }
    expect(refused, "a wrong shape was not refused by name");
  });
}

TEST_CASE("prefetch issues the next unit's all_gather before this unit computes", "[fsdp][trace]") {
  const std::string dir = "/tmp/spmd_test_fsdp_trace_" + std::to_string(::getpid());
  for (bool prefetch : {true, false}) {
    run_world(2, [&](ProcessGroup& world) {
      trace_start(dir, world.rank());
      DeviceMesh mesh(borrow(world), {2}, {"dp"});
      auto model = std::make_shared<nn::Transformer>(small_config(), 1);
      FsdpOptions o;
      o.prefetch = prefetch;
      auto root = shard_transformer(*model, mesh, o);
      const Tensor x = ids(2, 8, 5);
      backward(cross_entropy((*model)(x), x));
      trace_flush();
      // The trace, read back: one all_gather span per unit in forward order.
      std::ifstream in(trace_path());
      const auto trace = nlohmann::json::parse(in);
      std::map<std::string, std::vector<int64_t>> starts, ends;
      for (const auto& e : trace["traceEvents"]) {
        if (e["ph"] != "X") continue;
        const std::string name = e["name"];
        starts[name].push_back(e["ts"].get<int64_t>());
        ends[name].push_back(e["ts"].get<int64_t>() + e["dur"].get<int64_t>());
      }
      for (int k = 0; k + 1 < int(model->layers->size()); ++k) {
        const std::string gather = str_cat("fsdp all_gather layers.", k + 1);
        const std::string forward = str_cat("fsdp forward layers.", k);
        expect(!starts[gather].empty() && !starts[forward].empty(), "no span ", gather);
        const int64_t issued = starts[gather][0];  // its forward gather
        if (prefetch) {
          expect(issued <= starts[forward][0], gather, " issued at ", issued, " after ", forward,
                 " began at ", starts[forward][0]);
        } else {
          expect(issued >= ends[forward][0], gather, " issued at ", issued, " before ", forward,
                 " ended at ", ends[forward][0]);
        }
      }
    });
  }
  std::filesystem::remove_all(dir);
}

namespace {

// The allocator's peak over one training step (after a first step made the
// optimizer state), with a batch of 4 tokens so activations stay small
// beside the model state.
struct Peak {
  size_t step_peak = 0;
  int64_t params = 0, largest_unit = 0;
};

Peak measure(ProcessGroup& world, const std::string& strategy, bool prefetch) {
  auto c = nn::TransformerConfig::gpt2(/*V=*/256, /*T=*/8, /*layers=*/4, /*heads=*/4, /*C=*/128);
  auto model = std::make_shared<nn::Transformer>(c, 3);
  Peak p;
  p.params = model->num_parameters();
  p.largest_unit = model->layers->at(0)->num_parameters();
  std::shared_ptr<DistributedDataParallel> ddp;
  if (strategy == "fsdp") {
    DeviceMesh mesh(borrow(world), {world.size()}, {"dp"});
    FsdpOptions o;
    o.prefetch = prefetch;
    shard_transformer(*model, mesh, o);
  } else {
    ddp = std::make_shared<DistributedDataParallel>(model, borrow(world));
  }
  nn::Module& m = ddp ? static_cast<nn::Module&>(*ddp) : *model;
  optim::AdamW opt(m.parameters(), {.lr = 1e-3});
  const Tensor x = ids(1, 4, 9);
  for (int step = 0; step < 2; ++step) {
    cpu::reset_host_peak_memory();
    backward(cross_entropy(m(x), x));
    opt.step();
    opt.zero_grad();
    p.step_peak = cpu::host_memory_stats().peak_allocated;
  }
  return p;
}

}  // namespace

TEST_CASE("FSDP's peak per rank is 1/N of the model state plus one unit", "[fsdp][memory]") {
  for (int n : {1, 2, 4}) {
    run_world(
        n,
        [n](ProcessGroup& world) {
          const Peak f = measure(world, "fsdp", /*prefetch=*/false);
          const Peak fp = measure(world, "fsdp", /*prefetch=*/true);
          const Peak d = measure(world, "ddp", false);
          // Model state: f32 parameters, gradients and AdamW's two moments.
          const double state = 16.0 * double(f.params) / n;
          const double unit =
              8.0 * double(f.largest_unit);  // its gathered parameters and gradients
          // Backward does not wait for a unit's reduce_scatter before the next
          // unit computes, so while it is in flight (longer on a loaded
          // machine) the previous unit's whole gradient is held too.
          const double in_flight = 4.0 * double(f.largest_unit);
          const double bound = 1.1 * (state + unit + in_flight);
          if (world.rank() == 0) {
            std::fprintf(stderr,
                         "N=%d: FSDP peak %zu B, with prefetch %zu B, bound %zu B, DDP %zu B\n", n,
                         f.step_peak, fp.step_peak, size_t(bound), d.step_peak);
          }
          expect(double(f.step_peak) <= bound, "N=", n, ": FSDP's peak ", f.step_peak,
                 " B exceeds 1.1 x (state/N ", size_t(state), " + a unit ", size_t(unit),
                 " + a gradient in flight ", size_t(in_flight), ")");
          // Prefetch holds the next unit's all_gather buffer while this one
          // computes, and for a moment its copy-out too: two units' parameters.
          expect(double(fp.step_peak) <= bound + 8.0 * double(f.largest_unit), "N=", n,
                 ": with prefetch the peak ", fp.step_peak, " B is more than two units above");
        },
        std::chrono::seconds(60));
  }
}

TEST_CASE("bf16 parameters for compute, f32 shards and gradients", "[fsdp][mixed]") {
  run_world(2, [](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"dp"});
    auto c = small_config();
    auto f32 = std::make_shared<nn::Transformer>(c, 1);
    auto bf16 = std::make_shared<nn::Transformer>(c, 1);
    shard_transformer(*f32, mesh);
    FsdpOptions o;
    o.mixed_precision = {.param_dtype = DType::kBF16, .reduce_dtype = DType::kF32};
    auto root = shard_transformer(*bf16, mesh, o);
    root->unshard();
    expect(bf16->norm->parameters()[0].dtype() == DType::kBF16, "gathered, not bf16");
    root->reshard();
    optim::AdamW a(f32->parameters(), {.lr = 3e-3}), b(bf16->parameters(), {.lr = 3e-3});
    for (int step = 0; step < 3; ++step) {
      const Tensor x = ids(2, 8, 20 + step + 10 * world.rank());
      const Tensor la = cross_entropy((*f32)(x), x), lb = cross_entropy((*bf16)(x), x);
      backward(la);
      backward(lb);
      for (const Tensor& p : bf16->parameters())
        expect(p.dtype() == DType::kF32 && p.grad().dtype() == DType::kF32,
               "shard or grad not f32");
      const double rel = std::abs(lb.item<double>() - la.item<double>()) / la.item<double>();
      expect(rel < 2e-2, "step ", step, ": bf16 loss ", lb.item<double>(), " vs f32 ",
             la.item<double>());
      a.step(), b.step(), a.zero_grad(), b.zero_grad();
    }
  });
}

TEST_CASE("fully_shard refuses what it cannot shard, by name", "[fsdp][errors]") {
  run_world(2, [](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"dp"});
    auto model = std::make_shared<nn::Transformer>(small_config(), 1);
    auto block = model->layers->at(0);
    fully_shard(block, mesh);
    auto refuses = [](auto&& f, const std::string& words) {
      try {
        f();
      } catch (const Error& e) {
        expect(std::string(e.what()).find(words) != std::string::npos, "message '", e.what(),
               "' lacks '", words, "'");
        return;
      }
      expect(false, "not refused: ", words);
    };
    refuses([&] { fully_shard(block, mesh); }, "was already passed to fully_shard");
    FsdpOptions bad_axis;
    bad_axis.shard_axis = "dp_shard";
    refuses([&] { fully_shard(model->layers->at(1), mesh, bad_axis); }, "has no axis 'dp_shard'");
    // A parameter shared between units: layer 2's MLP weight is layer 1's.
    auto a = std::dynamic_pointer_cast<nn::TransformerBlock>(model->layers->at(1));
    auto b = std::dynamic_pointer_cast<nn::TransformerBlock>(model->layers->at(2));
    b->mlp->w1->weight = a->mlp->w1->weight;
    fully_shard(a, mesh);
    refuses([&] { fully_shard(b, mesh); }, "a parameter shared between units");
  });
}

TEST_CASE("a sharded checkpoint saved on N = 4 loads on N = 2 and into a plain model",
          "[fsdp][checkpoint]") {
  const std::string dir = "/tmp/spmd_test_fsdp_ckpt_" + std::to_string(::getpid());
  auto trained = std::make_shared<nn::Transformer>(small_config(), 21);  // the values saved
  run_world(4, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {4}, {"dp"});
    auto model = std::make_shared<nn::Transformer>(small_config(), 1);
    shard_transformer(*model, mesh);
    load_full_state_dict(*model, trained->state_dict());
    save_sharded(model->state_dict(), dir, world);  // each rank its shards, no gathering
  });
  run_world(2, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"dp"});
    auto model = std::make_shared<nn::Transformer>(small_config(), 2);
    shard_transformer(*model, mesh);
    load_sharded(model->state_dict(), dir);
    for (const auto& [name, t] : full_state_dict(*model))
      expect(relative_difference(t, trained->state_dict().at(name)) == 0, name,
             " differs after loading on N = 2");
  });
  auto plain = std::make_shared<nn::Transformer>(small_config(), 3);
  load_sharded(plain->state_dict(), dir);
  for (const auto& [name, t] : plain->state_dict())
    CHECK(relative_difference(t, trained->state_dict().at(name)) == 0);
  std::filesystem::remove_all(dir);
}
