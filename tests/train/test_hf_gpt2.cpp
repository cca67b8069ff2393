// Hugging Face's GPT-2 layout, out and in (train/hf_gpt2.h):
//
// - a checkpoint exported to the folder and read back is the same model to
//   the bit (tied and untied heads), also under the original release's
//   names, beside the mask buffers older files hold, with a tensor in f64;
// - a run started from the folder under FSDP, TP, PP, DDP and FSDP x TP
//   matches one process started from it, whose first loss is the folder's
//   model's loss on the first batch, computed here by hand; a run that
//   resumes ignores init_from;
// - each bad input (a tensor missing, of another shape or unknown, a
//   config.json that disagrees, a model that is not GPT-2's) is refused
//   naming it.
//
// tests/train/hf_layout.py checks the file's names, shapes and orientation
// independently, with Python's standard library alone.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/autograd.h"
#include "parallel/data_loader.h"
#include "tests/train/trainer_test_util.h"
#include "train/hf_gpt2.h"
#include "train/run_checks.h"

using namespace spmd;
using namespace spmd::train;
using namespace spmd::train::testing;
namespace fs = std::filesystem;

namespace {

const std::string kRoot = "/tmp/spmd_test_hf_gpt2_" + std::to_string(::getpid());

// A run of 3 steps (seed 5, so that its weights are neither the seed-0
// model's nor untrained) saved to <kRoot>/<tag>_ck, exported to
// <kRoot>/<tag>_hf. Returns the run's config.
TrainConfig exported(const std::string& tag, std::vector<std::string> extra = {}) {
  const std::string ck = kRoot + "/" + tag + "_ck";
  fs::remove_all(ck);
  extra.push_back("checkpoint.folder=\"" + ck + "\"");
  extra.push_back("training.seed=5");
  const TrainConfig c = base(3, extra);
  run_single_result(c);
  export_model(c, kRoot + "/" + tag + "_hf", false, ExportFormat::kHf);
  return c;
}

// The whole model's parameters as the meta device names and shapes them.
NamedTensors meta_parameters(const TrainConfig& c) {
  DefaultDeviceGuard meta(Device::meta());
  return nn::Transformer(transformer_config(c.model)).named_parameters();
}

// A fresh model (seed 99) filled from an HF folder.
std::shared_ptr<nn::Transformer> read_back(const TrainConfig& c, const std::string& dir) {
  auto model = std::make_shared<nn::Transformer>(transformer_config(c.model), 99);
  load_hf_gpt2(dir, c.model, meta_parameters(c), model->named_parameters());
  return model;
}

// `dir`'s model.safetensors rewritten by `edit`.
template <class F>
void edit_weights(const std::string& dir, F&& edit) {
  const std::string path = dir + "/model.safetensors";
  SafetensorsFile f = load_safetensors(path);
  edit(f.tensors);
  save_safetensors(path, f.tensors, f.metadata);
}

// `dir`'s config.json with key set to value.
void edit_config(const std::string& dir, const std::string& key, const nlohmann::json& value) {
  const std::string path = dir + "/config.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
  j[key] = value;
  std::ofstream(path) << j.dump(2);
}

}  // namespace

TEST_CASE("a checkpoint exported to the HF folder reads back bit for bit", "[hf]") {
  for (const bool tied : {true, false}) {
    const std::string tag = tied ? "tied" : "untied";
    const TrainConfig c =
        exported(tag, {std::string("model.tie_embeddings=") + (tied ? "true" : "false")});
    const std::string dir = kRoot + "/" + tag + "_hf";
    const SafetensorsIndex index = read_safetensors_index(dir + "/model.safetensors");
    CHECK(index.entries.contains("lm_head.weight") == !tied);
    CHECK(index.metadata.at("format") == "pt");
    const NamedTensors want = whole_parameters(c, c.checkpoint.folder);
    const NamedTensors got = read_back(c, dir)->named_parameters();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(tag << ": " << want[i].first);
      REQUIRE(got[i].first == want[i].first);
      CHECK(ops::to_vector<float>(got[i].second) == ops::to_vector<float>(want[i].second));
    }
  }
  fs::remove_all(kRoot);
}

TEST_CASE("the original release's names, mask buffers and other float dtypes read too", "[hf]") {
  const TrainConfig c = exported("release");
  const std::string dir = kRoot + "/release_hf";
  // GPT2Model's names (no "transformer."), the causal-mask buffers older
  // transformers saved, and wpe in f64 (whose f32 values convert exactly).
  edit_weights(dir, [](TensorMap& t) {
    TensorMap bare;
    for (const auto& [name, v] : t) bare[name.substr(std::string("transformer.").size())] = v;
    bare["wpe.weight"] = ops::to(bare.at("wpe.weight"), DType::kF64);
    bare["h.0.attn.bias"] = ops::ones(Shape{1, 1, 16, 16});
    bare["h.1.attn.masked_bias"] = ops::ones(Shape{});
    t = bare;
  });
  const NamedTensors want = whole_parameters(c, c.checkpoint.folder);
  const NamedTensors got = read_back(c, dir)->named_parameters();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(want[i].first);
    CHECK(ops::to_vector<float>(got[i].second) == ops::to_vector<float>(want[i].second));
  }
  fs::remove_all(kRoot);
}

TEST_CASE("a run that resumes ignores init_from", "[hf]") {
  exported("resume");
  const std::string ck = kRoot + "/resume_run", plain = kRoot + "/resume_plain";
  const std::string from = "model.init_from=\"hf:" + kRoot + "/resume_hf\"";
  run_single_result(base(2, {from, "checkpoint.folder=\"" + ck + "\""}));
  fs::copy(ck, plain, fs::copy_options::recursive);
  const TrainResult a = run_single_result(base(3, {from, "checkpoint.folder=\"" + ck + "\""}));
  const TrainResult b = run_single_result(base(3, {"checkpoint.folder=\"" + plain + "\""}));
  CHECK(a.first_step == 2);
  REQUIRE(a.losses.size() == 1);
  CHECK(a.losses == b.losses);
  fs::remove_all(kRoot);
}

TEST_CASE("init_from under FSDP or TP or PP or DDP matches one process started from the folder",
          "[hf]") {
  exported("layouts");
  const std::string from = "model.init_from=\"hf:" + kRoot + "/layouts_hf\"";
  // One process: its first loss is the folder's model's loss on batch 0.
  const TrainConfig c = base(2, {from});
  const TrainResult single = run_single_result(c);
  const double loss = [&] {
    const auto model = read_back(c, kRoot + "/layouts_hf");
    const data::TextDataset dataset = load_dataset(c);
    dist::DataLoader loader(dataset, c.model.seq_len, c.training.global_batch, 1, 0,
                            c.training.seed);
    const data::Batch batch = loader.next();
    NoGradGuard no_grad;
    return double(cross_entropy((*model)(batch.x), batch.y).item<float>());
  }();
  CHECK(std::abs(single.losses[0] - loss) <= 1e-6 * loss);
  // And not the seed's model: the folder's weights were trained.
  const TrainResult seeded = run_single_result(base(1, {}));
  CHECK(std::abs(seeded.losses[0] - loss) > 1e-3 * loss);
  check_layout(2, {"parallel.dp_shard=2"}, "fsdp 2 from hf", {from});
  check_layout(2, {"parallel.tp=2"}, "tp 2 from hf", {from});
  check_layout(2, {"parallel.dp_replicate=2"}, "ddp 2 from hf", {from});
  check_layout(4, {"parallel.dp_shard=2", "parallel.tp=2"}, "fsdp 2 x tp 2 from hf", {from});
  // A pipeline needs an untied head (on the last stage): lm_head.weight.
  exported("untied", {"model.tie_embeddings=false"});
  check_layout(2, {"parallel.pp=2"}, "pp 2 from hf",
               {"model.tie_embeddings=false", "model.init_from=\"hf:" + kRoot + "/untied_hf\""});
  fs::remove_all(kRoot);
}

TEST_CASE("a bad HF folder or a model that is not GPT-2 shaped is refused naming why", "[hf]") {
  const TrainConfig c = exported("bad");
  const std::string dir = kRoot + "/bad_hf", copy = kRoot + "/bad_copy";
  const auto fresh = [&] {
    fs::remove_all(copy);
    fs::copy(dir, copy);
  };
  const auto load = [&] { return error_of([&] { read_back(c, copy); }); };

  fresh();
  edit_weights(copy, [](TensorMap& t) { t.erase("transformer.h.1.mlp.c_fc.weight"); });
  CHECK_THAT(load(),
             Catch::Contains("missing tensor 'transformer.h.1.mlp.c_fc.weight' ([32, 128]"));

  fresh();
  edit_weights(copy, [](TensorMap& t) {
    t["transformer.h.0.attn.c_attn.weight"] = ops::zeros(Shape{96, 32});  // a Linear's [out, in]
  });
  CHECK_THAT(load(), Catch::Contains("tensor 'transformer.h.0.attn.c_attn.weight' is [96, 32] but "
                                     "the model needs [32, 96]"));

  fresh();
  edit_weights(copy, [](TensorMap& t) { t["transformer.h.2.ln_1.weight"] = ops::ones(Shape{32}); });
  CHECK_THAT(load(), Catch::Contains("unknown tensor 'transformer.h.2.ln_1.weight' [32]"));

  fresh();
  edit_weights(copy, [](TensorMap& t) { t["lm_head.weight"] = t.at("transformer.wte.weight"); });
  CHECK_THAT(load(), Catch::Contains("unknown tensor 'lm_head.weight' [256, 32] "
                                     "(model.tie_embeddings = true: the head is wte)"));

  fresh();
  edit_config(copy, "n_embd", 64);
  CHECK_THAT(load(), Catch::Contains("config.json: n_embd is 64 but model.d_model is 32"));
  fresh();
  edit_config(copy, "n_positions", 1024);
  CHECK_THAT(load(), Catch::Contains("config.json: n_positions is 1024 but model.seq_len is 16"));
  fresh();
  edit_config(copy, "activation_function", "gelu");
  CHECK_THAT(load(), Catch::Contains("activation_function is \"gelu\", but this model's GELU is "
                                     "the tanh approximation"));

  // Through the trainer: refused before the first step.
  fresh();
  edit_config(copy, "n_layer", 3);
  TrainConfig run = base(1, {"model.init_from=\"hf:" + copy + "\""});
  CHECK_THAT(error_of([&] { run_single_result(run); }),
             Catch::Contains("config.json: n_layer is 3 but model.n_layers is 2"));
  CHECK_THAT(error_of([] { base(1, {"model.init_from=\"gpt2\""}); }),
             Catch::Contains("model.init_from must be \"hf:PATH\""));

  // Export refuses what GPT-2's layout cannot hold, naming the key and value.
  TrainConfig llama = base(1, {"model.shape=\"llama\""});
  llama.checkpoint.folder = c.checkpoint.folder;
  CHECK_THAT(error_of([&] { export_model(llama, kRoot + "/x", false, ExportFormat::kHf); }),
             Catch::Contains("export --format hf: model.shape = \"llama\" has no Hugging Face "
                             "GPT-2 layout"));
  const TrainConfig moe = base(1, {"model.n_experts=2"});
  CHECK_THAT(error_of([&] { export_model(moe, kRoot + "/x", false, ExportFormat::kHf); }),
             Catch::Contains("export --format hf: model.n_experts = 2 has no Hugging Face"));
  const TrainConfig gqa = base(1, {"model.n_kv_heads=2"});
  CHECK_THAT(error_of([&] { export_model(gqa, kRoot + "/x", false, ExportFormat::kHf); }),
             Catch::Contains("model.n_kv_heads = 2 has no Hugging Face GPT-2 layout"));
  CHECK_FALSE(fs::exists(kRoot + "/x"));
  fs::remove_all(kRoot);
}
