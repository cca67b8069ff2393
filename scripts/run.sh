#!/usr/bin/env bash
# Sets up, builds and runs the project's main job: the README's first command.
# Until the distributed trainer (spmd-train) takes over, the job is
# examples/01_train_single on a text embedded in the repository: its own
# documentation and headers, concatenated (nothing is downloaded).
#   scripts/run.sh                 600 steps of the tiny config
#   scripts/run.sh --steps 100     any flag of 01_train_single
# (The tensor-core tour that ran here before is build/examples/tensor_tour.)
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
echo "run.sh: training on $text ($(wc -c <"$text") bytes of the repository's own text)"
exec build/examples/01_train_single --data "$text" --config tiny --steps 600 \
  --threads "$(nproc)" "$@"
