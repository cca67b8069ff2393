#!/usr/bin/env bash
# spmd-train export --format hf, loaded by Hugging Face transformers: a run
# saved sharded (FSDP over 2 ranks) exported with --with-logits, and
# tests/train/hf_transformers.py's GPT2LMHeadModel.from_pretrained gives
# spmd's logits for the export's fixed ids within 1e-4. Needs torch and
# transformers for $PYTHON (default /usr/bin/python3); exits 77 (ctest:
# skipped) without them. scripts/gpu-check.sh runs it as a row of its own.
#
# usage: test_hf_transformers.sh SPMDRUN SPMD_TRAIN
set -uo pipefail
spmdrun=$1 train=$2
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-/usr/bin/python3}
fail() { echo "FAILED: $*"; exit 1; }
"$python" -c "import torch, transformers, safetensors" 2>/dev/null \
  || { echo "SKIPPED: no torch, transformers or safetensors for $python"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
model=(--model.preset=custom --model.seq_len=16 --model.n_layers=2 --model.n_heads=4
       --model.d_model=32 --checkpoint.folder="$tmp/ck")
timeout 120 "$spmdrun" --standalone --nproc-per-node 2 "$train" "${model[@]}" --training.steps=3 \
  --training.global_batch=4 --parallel.dp_shard=2 --metrics.run_folder="$tmp/run" \
  >"$tmp/train.log" 2>&1 || fail "training failed: $(tail -5 "$tmp/train.log")"
timeout 60 "$train" export "${model[@]}" --format hf --out "$tmp/hf" --with-logits \
  >"$tmp/export.log" 2>&1 || fail "export failed: $(cat "$tmp/export.log")"
timeout 120 "$python" "$here/hf_transformers.py" "$tmp/hf"
rc=$?
[ $rc = 0 ] || [ $rc = 77 ] || fail "transformers' logits differ from spmd's (exit $rc)"
[ $rc = 77 ] && exit 77
echo OK
