"""Checks spmd's training step on a Llama-shaped or mixture-of-experts model
against PyTorch (torch_llama.py, written from the papers' definitions).

Usage: torch_reference_llama.py DIR, where test_torch_reference_llama has written
  DIR/config.json        the model's config (TransformerConfig's fields, the
                         MLP hidden width, moe_aux_coef) and AdamW's hyper-parameters
  DIR/model.safetensors  spmd's initial weights (its state_dict)
  DIR/batch.safetensors  x, y: the (B, T) input ids and targets
  DIR/spmd.safetensors   what spmd computed: ce (the cross-entropy), loss (the
                         objective the trainer minimizes: ce + moe_aux_coef x
                         the sum of every MoE block's balancing loss), logits,
                         aux.<block> (each MoE block's balancing loss) and
                         counts.<block> (the assignments each expert took),
                         grad.<name> of the objective for every parameter,
                         step.<name> after one AdamW step
Builds the same model in PyTorch from those weights, runs the same batch, the
same objective and the same AdamW step, and compares each tensor t with
spmd's s by
  max |s - t| / max |t| <= 1e-4,
and the expert counts exactly. Prints one line per tensor; exits 1 if any is off.

The AdamW step is torch's from the initial weights and spmd's gradients (which
are themselves checked against torch's), not from torch's gradients. AdamW's
first update is lr g / (|g| + eps), whose derivative in g is
lr eps / (|g| + eps)^2: for an element whose gradient is near eps (1e-8) it
turns the f32 rounding difference of two correct gradients into a large
difference of the step. Seen here: a gradient of 2.99e-8 in torch and 2.97e-8
in spmd (the tensor's gradients agree to 2.4e-7 of their largest, 1.5e-3) moves
the update by 1.3e-3 lr, and the zero-initialized bias it belongs to is at most
lr after the step, so 1.3e-3 relative. The step from spmd's gradients has no
such amplification: it checks the optimizer, the gradient check checks the
gradients, and every element is compared at 1e-4, none left out.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import load_run  # noqa: E402
from torch_llama import Transformer  # noqa: E402

TOLERANCE = 1e-4


def main(folder):
    torch.manual_seed(0)
    cfg, weights, batch, spmd = load_run(folder)

    model = Transformer(cfg)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=True)
    x, y = torch.from_numpy(batch["x"]), torch.from_numpy(batch["y"])

    logits = model(x)
    ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
    moes = model.moe_layers()
    loss = ce
    if moes:
        aux = moes[0][1].aux
        for _, m in moes[1:]:
            aux = aux + m.aux
        loss = ce + aux * cfg["moe_aux_coef"]
    loss.backward()
    checks = [("ce", ce), ("loss", loss), ("logits", logits)]
    checks += [("aux." + n, m.aux) for n, m in moes]
    checks += [("grad." + n, p.grad.clone()) for n, p in model.named_parameters()]
    # The AdamW step from the same weights and spmd's own gradients (see the
    # module's docstring for why not torch's).
    for n, p in model.named_parameters():
        p.grad = torch.from_numpy(spmd["grad." + n]) if "grad." + n in spmd else None
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                            eps=cfg["eps"], weight_decay=cfg["weight_decay"])
    opt.step()
    checks += [("step." + n, p) for n, p in model.named_parameters()]

    failed = 0
    # The routing is a discrete decision: spmd's and torch's must be the same.
    for name, m in moes:
        got, ref = spmd["counts." + name], m.counts.numpy()
        ok = got.shape == ref.shape and (got == ref).all()
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {'counts.' + name:40s} spmd {got.tolist()}, "
              f"torch {ref.tolist()} (capacity drops {int(ref.sum()) != x.numel() * m.k})")
    # Every tensor spmd wrote is checked, and every one checked was written.
    expected = {n for n, _ in checks} | {"counts." + n for n, _ in moes}
    ok = set(spmd) == expected
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {'names':40s} spmd wrote {len(spmd)}, torch computed "
          f"{len(expected)}; only spmd's: {sorted(set(spmd) - expected)}, only torch's: "
          f"{sorted(expected - set(spmd))}")
    if not ok:
        checks = [(n, t) for n, t in checks if n in spmd]

    worst = (0.0, "")
    for name, ref in checks:
        ref = ref.detach().double().numpy()
        got = spmd[name].astype(np.float64)
        if got.shape != ref.shape:
            print(f"FAIL {name}: spmd shape {got.shape}, torch {ref.shape}")
            failed += 1
            continue
        rel = np.abs(got - ref).max(initial=0.0) / max(np.abs(ref).max(initial=0.0), 1e-30)
        ok = rel <= TOLERANCE
        failed += not ok
        worst = max(worst, (rel, name))
        print(f"{'ok  ' if ok else 'FAIL'} {name:40s} rel {rel:.2e}")
    n = len(checks) + len(moes) + 1
    print(f"torch {torch.__version__}: {n - failed} of {n} tensors within {TOLERANCE:g}, "
          f"largest {worst[1]} {worst[0]:.2e} (loss spmd {float(spmd['loss']):.6f}, "
          f"torch {loss.item():.6f})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
