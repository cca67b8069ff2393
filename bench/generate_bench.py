#!/usr/bin/python3
"""Generation's tokens/s: spmd-generate against PyTorch decoding the same
weights with a key/value cache, on the same CPU threads.

The model is a GPT-2 preset (default "small": 6 layers, C 384, T 256) with
the weights of one spmd-train step, exported (spmd-train export). Both sides
decode greedily from the same prompts, so their tokens must agree (checked:
the bench stops when they do not). The PyTorch side is
tests/autograd/torch_gpt2.py's model (the one test_torch_reference checks spmd
against), driven here the way a PyTorch user writes a cached decoder: each
block's fused qkv projection, keys and values appended to a cache with
torch.cat, softmax(q k^T / sqrt(D)) v over it (Debian's torch 1.13 has no
F.scaled_dot_product_attention). Each side times its own
prefill and decoding loop (model loading and process start excluded).

Runs alternate A B A B (--pairs of them); the figure quoted is the median of
the pairwise ratios spmd / PyTorch of decoding tokens/s.

  bench/generate_bench.py --build build --batch 1 --batch 4 --pairs 5
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "autograd"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_gpt2 import GPT2, load_safetensors  # noqa: E402

PRESETS = {"tiny": (4, 4, 128, 128), "small": (6, 6, 384, 256)}  # layers, heads, C, T


def spmd_run(args, model_file, prompts, new):
    cmd = [os.path.join(args.build, "train", "spmd-generate"), "--model.preset=" + args.preset,
           "--model", model_file, "--temperature", "0", "--max-new-tokens", str(new),
           "--threads", str(args.threads)]
    for p in prompts:
        cmd += ["--prompt", p]
    out = subprocess.run(cmd, check=True, capture_output=True, timeout=600).stdout
    m = re.search(rb"prefill (\d+) tokens in ([0-9.]+) ms .*decode (\d+) tokens in ([0-9.]+) ms",
                  out)
    texts = re.findall(rb"--- sample \d+: \d+ prompt tokens \+ \d+ new ---\n(.*?)\n(?=---|spmd)",
                       out, re.S)
    return int(m[3]) / (float(m[4]) / 1e3), int(m[1]) / (float(m[2]) / 1e3), texts


def torch_run(model, prompts, new):
    """Greedy decoding with a KV cache; prompts of one length decode as a batch."""
    ids = torch.tensor([list(p.encode()) for p in prompts])
    B, T0 = ids.shape
    with torch.no_grad():
        started = time.perf_counter()
        caches = [None] * len(model.layers)

        def forward(tokens, start):
            T = tokens.shape[1]
            x = model.tok_embeddings(tokens) + model.pos_embeddings(
                torch.arange(start, start + T))
            for i, block in enumerate(model.layers):
                a = block.attn
                h = block.attn_norm(x)
                C = h.shape[-1]
                H, D = a.n_heads, C // a.n_heads
                q, k, v = a.wqkv(h).split(C, dim=-1)
                q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
                if caches[i] is not None:
                    k = torch.cat([caches[i][0], k], dim=2)
                    v = torch.cat([caches[i][1], v], dim=2)
                caches[i] = (k, v)
                scores = (q @ k.transpose(-1, -2)) * (1.0 / D ** 0.5)  # (B, H, T, S)
                if start == 0 and T > 1:  # the prefill: causal
                    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
                    scores = scores.masked_fill(future, float("-inf"))
                y = F.softmax(scores, dim=-1) @ v
                x = x + a.wo(y.transpose(1, 2).reshape(B, T, C))
                x = x + block.mlp(block.ffn_norm(x))
            x = model.norm(x[:, -1])
            return x @ model.tok_embeddings.weight.T  # the tied head

        nxt = forward(ids, 0).argmax(-1)
        prefill = time.perf_counter() - started
        out = [nxt]
        started = time.perf_counter()
        for s in range(1, new):
            nxt = forward(nxt[:, None], T0 + s - 1).argmax(-1)
            out.append(nxt)
        decode = time.perf_counter() - started
    tokens = torch.stack(out, 1)
    texts = [bytes(list(p.encode()) + tokens[b].tolist()) for b, p in enumerate(prompts)]
    return B * (new - 1) / decode, B * T0 / prefill, texts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, action="append", help="prompts at once (repeatable)")
    ap.add_argument("--new", type=int, default=200, help="new tokens per prompt")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    batches = args.batch or [1, 4]
    torch.set_num_threads(args.threads)
    layers, heads, C, T = PRESETS[args.preset]
    with tempfile.TemporaryDirectory() as d:
        train = os.path.join(args.build, "train", "spmd-train")
        common = ["--model.preset=" + args.preset, "--checkpoint.folder=" + os.path.join(d, "ck")]
        subprocess.run([train] + common + ["--training.steps=1", "--training.global_batch=2",
                                           "--metrics.run_folder=" + os.path.join(d, "run")],
                       check=True, capture_output=True, timeout=600)
        model_file = os.path.join(d, "model.safetensors")
        subprocess.run([train, "export"] + common + ["--out", model_file], check=True,
                       capture_output=True, timeout=600)
        model = GPT2(256, T, layers, heads, C)
        state = {k: torch.from_numpy(v) for k, v in load_safetensors(model_file).items()}
        model.load_state_dict(state, strict=True)
        model.eval()
        base = "ROMEO: what light through yonder window breaks"
        print(f"# {args.preset}: {layers} layers, C {C}, vocab 256; {args.new} new tokens per "
              f"prompt, greedy; {args.threads} thread(s); torch {torch.__version__}")
        print("batch  spmd decode tok/s  torch decode tok/s  ratio   spmd prefill  torch prefill")
        for B in batches:
            prompts = [base[i % 7:][:32] for i in range(B)]
            ratios, a_all, b_all = [], [], []
            for _ in range(args.pairs):
                a, a_pre, a_text = spmd_run(args, model_file, prompts, args.new)
                b, b_pre, b_text = torch_run(model, prompts, args.new)
                if a_text != b_text:
                    raise SystemExit(f"the tokens differ:\nspmd  {a_text}\ntorch {b_text}")
                ratios.append(a / b)
                a_all.append((a, a_pre))
                b_all.append((b, b_pre))
            med = statistics.median
            print(f"{B:5d}  {med(x[0] for x in a_all):17.0f}  {med(x[0] for x in b_all):18.0f}  "
                  f"{med(ratios):5.2f}x  {med(x[1] for x in a_all):12.0f}  "
                  f"{med(x[1] for x in b_all):13.0f}", flush=True)


if __name__ == "__main__":
    main()
