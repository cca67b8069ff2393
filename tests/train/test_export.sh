#!/usr/bin/env bash
# spmd-train export: a run saved sharded (FSDP over 2 ranks) exported to one
# safetensors file that PyTorch loads into the same architecture
# (tests/autograd/torch_gpt2.py, the model test_torch_reference checks spmd
# against), whose logits for the export's fixed ids equal spmd's to 1e-4.
# Needs Debian's python3-torch; exits 77 (ctest: skipped) without it.
#
# usage: test_export.sh SPMDRUN SPMD_TRAIN
set -uo pipefail
spmdrun=$1 train=$2
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3
fail() { echo "FAILED: $*"; exit 1; }
"$python" -c "import torch, numpy" 2>/dev/null || { echo "SKIPPED: no torch for $python"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
model=(--model.preset=custom --model.seq_len=16 --model.n_layers=2 --model.n_heads=4
       --model.d_model=32 --checkpoint.folder="$tmp/ck")
timeout 120 "$spmdrun" --standalone --nproc-per-node 2 "$train" "${model[@]}" --training.steps=3 \
  --training.global_batch=4 --parallel.dp_shard=2 --metrics.run_folder="$tmp/run" \
  >"$tmp/train.log" 2>&1 || fail "training failed: $(tail -5 "$tmp/train.log")"
timeout 60 "$train" export "${model[@]}" --out "$tmp/model.safetensors" --with-logits \
  >"$tmp/export.log" 2>&1 || fail "export failed: $(cat "$tmp/export.log")"
grep -q "exported step 3" "$tmp/export.log" || fail "export: $(cat "$tmp/export.log")"
PYTHONPATH="$here/../autograd" "$python" - "$tmp/model.safetensors" <<'PY' || fail "logits differ"
import sys
import torch
from torch_gpt2 import GPT2, load_safetensors
state = {k: torch.from_numpy(v) for k, v in load_safetensors(sys.argv[1]).items()}
check = load_safetensors(sys.argv[1] + ".logits.safetensors")
V, C = state["tok_embeddings.weight"].shape
T = state["pos_embeddings.weight"].shape[0]
L = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers."))
model = GPT2(V, T, L, 4, C)
model.load_state_dict(state, strict=True)
with torch.no_grad():
    logits = model(torch.from_numpy(check["ids"]))
diff = (logits - torch.from_numpy(check["logits"])).abs().max().item()
print(f"PyTorch's logits vs spmd's: max |difference| {diff:.2e}")
assert diff < 1e-4, diff
PY
echo OK
