#!/usr/bin/env bash
# Sets up, builds and runs the project's main job: the README's first command.
# Until the trainer exists it runs the most complete program there is: the
# tensor-core tour (examples/tensor_tour), which ends by training a small
# classifier.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
exec build/examples/tensor_tour "$@"
