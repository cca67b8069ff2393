// Models larger than one device (docs/memory.md). spmd-train's model built
// on the meta device: under every layout of configs/ and the compositions,
// the pieces each rank materializes, gathered whole, equal the one-process
// model's initial parameters bit for bit; an FSDP rank never holds more
// than its shards and one unit while it builds, lays out and initializes
// the model. And bf16 mixed precision: FSDP gathering bf16 and reducing in
// f32, against one process under the same autocast.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "parallel/placement.h"
#include "tensor/cpu/allocator.h"
#include "tests/train/trainer_test_util.h"
#include "train/parallelize.h"

using namespace spmd;
using namespace spmd::train::testing;

namespace {

std::shared_ptr<nn::Transformer> meta_model(const train::TrainConfig& c) {
  DefaultDeviceGuard meta(Device::meta());
  return std::make_shared<nn::Transformer>(train::transformer_config(c.model), c.training.seed);
}

// The layout's initial parameters, each gathered whole on the ranks that
// hold it, against the one-process model's: == on every element.
void check_initial_params(const train::TrainConfig& c, const std::string& name) {
  const int world = int(c.parallel.pp * c.parallel.dp_replicate * c.parallel.dp_shard *
                        c.parallel.cp * c.parallel.tp);
  run_world(world, [&](dist::ProcessGroup& w) {
    dist::DeviceMesh mesh = train::build_mesh(borrow(w), c.parallel);
    train::Parallelized par = train::parallelize(meta_model(c), mesh, c, Device::cpu());
    const nn::Transformer one(train::transformer_config(c.model), c.training.seed);
    std::map<std::string, Tensor> want;
    for (const auto& [n, p] : one.named_parameters()) want[n] = p;
    for (const auto& [n, piece] : par.named_parameters()) {
      expect(piece.device() == Device::cpu(), name, ": ", n, " is on ", piece.device());
      const Tensor whole = dist::full_tensor(piece);
      expect(want.contains(n), name, ": ", n, " is not a parameter of the one-process model");
      expect(ops::to_vector<float>(whole) == ops::to_vector<float>(want[n]), name, ": ", n,
             " differs from the one-process model's initial values");
    }
  });
}

// A small model, with the layout (and the model's shape) of a config file.
train::TrainConfig small(const std::string& file, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"model.seq_len=16", "model.d_model=32", "model.n_heads=4",
                                "model.n_layers=4", "training.threads=1"};
  if (file.ends_with("gpt2_124m.toml")) o.push_back("model.preset=\"tiny\"");
  if (file.ends_with("llama.toml")) o.push_back("model.n_kv_heads=2");
  o.insert(o.end(), more.begin(), more.end());
  return train::load_config(file, o);
}

}  // namespace

TEST_CASE("every layout of configs/ materializes the one-process model's initial values",
          "[train][meta][init]") {
  const char* root = std::getenv("SPMD_SOURCE_DIR");
  REQUIRE(root != nullptr);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(root) + "/configs")) {
    if (entry.path().extension() != ".toml") continue;
    INFO(entry.path().string());
    check_initial_params(small(entry.path().string()), entry.path().filename().string());
    ++files;
  }
  CHECK(files >= 10);
}

TEST_CASE("the compositions materialize the one-process model's initial values",
          "[train][meta][init]") {
  const std::string none;
  check_initial_params(small(none, {"parallel.dp_shard=2", "parallel.tp=2"}), "fsdp 2 x tp 2");
  check_initial_params(small(none, {"parallel.cp=2", "parallel.tp=2"}), "cp 2 x tp 2");
  check_initial_params(small(none, {"parallel.pp=2", "parallel.dp_shard=2", "parallel.tp=2",
                                    "model.tie_embeddings=false"}),
                       "pp 2 x fsdp 2 x tp 2");
  check_initial_params(
      small(none, {"parallel.pp=2", "parallel.dp_shard=2", "parallel.pp_schedule=\"interleaved\"",
                   "parallel.pp_stages_per_rank=2", "parallel.pp_microbatches=4",
                   "model.tie_embeddings=false"}),
      "pp 2 x fsdp 2, interleaved");
  check_initial_params(
      small(none, {"parallel.dp_replicate=2", "parallel.dp_shard=2", "parallel.cp=2",
                   "parallel.ep=4", "model.n_experts=4", "model.moe_top_k=2"}),
      "hsdp 2 x 2 x cp 2, ep 4");
}

TEST_CASE("an FSDP rank holds at most its shards and one unit while it builds the model",
          "[train][meta][fsdp][memory]") {
  // 8 blocks over 4 ranks: the whole model is about 4x a rank's shards.
  const train::TrainConfig c =
      small("", {"parallel.dp_shard=4", "model.n_layers=8", "model.d_model=64"});
  run_world(4, [&](dist::ProcessGroup& w) {
    dist::DeviceMesh mesh = train::build_mesh(borrow(w), c.parallel);
    cpu::reset_host_peak_memory();
    const size_t before = cpu::host_memory_stats().allocated;
    const auto model = meta_model(c);
    size_t buffers = 0;
    for (const auto& [n, b] : model->named_buffers()) buffers += b.nbytes();
    train::Parallelized par = train::parallelize(model, mesh, c, Device::cpu());
    const size_t peak = cpu::host_memory_stats().peak_allocated - before;

    size_t shards = 0;
    for (const auto& [n, p] : par.named_parameters()) shards += p.nbytes();
    const nn::Transformer one(train::transformer_config(c.model), c.training.seed);
    const size_t whole = size_t(one.num_parameters()) * sizeof(float);
    size_t unit = 0;  // the largest FSDP unit: a block, or the root's embeddings, norm and head
    for (size_t i = 0; i < one.layers->size(); ++i)
      unit = std::max(unit, size_t(one.layers->at(i)->num_parameters()) * sizeof(float));
    unit = std::max(unit, whole - one.layers->size() * unit);
    expect(peak <= shards + unit + buffers, "rank ", w.rank(), ": peak ", peak,
           " bytes through construction, layout and init, over its shards (", shards,
           ") + one unit (", unit, ") + buffers (", buffers, ")");
    expect(peak < whole / 2, "rank ", w.rank(), ": peak ", peak, " is not well below the model's ",
           whole, " bytes");
  });
}

TEST_CASE("bf16 under FSDP trains as one process under the same autocast, reducing in f32",
          "[train][fsdp][mixed]") {
  // Both runs compute every product in bf16 (8 significant bits: a unit
  // roundoff u = 2^-9). FSDP's gathered parameters are bf16 as well, so its
  // norms, embeddings and biases are each rounded once more than the one
  // process's f32 ones: activations differ by about u, and the loss, a mean
  // of such terms, by at most a few u: the tolerance is 4 u (measured:
  // 0.05 u). AdamW moves an element by at most about lr a step, in the
  // direction m / sqrt(v); where an element's gradient nearly cancels,
  // rounding by u turns that direction by a few percent: the parameters'
  // tolerance is lr / 16 a step, absolute (measured: lr / 29).
  const double u = std::ldexp(1.0, -9);
  namespace fs = std::filesystem;
  const std::string folder = "/tmp/spmd_test_train_bf16_" + std::to_string(::getpid());
  const std::vector<std::string> bf16 = {"training.mixed_precision=\"bf16\""};
  std::vector<std::string> layout = {"parallel.dp_shard=2", "checkpoint.folder=\"" + folder + "\""};
  layout.insert(layout.end(), bf16.begin(), bf16.end());
  const train::TrainConfig c = base(4, layout);
  fs::remove_all(folder);
  run_world(
      2,
      [&](dist::ProcessGroup& world) {
        const std::string single = folder + "_single" + std::to_string(world.rank());
        std::vector<std::string> one = bf16;
        one.push_back("checkpoint.folder=\"" + single + "\"");
        fs::remove_all(single);
        const std::vector<double> want = run_single(base(4, one));
        const std::vector<double> f32 = run_single(base(4, {}));
        const auto got = train::run_training(c, borrow(world)).losses;
        expect_close(got, want, 4 * u, str_cat("fsdp 2, bf16 (rank ", world.rank(), ")"));
        expect(f32 != want, "the one-process bf16 run gave f32's losses: autocast was off");
        const double step_bound = c.optimizer.lr / 16;
        const train::NamedTensors a = whole_parameters(c, folder), b = whole_parameters(c, single);
        fs::remove_all(single);
        for (size_t i = 0; i < a.size(); ++i) {
          const std::vector<float> x = ops::to_vector<float>(a[i].second),
                                   y = ops::to_vector<float>(b[i].second);
          float diff = 0;
          for (size_t j = 0; j < y.size(); ++j) diff = std::max(diff, std::abs(x[j] - y[j]));
          expect(diff <= step_bound * 4, a[i].first, " differs by ", diff, " after 4 steps");
        }
      },
      std::chrono::seconds(90));
  fs::remove_all(folder);

  // What moves on the wire: bf16 parameters gathered, f32 gradients
  // reduce-scattered. Without resharding after forward each unit is
  // gathered once and reduced once per step, over the same padded blocks,
  // so the reduce_scatters carry twice the all_gathers' bytes (once in f32).
  for (const char* precision : {"bf16", "f32"}) {
    const train::TrainConfig one_step =
        base(1, {"parallel.dp_shard=2", "parallel.fsdp_reshard_after_forward=false",
                 str_cat("training.mixed_precision=\"", precision, "\"")});
    run_world(2, [&](dist::ProcessGroup& world) {
      dist::DeviceMesh mesh = train::build_mesh(borrow(world), one_step.parallel);
      train::Parallelized par =
          train::parallelize(meta_model(one_step), mesh, one_step, Device::cpu());
      Generator gen(7);
      const Tensor x = ops::randint(0, one_step.model.vocab_size, {4, one_step.model.seq_len},
                                    {DType::kI64}, &gen);
      par.forward_backward(x, x);
      for (const auto& [n, p] : par.named_parameters())
        expect(p.dtype() == DType::kF32 && p.grad().dtype() == DType::kF32, n,
               ": the shard or its gradient is not f32");
      uint64_t gathered = 0, reduced = 0;
      std::set<dist::ProcessGroup*> seen;
      for (const auto& g : par.comm_groups()) {
        if (!seen.insert(g.get()).second) continue;
        gathered += g->stats()[dist::OpType::kAllGather].bytes;
        reduced += g->stats()[dist::OpType::kReduceScatter].bytes;
      }
      const uint64_t ratio = std::string(precision) == "bf16" ? 2 : 1;
      expect(gathered > 0 && reduced == ratio * gathered, precision, ": ", gathered,
             " bytes all-gathered, ", reduced, " reduce-scattered, not ", ratio, "x");
    });
  }
}

TEST_CASE("bf16 under DDP, TP, PP and CP trains as one process under the same autocast",
          "[train][mixed]") {
  // The products are bf16 on both sides, from the same f32 parameters; only
  // the order of the sums differs (a row-parallel product's partial sums, a
  // replica's half of the batch), each rounded to bf16 at most once more:
  // the losses within 4 u, u = 2^-9.
  const double u = std::ldexp(1.0, -9);
  const std::vector<std::string> bf16 = {"training.mixed_precision=\"bf16\""};
  const std::vector<std::pair<std::vector<std::string>, std::string>> layouts = {
      {{"parallel.dp_replicate=2"}, "ddp 2"},
      {{"parallel.tp=2", "parallel.sequence_parallel=true"}, "tp 2 + sp"},
      {{"parallel.cp=2"}, "cp 2"},
      {{"parallel.pp=2", "model.tie_embeddings=false"}, "pp 2"}};
  for (const auto& [layout, name] : layouts) {
    std::vector<std::string> o = layout;
    o.insert(o.end(), bf16.begin(), bf16.end());
    const train::TrainConfig c = base(3, o);
    std::vector<std::string> one = bf16;
    if (c.parallel.pp > 1) one.push_back("model.tie_embeddings=false");
    one.push_back(reference_chunks(c));
    run_world(
        2,
        [&](dist::ProcessGroup& world) {
          const std::vector<double> want = run_single(base(3, one));
          const auto got = train::run_training(c, borrow(world)).losses;
          expect_close(got, want, 4 * u, str_cat(name, ", bf16 (rank ", world.rank(), ")"));
        },
        std::chrono::seconds(90));
  }
}

TEST_CASE("a unit sharded on the meta device and never materialized refuses its forward",
          "[train][meta][fsdp]") {
  const train::TrainConfig c = small("", {"parallel.dp_shard=2"});
  run_world(2, [&](dist::ProcessGroup& w) {
    dist::DeviceMesh mesh(borrow(w), {2}, {"dp_shard"});
    const auto model = meta_model(c);
    dist::FsdpOptions o;
    o.shard_axis = "dp_shard";
    for (size_t i = 0; i < model->layers->size(); ++i)
      dist::fully_shard(model->layers->at(i), mesh, o);
    dist::fully_shard(model, mesh, o);
    const Tensor x = ops::zeros({1, c.model.seq_len}, {DType::kI64});
    try {
      (*model)(x);
      expect(false, "a forward over meta shards ran");
    } catch (const Error& e) {
      expect(std::string(e.what()).find("still on the meta device") != std::string::npos,
             "the message '", e.what(), "' does not say the shards are on meta");
    }
  });
}
