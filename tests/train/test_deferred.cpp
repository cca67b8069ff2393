// spmd-train's model built on the meta device: under every layout of
// configs/ and the compositions, the pieces each rank materializes, gathered
// whole, equal the one-process model's initial parameters bit for bit; and
// an FSDP rank never holds more than its shards and one unit while it
// builds, lays out and initializes the model.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>

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
