#!/usr/bin/env bash
# spmd-generate end to end: a run saved sharded (FSDP over 2 ranks) continues
# two prompts greedily; the same from the exported file and from the
# Hugging Face folder (export --format hf); and the same tokens
# from PyTorch, greedy over repeated full forwards of the exported weights in
# tests/autograd/torch_gpt2.py (the model test_torch_reference checks spmd
# against). Then sampling's seed, and the refusals. Needs Debian's
# python3-torch for the PyTorch part; exits 77 (ctest: skipped) without it,
# after the rest has run.
#
# usage: test_generate.sh SPMDRUN SPMD_TRAIN SPMD_GENERATE
set -uo pipefail
spmdrun=$1 train=$2 generate=$3
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3
fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
model=(--model.preset=custom --model.seq_len=32 --model.n_layers=2 --model.n_heads=4
       --model.d_model=32 --checkpoint.folder="$tmp/ck")
timeout 120 "$spmdrun" --standalone --nproc-per-node 2 "$train" "${model[@]}" --training.steps=2 \
  --training.global_batch=4 --parallel.dp_shard=2 \
  --metrics.run_folder="$tmp/run" >"$tmp/train.log" 2>&1 ||
  fail "training failed: $(tail -5 "$tmp/train.log")"

# Greedy from the checkpoint, then from the exported file: the same text.
prompts=(--prompt "The model" --prompt "#")
timeout 60 "$generate" "${model[@]}" "${prompts[@]}" --temperature 0 --max-new-tokens 16 \
  --threads 1 >"$tmp/a.txt" 2>&1 || fail "generate: $(cat "$tmp/a.txt")"
grep -q "step 2 on cpu, batch 2: prefill 10 tokens" "$tmp/a.txt" || fail "$(cat "$tmp/a.txt")"
timeout 60 "$train" export "${model[@]}" --out "$tmp/model.safetensors" >/dev/null 2>&1 ||
  fail "export failed"
timeout 60 "$generate" "${model[@]}" --model "$tmp/model.safetensors" "${prompts[@]}" \
  --temperature 0 --max-new-tokens 16 >"$tmp/b.txt" 2>&1 || fail "generate: $(cat "$tmp/b.txt")"
cmp -s <(grep -av "^spmd-generate:" "$tmp/a.txt") <(grep -av "^spmd-generate:" "$tmp/b.txt") ||
  fail "the checkpoint and the exported file continue differently"
timeout 60 "$train" export "${model[@]}" --format hf --out "$tmp/hf" >/dev/null 2>&1 ||
  fail "export --format hf failed"
timeout 60 "$generate" "${model[@]}" --model "$tmp/hf" "${prompts[@]}" \
  --temperature 0 --max-new-tokens 16 >"$tmp/c.txt" 2>&1 || fail "generate: $(cat "$tmp/c.txt")"
cmp -s <(grep -av "^spmd-generate:" "$tmp/a.txt") <(grep -av "^spmd-generate:" "$tmp/c.txt") ||
  fail "the checkpoint and the Hugging Face folder continue differently"
echo "ok   greedy from the FSDP checkpoint = from the exported file = from the HF folder"

# Sampling: the same seed the same text, another seed another.
sample() {  # sample SEED RUN: the text, less the figures line, to $tmp/seed_SEED_RUN.txt
  timeout 60 "$generate" "${model[@]}" "${prompts[@]}" --temperature 1 --top-k 20 --top-p 0.9 \
    --seed "$1" --max-new-tokens 16 2>&1 | grep -av "^spmd-generate:" >"$tmp/seed_$1_$2.txt"
}
sample 5 a; sample 5 b; sample 6 a
cmp -s "$tmp/seed_5_a.txt" "$tmp/seed_5_b.txt" || fail "seed 5 twice gave two texts"
cmp -s "$tmp/seed_5_a.txt" "$tmp/seed_6_a.txt" && fail "seeds 5 and 6 gave one text"
echo "ok   sampling: seed 5 twice is one text, seed 6 another"

# Refusals, each naming its limit, before the weights are read.
refuses() {  # refuses PATTERN ARGS...: exit 1 and PATTERN on stderr
  local pattern=$1; shift
  local out rc
  out=$(timeout 30 "$generate" "${model[@]}" "$@" 2>&1); rc=$?
  [ $rc -eq 1 ] || fail "exit $rc (wanted 1) for $*: $out"
  grep -qF -- "$pattern" <<<"$out" || fail "no '$pattern' for $*: $out"
}
refuses "prompt 2 is empty" --prompt "a" --prompt ""
refuses "prompt 1 has 30 tokens; with --max-new-tokens 3 it needs 33 positions, more than model.seq_len 32" \
  --prompt "012345678901234567890123456789" --max-new-tokens 3
refuses "top_p must lie in (0, 1]" --prompt "a" --top-p 0
refuses "--prompts-file: cannot read $tmp/none.txt" --prompts-file "$tmp/none.txt"
refuses "'layers.0.attn.wo.bias' is [64] here but [32] in the checkpoint" --prompt "a" --model.d_model=64
refuses "no prompt: give --prompt TEXT or --prompts-file FILE"
printf 'one\n\nthree\n' >"$tmp/prompts.txt"
refuses "prompt 2 is empty" --prompts-file "$tmp/prompts.txt"
echo "ok   refusals: empty prompt, prompt past the context, top_p, missing file, another shape"

"$python" -c "import torch, numpy" 2>/dev/null || { echo "SKIPPED: no torch for $python"; exit 77; }
PYTHONPATH="$here/../autograd" "$python" - "$tmp/model.safetensors" "$tmp/a.txt" <<'PY' ||
import sys
import torch
from torch_gpt2 import GPT2, load_safetensors
state = {k: torch.from_numpy(v) for k, v in load_safetensors(sys.argv[1]).items()}
V, C = state["tok_embeddings.weight"].shape
T = state["pos_embeddings.weight"].shape[0]
model = GPT2(V, T, 2, 4, C)
model.load_state_dict(state, strict=True)
want = []
for prompt in (b"The model", b"#"):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(16):
            logits = model(torch.tensor([ids]))
            ids.append(int(torch.argmax(logits[0, -1])))
    want.append(bytes(ids))
got = open(sys.argv[2], "rb").read()
for i, text in enumerate(want):
    header = f"--- sample {i + 1}: ".encode()
    start = got.index(header)
    body = got[got.index(b"\n", start) + 1:][:len(text)]
    print(f"sample {i + 1}: PyTorch {text!r}, spmd {body!r}")
    assert body == text
PY
  fail "PyTorch's greedy tokens differ"
echo "ok   PyTorch's greedy continuation of the exported weights is spmd's"
echo OK
