"""The PyTorch peer of spmd-bench-train: the same GPT-2 training step, timed the same way.

The model is tests/autograd/torch_gpt2.py, the one test_torch_reference checks
spmd against, so both sides run the identical computation: forward,
cross-entropy, backward, AdamW (lr 3e-4, weight decay 0.1, PyTorch's default
implementation) on random byte tokens, f32, CPU. The median step time over
--steps steps after --warmup untimed ones; peak RSS from getrusage.

It prints which BLAS library the process loaded and the thread settings that
ran (torch's default on a 2-core machine is 1 thread, so --threads is always
set explicitly), then one line in spmd-bench-train's format:
  torch config=tiny threads=1 params=842496 tokens_per_s=... step_ms=... peak_rss_mb=...
"""
import argparse
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    V, T, L, H, C = PRESETS[args.config]
    model = GPT2(V, T, L, H, C)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    n = args.warmup + args.steps
    xs = [torch.randint(0, V, (args.batch, T)) for _ in range(n)]
    ys = [torch.randint(0, V, (args.batch, T)) for _ in range(n)]
    print(f"# torch {torch.__version__}: threads {torch.get_num_threads()} (set), interop "
          f"{torch.get_num_interop_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
          f"mkldnn {torch.backends.mkldnn.is_available()}")
    print(f"# loaded: {', '.join(loaded_blas())}")

    times = []
    for i in range(n):
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
    params = sum(p.numel() for p in model.parameters())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"torch config={args.config} threads={args.threads} params={params} "
          f"tokens_per_s={args.batch * T / median:.0f} step_ms={median * 1e3:.2f} "
          f"peak_rss_mb={rss:.1f}")


if __name__ == "__main__":
    main()
