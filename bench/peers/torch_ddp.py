"""The PyTorch peer of spmd-bench-ddp: DDP training of the same GPT-2, timed the same way.

It starts its ranks itself with torch.multiprocessing.spawn (Debian's
torch.distributed.run fails at start-up under Python 3.11+), which meet
through a FileStore (file:// init, so no port can be taken by someone else):
  /usr/bin/python3 bench/peers/torch_ddp.py --nproc 2 --config small --threads 1

The model is tests/autograd/torch_gpt2.py (the one test_torch_reference checks
spmd against), wrapped in torch.nn.parallel.DistributedDataParallel over the
gloo backend with its defaults (25 MiB buckets, the first 1 MiB); AdamW lr
3e-4, weight decay 0.1; random byte tokens per rank drawn before the clock
starts; a barrier before each step; the median step time over --steps steps
after --warmup untimed ones. The hidden share of communication comes from
DDP's own runtime statistics (_get_ddp_logging_data: the average backward
communication time and the part of it overlapped with backward compute).
Rank 0 prints one line in spmd-bench-ddp's format:
  torch-ddp config=small world=2 threads=1 params=... tokens_per_s=... step_ms=...
  span_ms=... span_hidden_share=... peak_rss_mb=...
"""
import argparse
import os
import resource
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "autograd"))
from torch_gpt2 import GPT2, PRESETS  # noqa: E402


def overlap_stats(model):
    """(span ms, hidden share of the span) from DDP's runtime statistics, or (nan, nan).

    PyTorch's reducer times the span from the first bucket's all_reduce to the
    last one's completion (avg_backward_comm_time) and the part of it before
    backward's computation ended (avg_backward_compute_comm_overlap_time).
    """
    try:
        data = model._get_ddp_logging_data()
        comm = data.get("avg_backward_comm_time", 0)
        overlap = data.get("avg_backward_compute_comm_overlap_time", 0)
        if comm > 0:
            return comm / 1e6, overlap / comm
    except (AttributeError, RuntimeError):
        pass
    return float("nan"), float("nan")


def worker(rank, args, store_path):
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank,
                            world_size=args.nproc)
    world = dist.get_world_size()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    V, T, L, H, C = PRESETS[args.config]
    model = DDP(GPT2(V, T, L, H, C))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1 + rank)
    n = args.warmup + args.steps
    xs = [torch.randint(0, V, (args.batch, T), generator=gen) for _ in range(n)]
    ys = [torch.randint(0, V, (args.batch, T), generator=gen) for _ in range(n)]

    times = []
    for i in range(n):
        dist.barrier()
        start = time.perf_counter()
        logits = model(xs[i])
        loss = F.cross_entropy(logits.view(-1, V), ys[i].view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    times.sort()
    median = times[len(times) // 2]
    span_ms, hidden = overlap_stats(model)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print(f"# torch {torch.__version__}: threads {torch.get_num_threads()}, "
              f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, backend gloo")
        print(f"torch-ddp config={args.config} world={world} threads={args.threads} "
              f"params={params} tokens_per_s={world * args.batch * T / median:.0f} "
              f"step_ms={median * 1e3:.1f} span_ms={span_ms:.1f} "
              f"span_hidden_share={hidden:.3f} peak_rss_mb={rss:.1f}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--config", default="small", choices=sorted(PRESETS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args, os.path.join(tmp, "store")), nprocs=args.nproc)


if __name__ == "__main__":
    main()
