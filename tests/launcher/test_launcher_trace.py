#!/usr/bin/env python3
"""spmdrun merges the ranks' SPMD_TRACE files into one Perfetto trace per job.

Runs spmd_test_comm_worker (barrier #0, all_reduce #1 of 100 f32, all_reduce
#2 of 1000 f32) under spmdrun with SPMD_TRACE set, and reads the merged file
back with Python's json module:
  1. one node, 2 ranks, success: dir/trace.json holds both ranks' rows, each
     collective an async b/e pair whose args carry op, group, seq and bytes
     (the sizes worked out by hand: 0, 400, 4000), and a "wait" span per
     collective on the caller's thread (run with SPMD_SHM_POST_BYTES=0: a
     small all_reduce through the shared segment's posts may complete at its
     call, and a wait that finds it done records no span);
  2. one node, rank 1 killed in all_reduce #2: the file is still written when
     the job fails, with rank 0's trace, and spmdrun names rank 1 as missing;
  3. two spmdrun "nodes" of 1 rank each sharing the folder: each merges its
     own rank into trace_node<N>.json and says so.

usage: test_launcher_trace.py SPMDRUN COMM_WORKER
"""
import json
import os
import socket
import subprocess
import sys
import tempfile

spmdrun, worker = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(args, trace_dir, timeout=60, **extra_env):
    env = dict(os.environ, SPMD_TRACE=trace_dir, OMP_NUM_THREADS="1", **extra_env)
    return subprocess.run([spmdrun] + args, env=env, capture_output=True, text=True,
                          timeout=timeout)


def load(path):
    with open(path) as f:
        return json.load(f)


def collectives(trace, pid):
    """The rank's collectives: {seq: (begin args, end event)} from its b/e pairs."""
    begins = {e["id"]: e for e in trace["traceEvents"] if e["pid"] == pid and e["ph"] == "b"}
    ends = {e["id"]: e for e in trace["traceEvents"] if e["pid"] == pid and e["ph"] == "e"}
    out = {}
    for id_, b in begins.items():
        check(id_ in ends, f"rank {pid}: {b['name']} has a begin but no end")
        if id_ in ends:
            check(ends[id_]["ts"] >= b["ts"], f"rank {pid}: {b['name']} ends before it begins")
        out[b["args"]["seq"]] = b
    return out


# Hand-worked: what comm_worker issues and how many bytes each carries.
EXPECTED = {0: ("barrier", 0), 1: ("all_reduce", 400), 2: ("all_reduce", 4000)}

with tempfile.TemporaryDirectory() as tmp:
    # 1. One node, success.
    d1 = os.path.join(tmp, "ok")
    p = run(["--standalone", "--nproc-per-node", "2", worker], d1, SPMD_SHM_POST_BYTES="0")
    check(p.returncode == 0, f"ok: spmdrun exited {p.returncode}: {p.stderr[-2000:]}")
    merged = os.path.join(d1, "trace.json")
    check(f"the trace of ranks 0, 1 is in {merged}" in p.stderr, "ok: spmdrun names the file")
    trace = load(merged)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    check(names == {0: "rank 0", 1: "rank 1"}, f"ok: one process row per rank, got {names}")
    check(trace["otherData"]["ranks"] == [0, 1], "ok: otherData lists ranks 0 and 1")
    for rank in (0, 1):
        ops = collectives(trace, rank)
        check(sorted(ops) == [0, 1, 2], f"ok: rank {rank}'s collectives are #{sorted(ops)}")
        for seq, (op, nbytes) in EXPECTED.items():
            args = ops.get(seq, {}).get("args", {})
            check(args.get("op") == op and args.get("group") == "world" and
                  args.get("bytes") == nbytes and args.get("ok") == 1,
                  f"ok: rank {rank} #{seq} args {args}, expected {op} in world, {nbytes} B")
        waits = [e for e in trace["traceEvents"]
                 if e["pid"] == rank and e["ph"] == "X" and e["cat"] == "comm_wait"]
        for seq, (op, _) in EXPECTED.items():
            check(any(e["name"] == f"wait {op} #{seq} in group world" for e in waits),
                  f"ok: rank {rank} has no wait span for {op} #{seq}")

    # 2. Rank 1 killed in the middle of all_reduce #2: the job fails, the trace is merged.
    d2 = os.path.join(tmp, "killed")
    p = run(["--standalone", "--nproc-per-node", "2", worker, "--kill-rank", "1",
             "--timeout-ms", "20000"], d2)
    check(p.returncode != 0, "killed: spmdrun succeeded")
    check("no trace file from rank 1" in p.stderr,
          "killed: spmdrun does not name rank 1 missing:\n" + p.stderr[-3000:])
    trace = load(os.path.join(d2, "trace.json"))
    check(trace["otherData"]["missing_ranks"] == [1], "killed: otherData names rank 1 missing")
    ops = collectives(trace, 0)
    check(ops.get(2, {}).get("args", {}).get("ok") == 0,
          f"killed: rank 0's all_reduce #2 is not marked failed: {ops.get(2)}")

    # 3. Two launchers ("nodes") of one rank each, one folder.
    d3 = os.path.join(tmp, "nodes")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, SPMD_TRACE=d3, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([spmdrun, "--nnodes", "2", "--node-rank", str(n), "--master-port",
                               str(port), "--nproc-per-node", "1", "--rdzv-timeout", "30",
                               "--run-id", "trace2", worker], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for n in (0, 1)]
    outs = [pr.communicate(timeout=60) for pr in procs]
    for n, (pr, (out, err)) in enumerate(zip(procs, outs)):
        check(pr.returncode == 0, f"nodes: node {n} exited {pr.returncode}: {err[-2000:]}")
        path = os.path.join(d3, f"trace_node{n}.json")
        check(f"the trace of rank {n} is in {path}" in err, f"nodes: node {n} names its file")
        check("that is node " + str(n) + "'s ranks only" in err, f"nodes: node {n} says so")
        trace = load(path)
        check(sorted(collectives(trace, n)) == [0, 1, 2], f"nodes: node {n}'s file lacks rank {n}")
        check(not any(e["pid"] != n for e in trace["traceEvents"]),
              f"nodes: node {n}'s file holds another rank")

print("FAILED" if failures else "PASSED", f"({len(failures)} failures)")
sys.exit(1 if failures else 0)
