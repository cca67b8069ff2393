#!/usr/bin/env bash
# spmd-train export --format hf, checked outside spmd: a run saved sharded
# (FSDP over 2 ranks; and one process with an untied head) exported both
# ways, and tests/train/hf_layout.py, with Python's standard library alone,
# finds GPT2LMHeadModel's names and shapes, config.json's keys, and every
# value of the spmd export, the Conv1D weights transposed. Then the
# binary's refusals: a Llama-shaped config and an unknown --format. Last,
# tests/train/hf_forward.py, GPT2LMHeadModel's forward in numpy, gives
# spmd's logits (--with-logits) to 1e-4; without numpy the test exits 77
# (ctest: skipped) after the checks before it.
#
# usage: test_hf_export.sh SPMDRUN SPMD_TRAIN
set -uo pipefail
spmdrun=$1 train=$2
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3
fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
model=(--model.preset=custom --model.seq_len=16 --model.n_layers=2 --model.n_heads=4
       --model.d_model=32 --training.steps=2 --training.global_batch=4 --training.threads=1)

check() {  # name, extra flags...
  local name=$1
  shift
  "$train" export "${model[@]}" "$@" --out "$tmp/$name.safetensors" >"$tmp/export.log" 2>&1 \
    || fail "export failed: $(cat "$tmp/export.log")"
  "$train" export "${model[@]}" "$@" --format hf --out "$tmp/${name}_hf" --with-logits >"$tmp/export.log" 2>&1 \
    || fail "export --format hf failed: $(cat "$tmp/export.log")"
  grep -q "exported step 2 of .* in Hugging Face's GPT-2 layout" "$tmp/export.log" \
    || fail "export --format hf: $(cat "$tmp/export.log")"
  "$python" "$here/hf_layout.py" "$tmp/${name}_hf" "$tmp/$name.safetensors" || fail "$name: layout"
}

timeout 120 "$spmdrun" --standalone --nproc-per-node 2 "$train" "${model[@]}" \
  --parallel.dp_shard=2 --checkpoint.folder="$tmp/ck" --metrics.run_folder="$tmp/run" \
  >"$tmp/train.log" 2>&1 || fail "training failed: $(tail -5 "$tmp/train.log")"
check fsdp --checkpoint.folder="$tmp/ck"
untied=(--model.tie_embeddings=false --checkpoint.folder="$tmp/ck_untied")
timeout 120 "$train" "${model[@]}" "${untied[@]}" --metrics.run_folder="$tmp/run_untied" \
  >"$tmp/train.log" 2>&1 || fail "training failed: $(tail -5 "$tmp/train.log")"
check untied "${untied[@]}"

out=$("$train" export "${model[@]}" --model.shape=llama --checkpoint.folder="$tmp/ck" \
  --format hf --out "$tmp/llama" 2>&1) && fail "a llama config was exported"
grep -q 'export --format hf: model.shape = "llama" has no Hugging Face GPT-2 layout' <<<"$out" \
  || fail "llama refused with: $out"
out=$("$train" export "${model[@]}" --checkpoint.folder="$tmp/ck" --format onnx --out x 2>&1) \
  && fail "--format onnx accepted"
grep -q "\-\-format must be spmd .* or hf .*, got 'onnx'" <<<"$out" || fail "onnx refused with: $out"

for name in fsdp untied; do
  "$python" "$here/hf_forward.py" "$tmp/${name}_hf"
  rc=$?
  [ $rc = 77 ] && { echo "SKIPPED: the numpy forward (no numpy for $python)"; exit 77; }
  [ $rc = 0 ] || fail "$name: the numpy forward differs from spmd's logits"
done
echo OK
