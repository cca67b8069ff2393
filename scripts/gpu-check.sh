#!/usr/bin/env bash
# The GPU check: one prepared script for a lent GPU machine (no network,
# nvcc and CMake present, none of Debian's -dev packages), in two calls that
# each fit the machine's 600 s per command:
#   scripts/gpu-check.sh build        configure and build for sm_90 against the
#                                     header copies in .deps/ (make them on the
#                                     build machine with scripts/make-deps.sh and
#                                     carry .deps; build-gpu/ stays for the next call)
#   scripts/gpu-check.sh run          1. every [gpu]/[nccl] test: the op table,
#                                     allocator and streams, attention, KV-cache
#                                     generation (against the CPU and a full
#                                     forward), the CUDA training step, the
#                                     1-rank NCCL group, the TCP
#                                     backend with CUDA tensors, and each parallel
#                                     strategy's equivalence on CUDA (two ranks
#                                     sharing the GPU over TCP: DDP, tensor and
#                                     pipeline parallelism, FSDP and FSDP x TP,
#                                     expert parallelism);
#                                     2. the kernel benchmark (bandwidth against a
#                                     device copy, GEMM against raw cuBLAS, fused
#                                     against composed attention); 3. the GPT-2 124M
#                                     training step (B 8, T 1024, bf16 autocast) of
#                                     spmd and of PyTorch eager on the same GPU;
#                                     and the hf_transformers row: spmd-train's
#                                     export --format hf loaded by transformers'
#                                     GPT2LMHeadModel, its logits against spmd's
#                                     to 1e-4 (tests/train/test_hf_transformers.sh;
#                                     "skipped" where Python has no transformers)
#   scripts/gpu-check.sh              both, one after the other
# `--no-bench` (with run, or alone) skips 2 and 3. Each row of the table is
# printed as it finishes. A test's outcome is its exit code: 0 passed, 77
# skipped its GPU cases (tests/skip.h), anything else failed. Logs go to $OUT
# (the device tool's output folder) or build-gpu/out.
# Without a GPU it builds and runs the test binaries, whose GPU cases skip,
# and ends with "no GPU: N cases skipped" and exit status 77: a dry run, never
# a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
out=${OUT:-build-gpu/out}
mkdir -p "$out"
bench=1
phase=all
for arg in "$@"; do
  case "$arg" in
    build | run) phase=$arg ;;
    --no-bench) bench=0 ;;
    *) echo "gpu-check: unknown argument $arg (build, run, --no-bench)" >&2; exit 2 ;;
  esac
done
GPT2_STEPS=${GPT2_STEPS:-30}

say() { echo "== gpu-check [$((SECONDS - start))s] $*"; }
die() { echo "gpu-check: $*" >&2; exit 1; }

[ -d .deps/eigen3 ] || die ".deps/ is missing: run scripts/make-deps.sh on the build machine and carry .deps"
gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm \
    --format=csv,noheader | tee "$out/gpu.txt"
else
  say "no GPU here (nvidia-smi finds none): a dry run; the GPU steps will be skipped"
fi

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

# --- Build: only the targets below ---------------------------------------------------
tests=(test_gpu_ops test_gpu_runtime test_attention test_autograd_nn test_generate test_comm_nccl
       test_ddp_equivalence test_tp_equivalence test_pp_equivalence test_fsdp_equivalence test_expert_parallel
       test_trainer)
targets=("${tests[@]}" spmd-train spmdrun)  # the last two for the hf_transformers row
[ $bench = 1 ] && targets+=(spmd-bench-gpu-kernels spmd-bench-train)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ "$phase" != run ]; then
  say "configure (sm_90, SPMD_DEPS_DIR=.deps)"
  cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DSPMD_CUDA=ON \
    -DSPMD_CUDA_ARCHS=90 -DSPMD_DEPS_DIR="$PWD/.deps" "${nccl_args[@]}" >"$out/configure.log" 2>&1 \
    || { tail -30 "$out/configure.log"; die "configure failed"; }
  say "build ${targets[*]}"
  cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" >"$out/build.log" 2>&1 \
    || { grep -E "error|Error" "$out/build.log" | head -30; die "build failed"; }
  say "built"
fi
[ "$phase" = build ] && exit 0
find_bin() { find build-gpu -name "$1" -type f -perm -u+x | head -1; }

# --- 1. Tests: only their [gpu] and [nccl] cases (CI runs the rest) ------------------
declare -A result
skipped=0
# Each test's log is written under build-gpu/logs and appended to one file,
# $out/tests.log, so that a run leaves few files under $OUT (at most 8 come back).
logs=build-gpu/logs
rm -rf "$logs" && mkdir -p "$logs"
: >"$out/tests.log"
keep_log() { { echo "===== $1"; cat "$logs/$1.log"; } >>"$out/tests.log"; }
for t in "${tests[@]}"; do
  bin=$(find_bin "$t")
  [ -n "$bin" ] || { result[$t]="FAILED (not built: run scripts/gpu-check.sh build)"; continue; }
  timeout 240 "$bin" "[gpu],[nccl]" --durations yes >"$logs/$t.log" 2>&1
  rc=$?
  case $rc in
    0) result[$t]="passed" ;;
    77)
      n=$(sed -n 's/^no GPU: \([0-9]*\) test case.*/\1/p' "$logs/$t.log" | tail -1)
      skipped=$((skipped + ${n:-0}))
      result[$t]="skipped: no GPU (${n:-?} cases)"
      [ $gpu = 1 ] && result[$t]="SKIPPED its GPU cases although nvidia-smi sees a GPU"
      ;;
    *)
      result[$t]="FAILED (exit $rc, see tests.log)"
      grep -E "FAILED|failed|REQUIRE|CHECK|with expansion|differ|threw" "$logs/$t.log" | head -40
      ;;
  esac
  summary=""  # Catch's count line, which counts a skipped case as passed
  [ $rc = 0 ] && summary=$(grep -E "^(test cases|All tests passed)" "$logs/$t.log" | tail -1)
  printf '%-22s %-50s %s\n' "$t" "${result[$t]}" "$summary"
  keep_log "$t"
done

# --- The Hugging Face export loaded by transformers (CPU ranks; its own row) -------------
hf_transformers_row() {
  local run train
  run=$(find_bin spmdrun) train=$(find_bin spmd-train)
  if [ -z "$run" ] || [ -z "$train" ]; then
    result[hf_transformers]="FAILED (spmdrun or spmd-train not built: run scripts/gpu-check.sh build)"
  else
    PYTHON=$(command -v python3) timeout 300 bash tests/train/test_hf_transformers.sh "$run" \
      "$train" >"$logs/hf_transformers.log" 2>&1
    hf_outcome $?
    keep_log hf_transformers
  fi
  printf '%-22s %s\n' hf_transformers "${result[hf_transformers]}"
}
hf_outcome() {  # the script's exit code
  case $1 in
    0) result[hf_transformers]="passed: $(grep -o 'max |difference| [0-9.e+-]*' \
         "$logs/hf_transformers.log" | tail -1)" ;;
    77) result[hf_transformers]="skipped: $(grep -m1 SKIPPED "$logs/hf_transformers.log")" ;;
    *) result[hf_transformers]="FAILED (exit $1, see tests.log)"
       tail -20 "$logs/hf_transformers.log" ;;
  esac
}
hf_transformers_row

# --- Table rows -------------------------------------------------------------------------
field() { grep -E "^$1 " "$2" 2>/dev/null | tail -1 | tr ' ' '\n' | awk -F= -v k="$3" '$1 == k {print $2}'; }
gpt2_row() {  # name, prefix, file
  local f=("$2" "$3")
  printf '| %-32s | %8s | %7s | %16s | %7s | %5s | %8s | %s -> %s |\n' "$1" \
    "$(field "${f[@]}" tokens_per_s)" "$(field "${f[@]}" step_ms)" \
    "$(field "${f[@]}" forward_ms)/$(field "${f[@]}" backward_ms)/$(field "${f[@]}" optimizer_ms)" \
    "$(field "${f[@]}" tflops)" "$(field "${f[@]}" mfu)" "$(field "${f[@]}" peak_mem_mb)" \
    "$(field "${f[@]}" loss_first)" "$(field "${f[@]}" loss_last)"
}
gpt2_header() {
  echo "GPT-2 124M training step, B 8, T 1024, bf16 autocast, AdamW; median of $GPT2_STEPS steps."
  echo "MFU: (6 x weights a token meets + 12 L C T) FLOPs per token (train/flops.h) x tokens/s"
  echo "over the dense bf16 peak: spmd's from tensor/gpu_peak.h, torch's --peak-tflops (989, H200)."
  printf '| %-32s | %8s | %7s | %16s | %7s | %5s | %8s | %s |\n' side tokens/s "step ms" \
    "fwd/bwd/opt ms" TFLOP/s MFU "peak MiB" "loss first -> last"
}

# --- 2 and 3. Benchmarks ---------------------------------------------------------------
gpt2_args=(--device cuda --config gpt2 --batch 8 --steps "$GPT2_STEPS" --warmup 5)
if [ $bench = 1 ] && [ $gpu = 1 ]; then
  say "kernel benchmark"
  timeout 240 "$(find_bin spmd-bench-gpu-kernels)" --json "$out/gpu_bench.jsonl" \
    >"$out/bench_kernels.txt" 2>&1 || result[bench_kernels]="FAILED (see bench_kernels.txt)"
  cat "$out/bench_kernels.txt"
  say "GPT-2 124M training step: spmd"
  timeout 180 "$(find_bin spmd-bench-train)" "${gpt2_args[@]}" >"$out/bench_gpt2_spmd.txt" 2>&1 \
    || result[bench_gpt2]="spmd FAILED (see bench_gpt2_spmd.txt)"
  gpt2_header
  gpt2_row "spmd" spmd "$out/bench_gpt2_spmd.txt"
  say "GPT-2 124M training step: PyTorch eager"
  timeout 240 python3 bench/peers/torch_train.py "${gpt2_args[@]}" \
    >"$out/bench_gpt2_torch.txt" 2>&1 || result[bench_gpt2]="torch FAILED (see bench_gpt2_torch.txt)"
  gpt2_row "torch eager (sdpa, fused AdamW)" torch "$out/bench_gpt2_torch.txt"
elif [ $bench = 1 ]; then
  say "skipped: the kernel benchmark and the GPT-2 benchmark need a GPU"
fi

echo
echo "== gpu-check summary ($((SECONDS - start))s; logs in $out)"
[ -f "$out/gpu.txt" ] && cat "$out/gpu.txt"
for t in "${tests[@]}" hf_transformers; do printf '%-22s %s\n' "$t" "${result[$t]}"; done
if [ -f "$out/bench_kernels.txt" ]; then
  echo
  cat "$out/bench_kernels.txt"
fi
if [ -f "$out/bench_gpt2_spmd.txt" ] || [ -f "$out/bench_gpt2_torch.txt" ]; then
  echo
  grep -h "^#" "$out/bench_gpt2_torch.txt" 2>/dev/null
  gpt2_header
  gpt2_row "spmd" spmd "$out/bench_gpt2_spmd.txt"
  gpt2_row "torch eager (sdpa, fused AdamW)" torch "$out/bench_gpt2_torch.txt"
  s=$(field spmd "$out/bench_gpt2_spmd.txt" tokens_per_s)
  p=$(field torch "$out/bench_gpt2_torch.txt" tokens_per_s)
  [ -n "$s" ] && [ -n "$p" ] && awk -v s="$s" -v p="$p" \
    'BEGIN {printf "spmd / torch eager: %.2fx tokens/s (target >= 1.00)\n", s / p}'
fi
for key in "${!result[@]}"; do
  case "${result[$key]}" in passed* | skipped:*) ;; *) echo "gpu-check: $key: ${result[$key]}"; fail=1 ;; esac
done
[ -n "${fail:-}" ] && exit 1
if [ $gpu = 0 ]; then
  echo "no GPU: $skipped cases skipped"
  exit 77
fi
exit 0
