#!/usr/bin/python3
"""Whether two runs of spmd-train trained the same model: step by step, and
at the end, read with Python's standard library alone.

  same_training.py STEPS ONE_RUN ONE.safetensors OTHER_RUN OTHER.safetensors

ONE_RUN and OTHER_RUN are metrics.run_folder of each run: their
metrics_rank0.jsonl holds one JSON line per step (loss, grad_norm, ...) and
one per save (no loss). The .safetensors files are each run's checkpoint as
`spmd-train export` wrote it (f32 tensors under the model's names). Every
step 0..STEPS-1 must be in both with loss and grad_norm within 1e-5
relative; both files must hold the same tensors with the same shapes, each
element within 1e-5 of the tensor's largest magnitude (an element near zero
has no meaningful relative error). Exits 1 naming the first difference.
"""
import array
import json
import struct
import sys

TOLERANCE = 1e-5


def steps(run_folder):
    """{step: (loss, grad_norm)} from a run's rank-0 metrics."""
    by_step = {}
    for line in open(f"{run_folder}/metrics_rank0.jsonl"):
        row = json.loads(line)
        if "loss" in row:  # not a save's line
            by_step[row["step"]] = (row["loss"], row["grad_norm"])
    return by_step


def read_safetensors(path):
    """{name: (shape, array of f32)}: an 8-byte little-endian header length,
    a JSON header, then the tensors' bytes at its data_offsets."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    tensors = {}
    for name, entry in header.items():
        if entry["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {entry['dtype']}, not F32")
        begin, end = entry["data_offsets"]
        values = array.array("f")
        values.frombytes(data[8 + n + begin:8 + n + end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (entry["shape"], values)
    return tensors


def relative(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def main():
    count, one_run, one_file, other_run, other_file = sys.argv[1:6]
    count = int(count)
    one, other = steps(one_run), steps(other_run)
    for name, run in (("the first", one), ("the second", other)):
        if sorted(run) != list(range(count)):
            sys.exit(f"{name} run logged steps {sorted(run)}, not 0..{count - 1}")
    for s in range(count):
        for i, what in enumerate(("loss", "grad_norm")):
            if relative(one[s][i], other[s][i]) > TOLERANCE:
                sys.exit(f"step {s}: {what} {one[s][i]} vs {other[s][i]}")
    a, b = read_safetensors(one_file), read_safetensors(other_file)
    if sorted(a) != sorted(b):
        sys.exit(f"different tensors: {sorted(set(a) ^ set(b))}")
    worst = 0.0
    for name in sorted(a):
        (shape_a, va), (shape_b, vb) = a[name], b[name]
        if shape_a != shape_b:
            sys.exit(f"{name}: shape {shape_a} vs {shape_b}")
        scale = max(max((abs(x) for x in va), default=0.0), 1e-30)
        diff = max((abs(x - y) for x, y in zip(va, vb)), default=0.0) / scale
        worst = max(worst, diff)
        if diff > TOLERANCE:
            sys.exit(f"{name}: differs by {diff:.3g} of its largest value")
    print(f"the same training: losses and grad norms of {count} steps, and all {len(a)} "
          f"tensors at the end (worst {worst:.2g} of a tensor's largest value)")


if __name__ == "__main__":
    main()
