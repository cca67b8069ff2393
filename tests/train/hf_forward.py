#!/usr/bin/python3
"""GPT2LMHeadModel's forward, written here in numpy from the HF folder alone,
against the logits spmd computed for the same ids.

Usage: hf_forward.py FOLDER

FOLDER is what `spmd-train export --format hf --with-logits` wrote. The
forward follows transformers' GPT-2 (modeling_gpt2.py) as its config.json
describes it: token plus position embeddings; per block ln_1, Conv1D c_attn
(x W + b with W [in, out]) split into q, k, v along the features, heads of
n_embd / n_head, causal softmax(q k^T / sqrt(D)), c_proj, the residual; ln_2,
c_fc, gelu_new, c_proj, the residual; ln_f; the head wte^T (tied) or
lm_head.weight^T. In f64, so the difference is spmd's f32 rounding alone:
it must stay under 1e-4, and be 4 times smaller than with the exact GELU
("gelu") in place of gelu_new. Exits 77 when numpy is missing.
"""
import json
import math
import struct
import sys

try:
    import numpy as np
except ImportError:
    print("SKIPPED: no numpy")
    sys.exit(77)

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        raw = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=DTYPES[e["dtype"]])
        out[name] = raw.reshape(e["shape"]).astype(np.float64 if e["dtype"][0] == "F" else np.int64)
    return out


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    """transformers' "gelu_new": the tanh approximation."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_exact(x):
    """transformers' "gelu": x Phi(x)."""
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))


def forward(p, config, ids, gelu=gelu_new):
    B, T = ids.shape
    C, H, eps = config["n_embd"], config["n_head"], config["layer_norm_epsilon"]
    D = C // H
    x = p["transformer.wte.weight"][ids] + p["transformer.wpe.weight"][np.arange(T)]
    causal = np.tril(np.ones((T, T), dtype=bool))
    for i in range(config["n_layer"]):
        w = lambda name: p[f"transformer.h.{i}.{name}"]  # noqa: E731
        a = layer_norm(x, w("ln_1.weight"), w("ln_1.bias"), eps)
        qkv = a @ w("attn.c_attn.weight") + w("attn.c_attn.bias")  # (B, T, 3C)
        q, k, v = (t.reshape(B, T, H, D).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, -1))
        scores = np.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(D), -np.inf)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        y = (scores / scores.sum(-1, keepdims=True)) @ v  # (B, H, T, D)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ w("attn.c_proj.weight") + w("attn.c_proj.bias")
        m = layer_norm(x, w("ln_2.weight"), w("ln_2.bias"), eps)
        m = gelu(m @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias"))
        x = x + m @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias")
    x = layer_norm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps)
    head = p["transformer.wte.weight"] if config["tie_word_embeddings"] else p["lm_head.weight"]
    return x @ head.T


def main():
    folder = sys.argv[1]
    with open(f"{folder}/config.json") as f:
        config = json.load(f)
    assert config["activation_function"] == "gelu_new", config["activation_function"]
    params = read_safetensors(f"{folder}/model.safetensors")
    check = read_safetensors(f"{folder}/logits.safetensors")
    diff = np.abs(forward(params, config, check["ids"]) - check["logits"]).max()
    exact = np.abs(forward(params, config, check["ids"], gelu_exact) - check["logits"]).max()
    print(f"numpy GPT2LMHeadModel forward vs spmd's logits {check['logits'].shape}: "
          f"max |difference| {diff:.2e} (with the exact GELU: {exact:.2e})")
    assert diff < 1e-4, diff
    # A small model's activations are small, where the two GELUs differ
    # little: both may pass 1e-4, but the one config.json names fits best.
    assert diff * 4 < exact, (diff, exact)


if __name__ == "__main__":
    main()
