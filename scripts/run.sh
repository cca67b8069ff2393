#!/usr/bin/env bash
# Sets up, builds and runs the project's main job: the README's first command.
# The job is spmd-train with configs/default.toml: spmdrun starts 2 ranks on
# this machine that train the tiny GPT-2 fully sharded (FSDP over the TCP
# backend) on a text embedded in the repository: its own documentation and
# headers, concatenated by the build (nothing is downloaded). Rank 0 prints
# the loss, the gradient norm, the lr and the tokens/s; every rank writes
# JSON lines to runs/default/.
#   scripts/run.sh                          600 steps on 2 ranks
#   scripts/run.sh --training.steps=100     any --section.key=value of the config
# (The one-process baseline is build/examples/01_train_single, the
# tensor tour build/examples/tensor_tour.)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"

# The default job: configs/default.toml (the tiny GPT-2, FSDP over 2 ranks) on
# the embedded text, the repository's own prose and headers that the build
# assembled into build/embedded_text.txt.
echo "run.sh: spmd-train --config configs/default.toml on build/embedded_text.txt, 2 ranks"
exec build/launcher/spmdrun --standalone --nproc-per-node 2 \
  build/train/spmd-train --config configs/default.toml "$@"
