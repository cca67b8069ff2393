#!/usr/bin/env bash
# Fills .deps/ (git-ignored) with copies of spmd's header-only dependencies
# taken from this machine's /usr/include (Eigen, Catch2, CLI11, toml++,
# nlohmann-json) and NCCL's header, so that a machine without Debian's -dev
# packages (the lent GPU machine: no network) can build spmd with
#   cmake -DSPMD_DEPS_DIR=$PWD/.deps ...
# scripts/gpu-check.sh does that; carry .deps with the command that runs it.
# Run scripts/setup.sh first if /usr/include lacks them.
set -euo pipefail
cd "$(dirname "$0")/.."

dest=.deps
rm -rf "$dest"
mkdir -p "$dest"
cp -r /usr/include/eigen3 "$dest/eigen3"
for d in catch2 CLI toml++ nlohmann; do
  [ -d "/usr/include/$d" ] || { echo "make-deps: /usr/include/$d is missing: run scripts/setup.sh" >&2; exit 1; }
  cp -r "/usr/include/$d" "$dest/$d"
done
# NCCL: its header, for a CUDA toolkit that lacks it (the library must come
# from the machine that runs the build: gpu-check.sh looks for it there).
for h in /usr/local/cuda/include/nccl.h /usr/include/nccl.h; do
  if [ -f "$h" ]; then
    mkdir -p "$dest/nccl/include"
    cp "$h" "$dest/nccl/include/"
    break
  fi
done
echo "make-deps: $(du -sh "$dest" | cut -f1) in $dest: $(ls "$dest" | tr '\n' ' ')"
