"""Checks spmd's GPT-2 training step against PyTorch (as llm.c's test_gpt2 does).

Usage: torch_reference.py DIR, where test_torch_reference has written
  DIR/config.json        the model's shape and the AdamW hyper-parameters
  DIR/model.safetensors  spmd's initial weights (its state_dict)
  DIR/batch.safetensors  x, y: the (B, T) input ids and targets
  DIR/spmd.safetensors   what spmd computed: loss, logits, grad.<name> for
                         every parameter, step.<name> after one AdamW step
Builds the same model in PyTorch from those weights, runs the same batch and
the same AdamW step, and compares each tensor t with spmd's s by
  max |s - t| / max |t| <= 1e-4.
Prints one line per tensor; exits 1 if any is off.

One exception, in the AdamW step: its first update is lr g / (|g| + eps), so
for a gradient that is zero up to rounding its sign is noise. The key part
of the qkv bias is such a gradient (adding b to every key adds q.b to a whole
row of scores, which softmax ignores). Elements whose torch gradient is
below 1e-6 of their tensor's largest are checked only to lie within lr of
the decayed weight.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import GPT2, load_run  # noqa: E402

TOLERANCE = 1e-4


def main(folder):
    torch.manual_seed(0)
    cfg, weights, batch, spmd = load_run(folder)

    model = GPT2(cfg["vocab_size"], cfg["max_seq_len"], cfg["n_layers"], cfg["n_heads"],
                 cfg["d_model"])
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=True)
    x, y = torch.from_numpy(batch["x"]), torch.from_numpy(batch["y"])

    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
    loss.backward()
    checks = [("loss", loss), ("logits", logits)]
    checks += [("grad." + n, p.grad) for n, p in model.named_parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                            eps=cfg["eps"], weight_decay=cfg["weight_decay"])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    checks += [("step." + n, p) for n, p in model.named_parameters()]

    failed = 0
    for name, ref in checks:
        ref = ref.detach().double().numpy()
        got = spmd[name].astype(np.float64)
        if got.shape != ref.shape:
            print(f"FAIL {name}: spmd shape {got.shape}, torch {ref.shape}")
            failed += 1
            continue
        noise = np.zeros(ref.shape, dtype=bool)
        if name.startswith("step."):
            g = np.abs(dict(model.named_parameters())[name[5:]].grad.double().numpy())
            noise = g < 1e-6 * g.max()
            decayed = before[name[5:]].double().numpy() * (1 - cfg["lr"] * cfg["weight_decay"])
            if (np.abs(got - decayed)[noise] > cfg["lr"] * 1.001).any():
                noise[:] = False  # outside the bound: compare them like the rest
        rel = np.abs(got - ref)[~noise].max() / max(np.abs(ref).max(), 1e-30)
        ok = rel <= TOLERANCE
        failed += not ok
        note = f" ({noise.sum()} zero-gradient elements within lr)" if noise.any() else ""
        print(f"{'ok  ' if ok else 'FAIL'} {name:40s} rel {rel:.2e}{note}")
    print(f"torch {torch.__version__}: {len(checks) - failed} of {len(checks)} tensors within "
          f"{TOLERANCE:g} (loss spmd {float(spmd['loss']):.6f}, torch {loss.item():.6f})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
