#!/usr/bin/env bash
# Sets up, builds and runs the project's main job: the README's first command.
# The job is spmd-train with configs/default.toml: spmdrun starts 2 ranks on
# this machine that train the tiny GPT-2 fully sharded (FSDP over the TCP
# backend) on a text embedded in the repository: its own documentation and
# headers, concatenated by the build (nothing is downloaded). Rank 0 prints
# the loss, the gradient norm, the lr and the tokens/s, and at the end a
# summary; every rank writes JSON lines to runs/default/, and the last step
# is saved to runs/default/checkpoint. Then the loss curve is drawn to
# runs/default/loss.png, and the trained model continues a prompt
# (spmd-generate).
#   scripts/run.sh                          600 steps on 2 ranks
#   scripts/run.sh --training.steps=100     any --section.key=value of the config
# (The one-process baseline is build/examples/01_train_single, the
# tensor tour build/examples/tensor_tour.)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --job  # the build's packages and matplotlib, not the tests' peers
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
# Only what the job runs: the launcher, the trainer and the generator (the
# tests, examples and benchmarks are scripts/test.sh's).
cmake --build build -j"$(nproc)" --target spmdrun spmd-train spmd-generate

# The default job: configs/default.toml (the tiny GPT-2, FSDP over 2 ranks) on
# the embedded text, the repository's own prose and headers that the build
# assembled into build/embedded_text.txt. It ends with a summary, and saves a
# checkpoint to runs/default/checkpoint (a second run.sh resumes from it:
# delete runs/default to train afresh).
echo "run.sh: spmd-train --config configs/default.toml on build/embedded_text.txt, 2 ranks"
build/launcher/spmdrun --standalone --nproc-per-node 2 \
  build/train/spmd-train --config configs/default.toml "$@"

# The loss curve beside the metrics.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 bench/plot_run.py runs/default --out runs/default/loss.png >/dev/null &&
    echo "  plot:       runs/default/loss.png"
else
  echo "  plot:       none (matplotlib is missing: apt-get install python3-matplotlib," \
    "then bench/plot_run.py runs/default --out runs/default/loss.png)"
fi

# What the trained model writes: a continuation of a line of the text it read.
echo "run.sh: spmd-generate --config configs/default.toml (the checkpoint: 100 bytes after a prompt)"
build/train/spmd-generate --config configs/default.toml "$@" --prompt "The launcher " \
  --temperature 0.8 --top-k 40 --seed 1 --threads 1
