"""The PyTorch peer of spmd-bench-train: the same GPT-2 training step, timed the same way.

The model is tests/autograd/torch_gpt2.py, the one test_torch_reference checks
spmd against, so both sides run the identical computation: forward,
cross-entropy, backward, AdamW (lr 3e-4, weight decay 0.1) on random tokens
(a fresh batch each step, on the device before the clock starts), from
GPT-2's initialization as spmd's. The median step time over --steps steps
after --warmup untimed ones, and the medians of its phases (forward with
the loss, backward, optimizer step).

CPU (the default): f32, PyTorch's default AdamW, peak RSS from getrusage. It
prints which BLAS library the process loaded and the thread settings that ran
(torch's default on a 2-core machine is 1 thread, so --threads is always set
explicitly).

GPU (--device cuda): PyTorch eager as its users run it fast, without
torch.compile: torch.autocast bf16 around the forward and the loss (f32
master weights), attention through F.scaled_dot_product_attention (flash
attention; --attention naive for the explicit softmax), AdamW with
fused=True (one kernel for all parameters; --adamw foreach for PyTorch's
default). Each step is timed between two
torch.cuda.synchronize(); the line adds the MFU as spmd-bench-train
computes it and torch.cuda.max_memory_allocated.

One line in spmd-bench-train's format:
  torch device=cpu config=tiny threads=1 params=842496 tokens_per_s=... step_ms=... peak_rss_mb=...

--profile-top N runs the timed steps under torch.profiler (CPU activity) and
adds, as spmd-bench-train does, a tab-separated line per op of the N with the
largest self CPU time in key_averages() ("#op <name> - <self ms per step>
<calls per step>"), then "#op_total <self ms per step, all ops> <mean step ms>".
"""
import argparse
import contextlib
import math
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "autograd"))
from torch_gpt2 import GPT2, PRESETS  # noqa: E402


def loaded_blas():
    """The BLAS/LAPACK shared libraries mapped into this process."""
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            name = os.path.basename(path)
            if any(k in name for k in ("blas", "lapack", "mkl", "gomp", "omp")):
                libs.add(os.path.realpath(path))
    return sorted(libs)


class PhaseMarks:
    """Boundaries of a step's phases without waiting: CUDA events, or the host clock."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.marks = [torch.cuda.Event(enable_timing=True) for _ in range(4)] if cuda else [0.0] * 4

    def mark(self, i):
        if self.cuda:
            self.marks[i].record()
        else:
            self.marks[i] = time.perf_counter()

    def ms(self, i):
        if self.cuda:
            return self.marks[i].elapsed_time(self.marks[i + 1])
        return (self.marks[i + 1] - self.marks[i]) * 1e3


def init_gpt2(model, n_layers):
    """GPT-2's initialization, as spmd's Transformer::init_weights."""
    with torch.no_grad():
        for name, m in model.named_modules():
            residual = name.endswith("attn.wo") or name.endswith("mlp.w2")
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0, 0.02 / math.sqrt(2 * n_layers) if residual else 0.02)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, torch.nn.Embedding):
                m.weight.normal_(0, 0.02)


def make_optimizer(model, args, cuda):
    kwargs = dict(lr=3e-4, weight_decay=0.1)
    if cuda and args.adamw == "fused":
        kwargs["fused"] = True
    elif cuda and args.adamw == "foreach":
        kwargs["foreach"] = True
    return torch.optim.AdamW(model.parameters(), **kwargs)


def describe(args, cuda):
    if not cuda:
        print(f"# torch {torch.__version__}: threads {torch.get_num_threads()} (set), interop "
              f"{torch.get_num_interop_threads()}, OMP_NUM_THREADS="
              f"{os.environ.get('OMP_NUM_THREADS')}, mkldnn {torch.backends.mkldnn.is_available()}")
        print(f"# loaded: {', '.join(loaded_blas())}")
    else:
        print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(0)}: autocast "
              f"{args.autocast}, attention {args.attention}, AdamW {args.adamw}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--autocast", default="auto", choices=["auto", "bf16", "none"])
    ap.add_argument("--attention", default="sdpa", choices=["sdpa", "naive"],
                    help="on cuda: F.scaled_dot_product_attention or the explicit softmax")
    ap.add_argument("--adamw", default="fused", choices=["fused", "foreach", "default"],
                    help="on cuda: the AdamW implementation")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--profile-top", type=int, default=0,
                    help="profile the timed steps; print the N ops of largest self CPU time")
    args = ap.parse_args()

    cuda = args.device == "cuda"
    autocast = args.autocast == "bf16" or (args.autocast == "auto" and cuda)
    args.autocast = "bf16" if autocast else "none"
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    V, T, L, H, C = PRESETS[args.config]
    model = GPT2(V, T, L, H, C, sdpa=cuda and args.attention == "sdpa")
    init_gpt2(model, L)
    model.to(args.device)
    opt = make_optimizer(model, args, cuda)
    n = args.warmup + args.steps
    xs = [torch.randint(0, V, (args.batch, T)).to(args.device) for _ in range(n)]
    ys = [torch.randint(0, V, (args.batch, T)).to(args.device) for _ in range(n)]
    describe(args, cuda)

    def region():
        if autocast:
            return torch.autocast(args.device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def wait():
        if cuda:
            torch.cuda.synchronize()

    times, losses, phases = [], [], [[], [], []]  # forward (with the loss), backward, step
    marks = PhaseMarks(cuda)
    profiler = None
    wait()
    for i in range(n):
        if i == args.warmup and args.profile_top > 0:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            profiler.__enter__()
        start = time.perf_counter()
        marks.mark(0)
        with region():
            logits = model(xs[i])
            loss = F.cross_entropy(logits.view(-1, V), ys[i].view(-1))
        marks.mark(1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        marks.mark(2)
        opt.step()
        marks.mark(3)
        wait()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
            for k in range(3):
                phases[k].append(marks.ms(k))
        if i in (0, n - 1):
            losses.append(loss.item())
    if profiler is not None:
        profiler.__exit__(None, None, None)
    times.sort()
    median = times[len(times) // 2]
    params = sum(p.numel() for p in model.parameters())
    tokens_per_s = args.batch * T / median
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    line = (f"torch device={args.device} config={args.config} threads={args.threads} "
            f"autocast={args.autocast} batch={args.batch} params={params} "
            f"tokens_per_s={tokens_per_s:.0f} step_ms={median * 1e3:.2f} "
            f"min_step_ms={times[0] * 1e3:.2f} peak_rss_mb={rss:.1f}")
    if cuda:
        # As spmd (train/flops.h): 6 x the weights a token multiplies by (the
        # blocks' four attention and two MLP matrices, the head) + 12 L C T.
        weights = V * C + L * (4 * C * C + 2 * C * 4 * C)
        tflops = (6 * weights + 12 * L * C * T) * tokens_per_s / 1e12
        line += (f" tflops={tflops:.1f} mfu={tflops / args.peak_tflops:.3f} "
                 f"peak_mem_mb={torch.cuda.max_memory_allocated() / 2**20:.0f}")
    fwd, bwd, step = (sorted(p)[len(p) // 2] for p in phases)
    print(f"{line} forward_ms={fwd:.2f} backward_ms={bwd:.2f} optimizer_ms={step:.2f} "
          f"loss_first={losses[0]:.4f} loss_last={losses[-1]:.4f}")
    if profiler is not None:
        print_top_ops(profiler, args.profile_top, args.steps, sum(times) / len(times))


def print_top_ops(profiler, top, steps, mean_s):
    """The profiled steps' ops of largest self CPU time, per step (us in torch, ms here)."""
    events = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    for e in events[:top]:
        print(f"#op\t{e.key}\t-\t{e.self_cpu_time_total / 1e3 / steps:.3f}\t{e.count / steps:.1f}")
    total = sum(e.self_cpu_time_total for e in events)
    print(f"#op_total\t{total / 1e3 / steps:.3f}\t{mean_s * 1e3:.3f}")


if __name__ == "__main__":
    main()
