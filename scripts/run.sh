#!/usr/bin/env bash
# Sets up, builds and runs the project's main job: the README's first command.
# The job is data-parallel training of the transformer: spmdrun starts 2
# ranks on this machine, each runs examples/05_ddp (DistributedDataParallel +
# DistributedSampler over the TCP backend) on a text embedded in the
# repository: its own documentation and headers, concatenated (nothing is
# downloaded). Rank 0 prints the loss and the tokens/s of both ranks.
#   scripts/run.sh                 600 steps of the tiny config on 2 ranks
#   scripts/run.sh --steps 100     any flag of 05_ddp
# (The one-process baseline is build/examples/01_train_single, the
# tensor-core tour build/examples/tensor_tour.)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"

text=build/embedded_text.txt
{
  cat README.md docs/*.md
  find runtime tensor autograd -name '*.h' | sort | xargs cat
} >"$text"
echo "run.sh: training on $text ($(wc -c <"$text") bytes of the repository's own text), 2 ranks"
exec build/launcher/spmdrun --standalone --nproc-per-node 2 \
  build/examples/05_ddp --data "$text" --config tiny --steps 600 --threads 1 "$@"
