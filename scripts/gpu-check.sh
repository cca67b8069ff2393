#!/usr/bin/env bash
# The GPU check: one command for a lent GPU machine (no network, nvcc and
# CMake present, none of Debian's -dev packages). It builds spmd's CUDA
# backend for sm_90 against the header copies in .deps/ (make them here with
# scripts/make-deps.sh and carry .deps), runs the [gpu] tests, then the GPU
# kernel benchmarks, and prints a short table. Logs and JSON results go to
# $OUT (the device tool's output folder) or build-gpu/out. Budget: < 8 min.
#
#   scripts/gpu-check.sh            build, test, benchmark
#   scripts/gpu-check.sh --no-bench build and test only
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
out=${OUT:-build-gpu/out}
mkdir -p "$out"
bench=1
[ "${1:-}" = "--no-bench" ] && bench=0

say() { echo "== gpu-check [$((SECONDS - start))s] $*"; }
die() { echo "gpu-check: $*" >&2; exit 1; }

[ -d .deps/eigen3 ] || die ".deps/ is missing: run scripts/make-deps.sh on the build machine and carry .deps"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm \
  --format=csv,noheader | tee "$out/gpu.txt"

# NCCL: the toolkit's, else the one PyTorch's wheels bring, with .deps' header.
nccl_args=()
if [ ! -f /usr/local/cuda/include/nccl.h ] && [ ! -f /usr/include/nccl.h ]; then
  nccl_dir=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
  lib=$(ls "$nccl_dir"/lib/libnccl.so* 2>/dev/null | head -1)
  [ -n "$lib" ] || lib=$(ldconfig -p | awk '/libnccl\.so/ {print $NF; exit}')
  inc="$nccl_dir/include"
  [ -f "$inc/nccl.h" ] || inc="$PWD/.deps/nccl/include"
  [ -n "$lib" ] && [ -f "$inc/nccl.h" ] || die "NCCL not found (toolkit, python nvidia.nccl, ldconfig)"
  nccl_args=(-DSPMD_NCCL_INCLUDE_DIR="$inc" -DSPMD_NCCL_LIBRARY="$lib")
  say "NCCL: $lib"
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
say "configure (sm_90, SPMD_DEPS_DIR=.deps)"
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DSPMD_CUDA=ON \
  -DSPMD_CUDA_ARCHS=90 -DSPMD_DEPS_DIR="$PWD/.deps" "${nccl_args[@]}" >"$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; die "configure failed"; }
say "build"
targets=(test_gpu_ops test_gpu_runtime test_attention)
[ $bench = 1 ] && targets+=(spmd-bench-gpu-kernels)
cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" >"$out/build.log" 2>&1 \
  || { grep -E "error|Error" "$out/build.log" | head -30; die "build failed"; }
say "built in $((SECONDS - start))s"

declare -A result
for t in test_gpu_ops test_gpu_runtime test_attention; do
  say "test $t"
  bin=$(find build-gpu/tests -name "$t" -type f -perm -u+x | head -1)
  if timeout 240 "$bin" --durations yes >"$out/$t.log" 2>&1; then
    result[$t]="passed"
  else
    result[$t]="FAILED"
    grep -E "FAILED|failed|REQUIRE|CHECK|with expansion|differ|threw" "$out/$t.log" | head -40
  fi
  tail -3 "$out/$t.log"
done

if [ $bench = 1 ]; then
  say "benchmarks"
  bin=$(find build-gpu/bench -name spmd-bench-gpu-kernels -type f | head -1)
  timeout 240 "$bin" --json "$out/gpu_bench.jsonl" >"$out/bench.txt" 2>&1 || result[bench]="FAILED"
fi

echo
echo "== gpu-check summary ($((SECONDS - start))s)"
for t in test_gpu_ops test_gpu_runtime test_attention; do printf '%-20s %s\n' "$t" "${result[$t]}"; done
[ $bench = 1 ] && cat "$out/bench.txt"
for t in test_gpu_ops test_gpu_runtime test_attention; do [ "${result[$t]}" = passed ] || exit 1; done
[ "${result[bench]:-ok}" = ok ] || exit 1
