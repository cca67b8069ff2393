#!/usr/bin/env python3
"""spmd-bench's output against a fixture of nccl-tests' layout.

Runs spmd-bench on 2 ranks under spmdrun and diffs what it prints with
fixtures/nccl_tests_layout*.txt, nccl-tests' output written out from its
formats:

  - the column header (the three lines from "out-of-place"), character for
    character;
  - the column layout of every row: where each field ends and which are
    N/A must be a row shape nccl-tests prints (both sets checked, in place
    N/A, nothing checked, out-of-place set blank), or one of those cut after
    the out-of-place set (spmd's out-of-place-only ops); all_reduce,
    broadcast and reduce print both sets;
  - the preamble's "# Using devices" block (with spmd's "links" field after
    nccl-tests' device, and spmd's "# Algorithm" line after the ranks: one
    host, flat) and the footer's wording ("Out of bounds values : N OK",
    "Avg bus bandwidth").

It also reads the --json lines (the keys bench/ scripts and the launcher
tests read: the top-level figures are the out-of-place set's) and the -J
document (nccl-tests' keys), and checks that every value was right, or N/A
where -c 0 checked none, and that each row names the algorithm that ran it
(on one host of 2 ranks: shared memory, or the TCP algorithms over its
rings; none for sendrecv).

usage: test_nccl_layout.py SPMDRUN SPMD_BENCH FIXTURE_DIR
"""
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile

HEADER_START = "out-of-place"
# spmd's ops with one tensor: out of place they copy first, and both sets are measured.
IN_PLACE_API = ("all_reduce", "broadcast", "reduce")
# The algorithms each op may take on one host (parallel/comm/host/algorithm_choice.h;
# "shm_segment": shm/run_in_segment.h); sendrecv names none.
ALGORITHMS = {
    "all_reduce": ("shm_segment", "recursive_doubling", "ring"),
    "broadcast": ("shm_segment", "tree", "chain"),
    "reduce": ("tree", "chain"),
    "all_gather": ("shm_segment", "ring"),
    "reduce_scatter": ("shm_segment", "ring"),
    "gather": ("direct",), "scatter": ("direct",),
    "all_to_all": ("pairwise",), "all_to_allv": ("pairwise",),
    "sendrecv": ("",),
}


def fail(message):
    print("FAILED:", message)
    sys.exit(1)


def run(spmdrun, bench, args):
    cmd = [spmdrun, "--standalone", "--nproc-per-node", "2", bench] + args
    print("$", " ".join(cmd[2:]), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    # spmdrun prefixes each worker's lines with its rank; rank 0 prints the table.
    lines = [re.sub(r"^\[rank0\]: ", "", l) for l in p.stdout.splitlines()
             if l.startswith("[rank0]: ")]
    print("\n".join(lines))
    if p.returncode != 0:
        fail(f"spmd-bench exited with {p.returncode}:\n{p.stderr}")
    return lines


def header_lines(lines):
    """The column header: the line naming the two sets and the two below it."""
    for i, line in enumerate(lines):
        if line.startswith("#") and HEADER_START in line:
            return lines[i:i + 3]
    fail("no column header (a line with 'out-of-place')")


def is_row(line):
    return line.strip() and not line.startswith("#")


def skeleton(line):
    """Where each field ends, and whether it is N/A: the row's column layout."""
    fields, col = [], 0
    for token in line.split():
        col = line.index(token, col) + len(token)
        fields.append((col, "N/A" if token == "N/A" else "v"))
    return tuple(fields)


def allowed_rows(fixture, set_fields):
    """The fixture's row shapes, and each cut after its first column set."""
    shapes = set()
    for line in fixture:
        if is_row(line):
            s = skeleton(line)
            shapes.add(s)
            shapes.add(s[:5 + set_fields])
    return shapes


def check_layout(out, fixture, set_fields):
    want, got = header_lines(fixture), header_lines(out)
    if want != got:
        diff = difflib.unified_diff(want, got, "nccl-tests", "spmd-bench", lineterm="")
        fail("the column header differs from nccl-tests':\n" + "\n".join(diff))
    shapes = allowed_rows(fixture, set_fields)
    example = next(l for l in fixture if is_row(l))
    rows = [l for l in out if is_row(l)]
    if not rows:
        fail("no rows")
    for row in rows:
        if skeleton(row) not in shapes:
            marks = "".join("^" if any(c == e for e, _ in skeleton(row)) else " "
                            for c in range(1, len(row) + 1))
            fail("a row's columns are not where nccl-tests puts them:\n"
                 f"  nccl-tests: {example}\n  spmd-bench: {row}\n  field ends: {marks}")
    # The preamble names every rank's device; the footer is nccl-tests' wording.
    i = out.index("# Using devices")
    if not (out[i + 1].startswith("#  Rank  0 Group  0 Pid") and
            out[i + 2].startswith("#  Rank  1 Group  0 Pid") and
            out[i + 3] == "# Algorithm flat (one host)" and out[i + 4] == "#"):
        fail("the '# Using devices' block is not nccl-tests' shape, with spmd's Algorithm line")
    # spmd's one field after nccl-tests' device: how each rank reaches the other.
    for r in (0, 1):
        if not re.search(rf" device cpu links (shm|tcp):{1 - r}$", out[i + 1 + r]):
            fail(f"rank {r}'s line does not end with its links: {out[i + 1 + r]}")
    footer = out[out.index(rows[-1]) + 1:]
    for prefix, fixture_line in (("# Out of bounds values : ", "# Out of bounds values : 0 OK"),
                                 ("# Avg bus bandwidth    : ", None)):
        if not any(l.startswith(prefix) for l in footer):
            fail(f"no footer line '{prefix}'")
        if fixture_line and fixture_line not in footer:
            fail(f"expected '{fixture_line}' in the footer")
    if "#" not in footer or not any(l.startswith("# Collective test concluded: ") for l in footer):
        fail("the footer does not end as nccl-tests' does")
    return rows


def rows_by_op(out):
    """{op: [row, ...]}: the rows under each '# <op>' line."""
    by_op, op = {}, None
    for line in out:
        m = re.match(r"# (\w+)$", line)
        if m:
            op = m.group(1)
        elif is_row(line) and op:
            by_op.setdefault(op, []).append(line)
    return by_op


def check_json(lines_path, doc_path, checked, nrows):
    rows = [json.loads(l) for l in open(lines_path)]
    if len(rows) != nrows:
        fail(f"{len(rows)} JSON lines for {nrows} rows")
    for r in rows:
        for key in ("op", "size", "count", "type", "redop", "root", "time_us", "algbw", "busbw",
                    "wrong", "nranks", "impl", "out_of_place", "in_place"):
            if key not in r:
                fail(f"JSON line without '{key}': {r}")
        if r["nranks"] != 2 or r["wrong"] != (0 if checked else None):
            fail(f"JSON line: {r}")
        # The top-level figures are the first set printed: out of place, as
        # nccl-tests' first busbw column, which every op now measures.
        first = r["out_of_place"]
        if first is None or (r["time_us"], r["busbw"]) != (first["time_us"], first["busbw"]):
            fail(f"JSON line whose top-level figures are not its out-of-place set: {r}")
        if r["op"] in IN_PLACE_API and r["in_place"] is None:
            fail(f"JSON line of {r['op']} without its in-place set: {r}")
        if r.get("algorithm") not in ALGORITHMS[r["op"]]:
            fail(f"JSON line whose algorithm is not one that runs {r['op']}: {r}")
    doc = json.load(open(doc_path))
    for key in ("version", "start_time", "args", "env", "config", "results", "out_of_bounds",
                "average_bus_bandwidth", "errors", "end_time"):
        if key not in doc:
            fail(f"the -J document has no '{key}'")
    if len(doc["config"]["devices"]) != 2 or len(doc["results"]) != nrows:
        fail("the -J document's devices or results are incomplete")
    if doc["out_of_bounds"] != {"count": 0, "okay": True} or doc["errors"]:
        fail(f"the -J document reports failures: {doc['out_of_bounds']} {doc['errors']}")
    for res in doc["results"]:
        cells = [res[k] for k in ("out_of_place", "in_place") if res[k] is not None]
        if not cells or any(c["nwrong"] != (0 if checked else None) for c in cells):
            fail(f"a -J result: {res}")
        if res.get("algorithm") not in ALGORITHMS[res["op"]]:
            fail(f"a -J result whose algorithm is not one that runs {res['op']}: {res}")
    if doc["config"].get("algorithm") != "flat (one host)":
        fail(f"the -J config's algorithm: {doc['config'].get('algorithm')}")
    return doc


def main():
    spmdrun, bench, fixtures = sys.argv[1:4]
    def fixture(name):  # its lines, without the notes (##)
        lines = open(os.path.join(fixtures, name)).read().splitlines()
        return [l for l in lines if not l.startswith("##")]

    plain = fixture("nccl_tests_layout.txt")
    per_iter = fixture("nccl_tests_layout_per_iter.txt")
    with tempfile.TemporaryDirectory() as tmp:
        lines, doc = os.path.join(tmp, "rows.json"), os.path.join(tmp, "run.json")
        out = run(spmdrun, bench, ["all", "-b", "8", "-e", "4K", "-f", "8", "-n", "2",
                                   "-c", "1", "--json", lines, "-J", doc])
        rows = check_layout(out, plain, 4)
        check_json(lines, doc, True, len(rows))
        if not any("N/A" not in r and len(r.split()) == 13 for r in rows):
            fail("no row with both column sets measured and checked")
        for op, op_rows in rows_by_op(out).items():
            if op in IN_PLACE_API and not all(len(r.split()) == 13 for r in op_rows):
                fail(f"{op}: a row without both column sets:\n" + "\n".join(op_rows))
        # Unchecked, blocking, per-iteration: every #wrong is N/A.
        lines2, doc2 = os.path.join(tmp, "rows2.json"), os.path.join(tmp, "run2.json")
        out = run(spmdrun, bench, ["all_reduce,gather,all_to_allv", "-b", "64", "-e", "4K",
                                   "-f", "64", "-n", "5", "-c", "0", "-I", "1", "-z", "1",
                                   "--json", lines2, "-J", doc2])
        rows = check_layout(out, per_iter, 8)
        doc = check_json(lines2, doc2, False, len(rows))
        if not all("N/A" in r for r in rows):
            fail("-c 0 must print N/A in #wrong")
        stats = doc["results"][0]["in_place_per_iter"]
        if len(stats["times_us"]) != 5 or not stats["min_us"] <= stats["p50_us"] <= stats["max_us"]:
            fail(f"per-iteration statistics: {stats}")
        if len(stats["per_process_max_times_us"]) != 2:
            fail("per-iteration times of each rank are missing")
    print("PASSED")


if __name__ == "__main__":
    main()
