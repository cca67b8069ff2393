#!/usr/bin/python3
"""Whether a resumed run's losses are an uninterrupted run's, step by step.

  same_losses.py WHOLE.jsonl RESUMED.jsonl STEPS

Each file is a run's metrics_rank0.jsonl (one JSON line per step, and one
per save, which has no loss). A resumed run writes the steps after its
checkpoint twice, and the later line wins. Every step 0..STEPS-1 must be there, each loss within 2.5e-7 relative
of the uninterrupted one's: the last bit of an f32 loss (the restart moves
where buffers land, which can change a rounding; test_trainer.cpp says why).
Exits 1 naming the first step that differs.
"""
import json
import sys


def losses(path):
    by_step = {}
    for line in open(path):
        row = json.loads(line)
        if "loss" in row:  # not a save's line
            by_step[row["step"]] = row["loss"]
    return by_step


def main():
    whole, got, steps = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
    if sorted(got) != list(range(steps)):
        sys.exit(f"the resumed run logged steps {sorted(got)}, not 0..{steps - 1}")
    for s in range(steps):
        rel = abs(got[s] - whole[s]) / abs(whole[s])
        if rel > 2.5e-7:
            sys.exit(f"step {s}: loss {got[s]} resumed, {whole[s]} uninterrupted ({rel:.2g} relative)")
    print(f"the resumed run's losses are the uninterrupted run's at all {steps} steps")


if __name__ == "__main__":
    main()
