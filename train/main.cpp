// spmd-train: train the transformer under the layout a TOML config names.
//
//   spmdrun --standalone --nproc-per-node 2 spmd-train --config configs/fsdp.toml
//   spmd-train --config configs/fsdp.toml --training.steps=100 --print-config
//   spmd-train export --config configs/fsdp.toml --out model.safetensors [--with-logits]
//   spmd-train export --config configs/fsdp.toml --format hf --out gpt2-folder
//   spmd-train --dry-run --world 16384 --rank 0 --model.preset='"llama3.1-405b"' ...
//
// Every `--section.key=value` (or `--section.key value`) overrides the file.
// export loads the latest checkpoint of checkpoint.folder (saved under any
// layout) into one whole model and writes it: by default as one safetensors
// file under PyTorch's names; with --format hf as a folder in Hugging Face's
// GPT-2 layout (model.safetensors and config.json, train/hf_gpt2.h), which
// model.init_from = "hf:FOLDER" reads back. --with-logits also writes the
// model's logits for a fixed batch of ids (<out>.logits.safetensors, or
// <out>/logits.safetensors with --format hf), for checking a port of the model.
// --dry-run runs one step of rank --rank of a world of --world ranks alone,
// on meta tensors through a fake process group, and prints that rank's
// counted memory beside its plan and each mesh axis's traffic
// (train/dry_run.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/comm/init.h"
#include "runtime/env.h"
#include "runtime/flag_checks.h"
#include "runtime/hash_store.h"
#include "train/config.h"
#include "train/dry_run.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

using namespace spmd;

namespace {

constexpr const char* kUsage =
    "usage: spmd-train --config FILE [--section.key=value ...] [--print-config]\n"
    "       spmd-train export --config FILE --out FILE.safetensors [--with-logits] [...]\n"
    "       spmd-train export --config FILE --format hf --out FOLDER [--with-logits] [...]\n"
    "       spmd-train --dry-run --world N --rank R --config FILE [--section.key=value ...]\n"
    "  Runs under spmdrun (or with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set); alone,\n"
    "  it is a world of one. --print-config prints the resolved config and exits.\n";

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  bool print = false;
  bool do_export = false, with_logits = false;
  std::string out;
  train::ExportFormat format = train::ExportFormat::kSpmd;
  bool dry_run = false;
  int64_t world = -1, rank = -1;  // --dry-run's; -1: not given
};

// The value of a whole-number flag (--world, --rank) in [min, max], or an
// error naming the flag, the value and the limit.
int64_t count_flag(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  const std::string e = flags::count_error(text, min, max);
  SPMD_CHECK(e.empty(), flag, ": ", e);
  return std::stoll(text);
}

Args parse_args(int argc, char** argv) {
  Args a;
  int first = 1;
  if (argc > 1 && std::string(argv[1]) == "export") a.do_export = true, first = 2;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (a.do_export && arg == "--out") {
      SPMD_CHECK(i + 1 < argc, "--out needs a file");
      a.out = argv[++i];
    } else if (a.do_export && arg == "--format") {
      SPMD_CHECK(i + 1 < argc, "--format needs spmd or hf");
      const std::string f = argv[++i];
      SPMD_CHECK(f == "spmd" || f == "hf", "--format must be spmd (one file, the model's names) ",
                 "or hf (a Hugging Face GPT-2 folder), got '", f, "'");
      a.format = f == "hf" ? train::ExportFormat::kHf : train::ExportFormat::kSpmd;
    } else if (a.do_export && arg == "--with-logits") {
      a.with_logits = true;
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--dry-run") {
      a.dry_run = true;
    } else if (arg == "--world" || arg == "--rank") {
      SPMD_CHECK(i + 1 < argc, arg, " needs a whole number");
      const int64_t v = count_flag(arg, argv[++i], arg == "--world" ? 1 : 0, INT32_MAX);
      (arg == "--world" ? a.world : a.rank) = v;
    } else if (arg == "--print-config") {
      a.print = true;
    } else if (arg == "--config" || arg.rfind("--config=", 0) == 0) {
      SPMD_CHECK(a.config.empty(), "--config given twice (", a.config,
                 " and another): give one file, and override its keys with --section.key=value");
      if (arg == "--config") {
        SPMD_CHECK(i + 1 < argc, "--config needs a file");
        a.config = argv[++i];
      } else {
        a.config = arg.substr(9);
      }
      SPMD_CHECK(!a.config.empty(), "--config needs a file, got \"\"");
    } else if (arg.rfind("--", 0) == 0 && arg.find('.') != std::string::npos) {
      std::string kv = arg.substr(2);
      if (kv.find('=') == std::string::npos) {  // --section.key value
        SPMD_CHECK(i + 1 < argc, arg, " needs a value");
        kv.push_back('=');
        kv.append(argv[++i]);
      }
      a.overrides.push_back(kv);
    } else {
      SPMD_THROW(InvalidArgument, "unknown argument '", arg, "'\n", kUsage);
    }
  }
  SPMD_CHECK(a.dry_run || (a.world < 0 && a.rank < 0),
             "--world and --rank belong to --dry-run (a real run takes them from its launcher)");
  if (a.dry_run) {
    SPMD_CHECK(!a.do_export, "--dry-run does not export; drop one of the two");
    SPMD_CHECK(a.world >= 1, "--dry-run needs --world N, the ranks of the layout");
    if (a.rank < 0) a.rank = 0;
  }
  return a;
}

// --dry-run: the rank's plan, then its step on meta tensors beside it.
void run_dry(const train::TrainConfig& config, int64_t world, int64_t rank) {
  train::check_dry_run(config, world, rank);
  const train::MemoryPlan plan = train::plan_memory(config, rank);
  const train::DryRun run = train::dry_run(config, world, rank);
  const train::StepTraffic traffic =
      train::step_traffic(config, plan, train::pipeline_rank(config.parallel, rank, world));
  std::fputs(train::dry_run_report(run, plan, traffic).c_str(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    const train::TrainConfig config = train::load_config(args.config, args.overrides);
    if (args.print) {
      std::fputs(train::to_toml(config).c_str(), stdout);
      return 0;
    }
    if (args.dry_run) {
      run_dry(config, args.world, args.rank);
      return 0;
    }
    if (args.do_export) {
      SPMD_CHECK(!args.out.empty(), "export: name the file (or, with --format hf, the folder) ",
                 "to write with --out");
      train::export_model(config, args.out, args.with_logits, args.format);
      return 0;
    }
    dist::InitOptions init;
    init.backend = train::comm_backend(config);
    if (!launched()) {  // alone (no spmdrun, mpirun or srun): a world of one
      init.store = std::make_shared<HashStore>();
      init.world_size = 1, init.rank = 0;
    }
    auto world = dist::init_process_group(init);
    if (args.config.empty() && world->rank() == 0)
      std::fprintf(stderr,
                   "spmd-train: no --config: training the built-in defaults (the tiny GPT-2 on "
                   "the text embedded in the binary, one process) with the overrides given "
                   "(--print-config shows them)\n");
    train::run_training(config, world);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-train: %s\n", e.what());
    return 1;
  }
  return 0;
}
