#!/usr/bin/env bash
# spmd-plan end to end on configs/llama.toml (a small Llama): the search's
# table, one layout term by term, --explain of the 8B preset on 8 devices,
# and each refusal's message and exit status (1, never a crash); and
# --write-config's file, which spmd-train trains with on 2 ranks.
#
# usage: test_plan_cli.sh SPMD_PLAN SOURCE_DIR SPMDRUN SPMD_TRAIN
set -uo pipefail
plan=$1 src=$2 spmdrun=$3 train=$4
fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
config=(--config "$src/configs/llama.toml")

# The search: a table whose first row splits no sample (dp_shard 4).
timeout 60 "$plan" "${config[@]}" --devices 4 --device-memory 1GB >"$tmp/search.txt" 2>&1 ||
  fail "search: $(cat "$tmp/search.txt")"
grep -q "layouts of 4 devices fit 1.0 GB each" "$tmp/search.txt" || fail "$(cat "$tmp/search.txt")"
sed -n 3p "$tmp/search.txt" | grep -q "^dp_shard 4 · ac none " || fail "first row: $(cat "$tmp/search.txt")"

# One layout, term by term.
timeout 60 "$plan" "${config[@]}" --devices 4 --device-memory 1GB --layout dp_shard=2,tp=2 \
  >"$tmp/one.txt" 2>&1 || fail "layout: $(cat "$tmp/one.txt")"
for term in "parameters (f32)" "gathered FSDP units" "activations" "peak per device"; do
  grep -qF "$term" "$tmp/one.txt" || fail "no '$term' in: $(cat "$tmp/one.txt")"
done

# --write-config: the layout asked for, written as a config spmd-train runs.
timeout 60 "$plan" "${config[@]}" --devices 2 --device-memory 1GB --layout tp=2 \
  --write-config "$tmp/best.toml" >"$tmp/write.txt" 2>&1 || fail "write: $(cat "$tmp/write.txt")"
grep -q "^wrote $tmp/best.toml: tp 2" "$tmp/write.txt" || fail "$(cat "$tmp/write.txt")"
grep -qx "tp = 2" "$tmp/best.toml" || fail "no tp = 2 in: $(cat "$tmp/best.toml")"
OMP_NUM_THREADS=1 timeout 120 "$spmdrun" --standalone --nproc-per-node 2 "$train" \
  --config "$tmp/best.toml" --training.steps=1 --metrics.run_folder="$tmp/run" \
  --checkpoint.folder="" >"$tmp/train.txt" 2>&1 || fail "spmd-train: $(tail -5 "$tmp/train.txt")"
grep -q "done: 1 steps" "$tmp/train.txt" || fail "$(tail -5 "$tmp/train.txt")"
# The search's best, written the same way.
timeout 60 "$plan" "${config[@]}" --devices 2 --device-memory 1GB --write-config "$tmp/s.toml" \
  >"$tmp/s.txt" 2>&1 || fail "write: $(cat "$tmp/s.txt")"
grep -qx "dp_shard = 2" "$tmp/s.toml" || fail "the search's best: $(cat "$tmp/s.txt")"

# A model with experts: the search tries ep (here 2 and 4 of the 4 experts),
# the step time has its all_to_alls, and a layout with ep and selective
# checkpointing is written as a config spmd-train runs on 2 ranks.
moe=(--config "$src/configs/moe_fsdp_ep.toml" --device-memory 1GB --gemm-tflops 0.1 --intra-bw 1)
timeout 60 "$plan" "${moe[@]}" --devices 4 --top 100 >"$tmp/moe.txt" 2>&1 ||
  fail "moe search: $(cat "$tmp/moe.txt")"
for ep in "ep 2" "ep 4"; do
  grep -q "· $ep · ac" "$tmp/moe.txt" || fail "no '$ep' layout in: $(cat "$tmp/moe.txt")"
done
timeout 60 "$plan" "${moe[@]}" --devices 4 --layout dp_shard=4,ep=2 >"$tmp/moe1.txt" 2>&1 ||
  fail "moe layout: $(cat "$tmp/moe1.txt")"
for row in "ep all_to_all EP tokens (dispatch, combine)" "ep all_to_all EP routing counts" \
  "expert dp all_reduce (after the step) expert gradients (ep's sync)"; do
  grep -qF "  $row" "$tmp/moe1.txt" || fail "no row '$row' in: $(cat "$tmp/moe1.txt")"
done
timeout 60 "$plan" "${moe[@]}" --devices 2 --layout dp_replicate=2,ep=2,ac=op \
  --write-config "$tmp/moe.toml" >"$tmp/moew.txt" 2>&1 || fail "moe write: $(cat "$tmp/moew.txt")"
grep -q "^wrote $tmp/moe.toml: dp_replicate 2 · ep 2 · ac op" "$tmp/moew.txt" ||
  fail "$(cat "$tmp/moew.txt")"
grep -qx "ep = 2" "$tmp/moe.toml" || fail "no ep = 2 in: $(cat "$tmp/moe.toml")"
grep -qx 'selective_ac_option = "op"' "$tmp/moe.toml" || fail "no op in: $(cat "$tmp/moe.toml")"
OMP_NUM_THREADS=1 timeout 120 "$spmdrun" --standalone --nproc-per-node 2 "$train" \
  --config "$tmp/moe.toml" --training.steps=1 --metrics.run_folder="$tmp/moe_run" \
  --checkpoint.folder="" >"$tmp/moe_train.txt" 2>&1 ||
  fail "spmd-train moe: $(tail -5 "$tmp/moe_train.txt")"
grep -q "done: 1 steps" "$tmp/moe_train.txt" || fail "$(tail -5 "$tmp/moe_train.txt")"

# --explain: the 8B preset's parameters and its 18 bytes each.
timeout 60 "$plan" --explain llama3.1-8b --devices 8 >"$tmp/explain.txt" 2>&1 ||
  fail "explain: $(cat "$tmp/explain.txt")"
grep -q "^parameters: 8,030,261,248$" "$tmp/explain.txt" || fail "$(cat "$tmp/explain.txt")"
grep -q "total .* 18 B/parameter *144.5 GB" "$tmp/explain.txt" || fail "$(cat "$tmp/explain.txt")"
# ... on the stated H100 cluster, with the planner's layout's step time and MFU.
grep -q "each device 692.3 TFLOP/s achievable of 989.0 TFLOP/s peak" "$tmp/explain.txt" ||
  fail "$(cat "$tmp/explain.txt")"
for row in "  step " "  MFU " "  bound by "; do
  grep -q "^$row" "$tmp/explain.txt" || fail "no '$row' in: $(cat "$tmp/explain.txt")"
done

# Step time: with a rate and a link, the table is sorted by it and says
# what bounds each layout; --layout prints the time term by term.
timed=(--peak-tflops 989 --achievable 0.7 --intra-bw 360)
timeout 60 "$plan" "${config[@]}" --devices 4 --device-memory 1GB "${timed[@]}" >"$tmp/t.txt" 2>&1 ||
  fail "timed search: $(cat "$tmp/t.txt")"
grep -q "layouts of 4 devices fit 1.0 GB each; the first 5 by step time:" "$tmp/t.txt" ||
  fail "$(cat "$tmp/t.txt")"
for col in "step" "tokens/s" "MFU" "bound by"; do
  sed -n 2p "$tmp/t.txt" | grep -qF "$col" || fail "no column '$col': $(cat "$tmp/t.txt")"
done
timeout 60 "$plan" "${config[@]}" --nodes 2 --devices-per-node 2 --device-memory 1GB \
  "${timed[@]}" --inter-bw 40 --layout dp_replicate=2,tp=2 >"$tmp/t1.txt" 2>&1 ||
  fail "timed layout: $(cat "$tmp/t1.txt")"
for row in "compute" "dp_replicate all_reduce (hidden) DDP gradients" "tp all_gather TP activations" \
  "exposed communication" "step" "MFU" "bound by"; do
  grep -qF "  $row" "$tmp/t1.txt" || fail "no row '$row' in: $(cat "$tmp/t1.txt")"
done
# A measured busbw file in place of --intra-bw.
echo '{"op": "all_reduce", "nranks": 2, "size": 1048576, "busbw": 5.0}' >"$tmp/busbw.json"
timeout 60 "$plan" "${config[@]}" --devices 2 --device-memory 1GB --gemm-tflops 0.2 \
  --busbw "$tmp/busbw.json" --layout dp_replicate=2 >"$tmp/t2.txt" 2>&1 ||
  fail "busbw file: $(cat "$tmp/t2.txt")"
grep -q "  step " "$tmp/t2.txt" || fail "$(cat "$tmp/t2.txt")"
# --mem-bw adds the other ops' traffic to compute, and a row that names it.
for bw in "" 10; do
  timeout 60 "$plan" "${config[@]}" --devices 2 --device-memory 1GB --gemm-tflops 0.2 \
    --intra-bw 1 ${bw:+--mem-bw $bw} --layout dp_replicate=2 >"$tmp/t3$bw.txt" 2>&1 ||
    fail "--mem-bw $bw: $(cat "$tmp/t3$bw.txt")"
done
grep -q "  of which memory traffic" "$tmp/t310.txt" || fail "no traffic row: $(cat "$tmp/t310.txt")"
compute() { sed -n 's/^  compute  *\([0-9.]*\) ms.*/\1/p' "$1"; }
awk -v a="$(compute "$tmp/t3.txt")" -v b="$(compute "$tmp/t310.txt")" 'BEGIN { exit !(a > 0 && b > a) }' ||
  fail "compute $(compute "$tmp/t310.txt") ms with --mem-bw is not above $(compute "$tmp/t3.txt") ms"
# --measure: this machine's rates, as the flags that take them.
timeout 60 "$plan" --measure cpu --measure-seconds 0.2 >"$tmp/m.txt" 2>&1 ||
  fail "--measure: $(cat "$tmp/m.txt")"
grep -qE -- "--gemm-tflops [0-9.]+$" "$tmp/m.txt" || fail "no GEMM rate: $(cat "$tmp/m.txt")"
grep -qE -- "--mem-bw [0-9.]+$" "$tmp/m.txt" || fail "no bandwidth: $(cat "$tmp/m.txt")"

# Refusals: exit 1 and the reason.
refuses() {  # refuses MESSAGE ARGS...
  local want=$1
  shift
  timeout 60 "$plan" "$@" >"$tmp/r.txt" 2>&1
  local rc=$?
  [ $rc -eq 1 ] || fail "exit $rc (not 1) for $*: $(cat "$tmp/r.txt")"
  grep -qF -- "$want" "$tmp/r.txt" || fail "for $*: wanted '$want', got: $(cat "$tmp/r.txt")"
}
refuses 'spmd-plan: --device-memory "80XB" is not a size' "${config[@]}" --devices 4 \
  --device-memory 80XB
refuses "= 2 ranks, but the world has 4" "${config[@]}" --devices 4 --device-memory 1GB \
  --layout dp_shard=2
refuses "parallel: tp 4 must divide model.n_heads 4 and the kv heads 2" "${config[@]}" \
  --devices 4 --device-memory 1GB --layout tp=4
refuses "is not divisible by 2 x cp = 8" "${config[@]}" --devices 4 --device-memory 1GB \
  --layout cp=4 --seq-len 4
refuses "under FSDP the expert ranks come from dp_shard x cp" --config \
  "$src/configs/moe_fsdp_ep.toml" --devices 4 --device-memory 1GB --layout dp_replicate=2,dp_shard=2,ep=4
refuses "pp_microbatches 2 is fewer than the pipeline's 4 stages" "${config[@]}" --devices 4 \
  --device-memory 1GB --layout pp=4,microbatches=2
refuses "no layout of 4 devices fits 1.0 kB per device: the smallest need is" "${config[@]}" \
  --devices 4 --device-memory 1kB
refuses "--devices must be in [1, 2^30], got 0" "${config[@]}" --devices 0 --device-memory 1GB
refuses "--device-memory is needed with --config" "${config[@]}" --devices 4
refuses "give --explain PRESET or --config FILE" --devices 4 --device-memory 1GB
refuses "model.preset must be one of" --explain llama9
refuses "--write-config goes with --config, not --explain" --explain llama3.1-8b \
  --write-config "$tmp/x.toml"
m1=(--devices 4 --device-memory 1GB)
refuses "--peak-tflops: must be positive, got 0" "${config[@]}" "${m1[@]}" --peak-tflops 0 \
  --achievable 0.5 --intra-bw 1
refuses "--achievable: must be at most 1, got 1.5" "${config[@]}" "${m1[@]}" --peak-tflops 1 \
  --achievable 1.5 --intra-bw 1
refuses "--intra-bw: must be a number, got 'fast'" "${config[@]}" "${m1[@]}" --gemm-tflops 1 \
  --intra-bw fast
refuses "--inter-latency: must be finite, got inf" "${config[@]}" "${m1[@]}" --gemm-tflops 1 \
  --intra-bw 1 --inter-latency inf
refuses "--peak-tflops 1 needs --achievable" "${config[@]}" "${m1[@]}" --peak-tflops 1 --intra-bw 1
refuses "give --gemm-tflops (measured) or --achievable" "${config[@]}" "${m1[@]}" \
  --peak-tflops 1 --achievable 0.5 --gemm-tflops 1 --intra-bw 1
refuses "a step time needs the links within a node: --intra-bw GB/s or --busbw FILE" \
  "${config[@]}" "${m1[@]}" --gemm-tflops 1
refuses "a step time on 2 nodes needs the links between them" "${config[@]}" "${m1[@]}" \
  --devices-per-node 2 --gemm-tflops 1 --intra-bw 1
refuses "--devices 4 is not --nodes 3 x --devices-per-node 2 = 6" "${config[@]}" "${m1[@]}" \
  --nodes 3 --devices-per-node 2
refuses "--busbw \"$tmp/none.json\": cannot read it" "${config[@]}" "${m1[@]}" --gemm-tflops 1 \
  --busbw "$tmp/none.json"
echo '{"op": "all_reduce", "nranks": 2, "size": 1024, "busbw": 0}' >"$tmp/zero.json"
refuses "line 1: busbw 0 GB/s at size 1024 over 2 ranks: a busbw must be above 0" "${config[@]}" \
  "${m1[@]}" --gemm-tflops 1 --busbw "$tmp/zero.json"
refuses "the measured busbw has no rows of all_gather" "${config[@]}" --devices 2 \
  --device-memory 1GB --gemm-tflops 1 --busbw "$tmp/busbw.json" --layout dp_shard=2
refuses "--mem-bw: must be positive, got -5" "${config[@]}" "${m1[@]}" --gemm-tflops 1 \
  --intra-bw 1 --mem-bw -5
refuses "--mem-bw 10 times the ops other than the products; it needs a rate" "${config[@]}" \
  "${m1[@]}" --mem-bw 10
refuses '--measure: cpu or cuda, got "tpu"' --measure tpu
if ! nvidia-smi -L >/dev/null 2>&1; then
  refuses "--measure cuda: no GPU is visible here" --measure cuda
fi
refuses "--measure-seconds: must be at least 0.1, got 0" --measure cpu --measure-seconds 0
echo "spmd-plan: search, layout, explain, step time, traffic, --measure, experts and every refusal as expected"
