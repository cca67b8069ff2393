#!/usr/bin/env bash
# Sets up, builds and runs every test: the README's second command, and CI's.
# A CPU-only check configures and builds SPMD_CUDA=OFF as well (no tests: the
# same sources ran above), so both configurations stay green.
#   scripts/test.sh            all tests
#   scripts/test.sh -R store   only tests whose name matches
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSPMD_CUDA=AUTO >/dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs" "$@")

if [ "${SPMD_SKIP_CPU_ONLY_BUILD:-0}" != 1 ] && [ $# -eq 0 ]; then
  echo "== CPU-only configuration (SPMD_CUDA=OFF): configure and build"
  cmake -S . -B build-cpu -DCMAKE_BUILD_TYPE=Release -DSPMD_CUDA=OFF -DSPMD_BUILD_TESTS=OFF >/dev/null
  cmake --build build-cpu -j"$jobs"
fi
