// spmd-train: train the transformer under the layout a TOML config names.
//
//   spmdrun --standalone --nproc-per-node 2 spmd-train --config configs/fsdp.toml
//   spmd-train --config configs/fsdp.toml --training.steps=100 --print-config
//
// Every `--section.key=value` (or `--section.key value`) overrides the file.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/comm/init.h"
#include "runtime/hash_store.h"
#include "train/config.h"
#include "train/trainer.h"

using namespace spmd;

namespace {

constexpr const char* kUsage =
    "usage: spmd-train --config FILE [--section.key=value ...] [--print-config]\n"
    "  Runs under spmdrun (or with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set); alone,\n"
    "  it is a world of one. --print-config prints the resolved config and exits.\n";

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  bool print = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--print-config") {
      a.print = true;
    } else if (arg == "--config" || arg.rfind("--config=", 0) == 0) {
      if (arg == "--config") {
        SPMD_CHECK(i + 1 < argc, "--config needs a file");
        a.config = argv[++i];
      } else {
        a.config = arg.substr(9);
      }
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
  return a;
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
    dist::InitOptions init;
    if (std::getenv("RANK") == nullptr) {  // alone: a world of one
      init.store = std::make_shared<HashStore>();
      init.world_size = 1, init.rank = 0;
    }
    auto world = dist::init_process_group(init);
    train::run_training(config, world);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-train: %s\n", e.what());
    return 1;
  }
  return 0;
}
