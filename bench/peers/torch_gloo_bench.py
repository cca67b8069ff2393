#!/usr/bin/python3
"""torch_gloo_bench: the PyTorch peer of spmd-bench. The same sweep through
torch.distributed with the "gloo" backend (Debian's python3-torch), with
spmd-bench's flags, columns and JSON lines (impl "torch-gloo").

    /usr/bin/python3 bench/peers/torch_gloo_bench.py --nprocs 2 all_reduce -b 8 -e 256M -f 2

It starts its own ranks (torch.multiprocessing, a TCPStore on a free port).
Each op is the call a PyTorch user makes on CPU tensors: all_reduce,
broadcast, reduce, all_gather_into_tensor (falling back to all_gather into a
list where gloo lacks it), reduce_scatter_tensor (likewise), all_to_all_single,
and a ring exchange through batch_isend_irecv. What PyTorch 1.13 exposes of
Gloo is one algorithm per collective: all_reduce runs gloo::allreduce, whose
default is the ring; Gloo's halving-doubling and BCube all_reduce are not
reachable from torch.distributed. Sizes, counts, bus factors and times are
computed as in spmd-bench (bench/collectives/cases.h), -a included.
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv"]
DTYPES = {"float": torch.float32, "double": torch.float64, "bfloat16": torch.bfloat16,
          "half": torch.float16, "int32": torch.int32, "int64": torch.int64}
REDOPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
          "max": dist.ReduceOp.MAX}


def parse_bytes(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(round(float(text[:-1] if scale > 1 else text) * scale))


def sizes(a):
    s = a.minbytes
    while s <= a.maxbytes:
        yield s
        nxt = int(s * a.stepfactor) if a.stepfactor > 1 else s + a.stepbytes
        if nxt <= s:
            return
        s = nxt


def bus_factor(op, p):
    if op == "all_reduce":
        return 2 * (p - 1) / p
    return (p - 1) / p if op in ("all_gather", "reduce_scatter", "all_to_all") else 1


def shape(op, nbytes, elem, p):
    """(size_bytes, count, in_count, out_count) as spmd-bench derives them."""
    total = nbytes // elem
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        m = total // p
        ins = {"all_gather": m, "reduce_scatter": m * p, "all_to_all": m * p}[op]
        outs = {"all_gather": m * p, "reduce_scatter": m, "all_to_all": m * p}[op]
        return max(ins, outs) * elem, m, ins, outs
    return total * elem, total, total, total if op == "sendrecv" else 0


def make_call(op, a, rank, p, inp, out):
    redop = REDOPS[a.op]
    if op == "all_reduce":
        return lambda: dist.all_reduce(inp, op=redop)
    if op == "broadcast":
        return lambda: dist.broadcast(inp, src=a.root)
    if op == "reduce":
        return lambda: dist.reduce(inp, dst=a.root, op=redop)
    if op == "all_gather":
        try:
            dist.all_gather_into_tensor(out, inp)
            return lambda: dist.all_gather_into_tensor(out, inp)
        except RuntimeError:  # gloo lacks it in this PyTorch: gather into views of `out`
            views = list(out.chunk(p))
            return lambda: dist.all_gather(views, inp)
    if op == "reduce_scatter":
        try:
            dist.reduce_scatter_tensor(out, inp, op=redop)
            return lambda: dist.reduce_scatter_tensor(out, inp, op=redop)
        except RuntimeError:
            return None  # not supported by gloo in this PyTorch
    if op == "all_to_all":
        return lambda: dist.all_to_all_single(out, inp)
    right, left = (rank + 1) % p, (rank - 1) % p

    def sendrecv():
        ops = [dist.P2POp(dist.isend, inp, right), dist.P2POp(dist.irecv, out, left)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    return sendrecv


def measure(op, nbytes, a, rank, p):
    dtype = DTYPES[a.datatype]
    elem = torch.tensor([], dtype=dtype).element_size()
    size_bytes, count, ins, outs = shape(op, nbytes, elem, p)
    if count == 0:
        return None
    inp = torch.zeros(ins, dtype=dtype)
    out = torch.zeros(outs, dtype=dtype) if outs else None
    call = make_call(op, a, rank, p, inp, out)
    if call is None:
        return "unsupported"
    for _ in range(a.warmup_iters):
        call()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(a.iters):
        call()
    mine = (time.perf_counter() - start) / a.iters
    t = torch.tensor([mine if rank == 0 else 0.0, mine, mine, -mine], dtype=torch.float64)
    dist.all_reduce(t[:2])
    ext = t[2:].clone()
    dist.all_reduce(ext, op=dist.ReduceOp.MAX)
    # -a: rank 0's time, the mean, the fastest rank's or the slowest rank's
    seconds = [t[0].item(), t[1].item() / p, -ext[1].item(), ext[0].item()][a.average]
    algbw = size_bytes / seconds / 1e9
    return {"op": op, "size": size_bytes, "count": count, "type": a.datatype,
            "redop": a.op if op in ("all_reduce", "reduce", "reduce_scatter") else "none",
            "root": a.root if op in ("broadcast", "reduce") else -1, "time_us": seconds * 1e6,
            "algbw": algbw, "busbw": algbw * bus_factor(op, p), "wrong": 0, "nranks": p,
            "impl": "torch-gloo"}


def worker(rank, p, port, a):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=p)
    ops = [op for name in a.op_name.split(",") for op in (OPS if name == "all" else [name])]
    out = open(a.json, "w") if (a.json and rank == 0) else None
    if rank == 0:
        print(f"# torch_gloo_bench: {p} ranks, torch {torch.__version__} gloo, -b {a.minbytes} "
              f"-e {a.maxbytes} -f {a.stepfactor} -n {a.iters} -w {a.warmup_iters}\n#")
        print("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s" %
              ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"))
        print("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s" %
              ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""))
    for op in ops:
        if rank == 0:
            print(f"# {op}", flush=True)
        last = 0
        for nbytes in sizes(a):
            row = measure(op, nbytes, a, rank, p)
            if row == "unsupported":
                if rank == 0:
                    print(f"# {op}: not supported by gloo in this PyTorch", flush=True)
                break
            if row is None or row["size"] == last:
                continue
            last = row["size"]
            if rank == 0:
                print("  %10d  %12d  %8s  %6s  %6d  %9.1f  %7.3f  %7.3f  %6d" % (
                    row["size"], row["count"], row["type"], row["redop"], row["root"],
                    row["time_us"], row["algbw"], row["busbw"], row["wrong"]), flush=True)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("op_name", help="one of %s, all, or a comma-separated list" % ", ".join(OPS))
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("-b", "--minbytes", type=parse_bytes, default=32 << 20)
    ap.add_argument("-e", "--maxbytes", type=parse_bytes, default=32 << 20)
    ap.add_argument("-f", "--stepfactor", type=float, default=1)
    ap.add_argument("-i", "--stepbytes", type=parse_bytes, default=1 << 20)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup_iters", type=int, default=5)
    ap.add_argument("-c", "--check", type=int, default=0, help="accepted; not checked here")
    ap.add_argument("-o", "--op", default="sum", choices=list(REDOPS))
    ap.add_argument("-d", "--datatype", default="float", choices=list(DTYPES))
    ap.add_argument("-r", "--root", type=int, default=0)
    ap.add_argument("-a", "--average", type=int, default=1, choices=[0, 1, 2, 3],
                    help="a row's time: 0 rank 0's, 1 mean, 2 min, 3 max over ranks")
    ap.add_argument("--json")
    a = ap.parse_args()
    for name in a.op_name.split(","):
        if name not in OPS + ["all"]:
            ap.error(f"unknown op {name}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a.nprocs, port, a), nprocs=a.nprocs, join=True)


if __name__ == "__main__":
    sys.exit(main())
