"""The GPT-2-shaped Transformer of autograd/nn/transformer.h, written in PyTorch.

Same parameter names, shapes and computation: token + learned position
embeddings, pre-LayerNorm blocks (attention through one fused qkv Linear with
bias, then an output projection wo; a GELU-tanh MLP w1, w2 of 4C), a final
LayerNorm, and a head tied to the token embedding. The reference test
(test_torch_reference) checks spmd against it, and bench/peers/torch_train.py
times it, so the model the benchmark compares with is the one the test
validated. On a GPU, sdpa=True computes the same attention with PyTorch's
fused kernel (F.scaled_dot_product_attention), as a PyTorch user would.

Also a minimal safetensors reader (numpy, imported when called), for files spmd writes.
"""
import json
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d_model, n_heads, sdpa=False):
        super().__init__()
        self.n_heads = n_heads
        self.sdpa = sdpa  # PyTorch's fused kernel (flash attention on a GPU) for the same function
        self.wqkv = nn.Linear(d_model, 3 * d_model)
        self.wo = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.n_heads, C // self.n_heads
        q, k, v = self.wqkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
            future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
            p = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
            y = p @ v
        return self.wo(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.w1 = nn.Linear(d_model, 4 * d_model)
        self.w2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, sdpa=False):
        super().__init__()
        self.attn_norm = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, sdpa)
        self.ffn_norm = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.ffn_norm(x))


class GPT2(nn.Module):
    def __init__(self, vocab_size, max_seq_len, n_layers, n_heads, d_model, sdpa=False):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, d_model)
        self.pos_embeddings = nn.Embedding(max_seq_len, d_model)
        self.layers = nn.ModuleList(Block(d_model, n_heads, sdpa) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.tok_embeddings(ids) + self.pos_embeddings(torch.arange(T, device=ids.device))
        for layer in self.layers:
            x = layer(x)
        return self.norm(x) @ self.tok_embeddings.weight.t()  # tied head


PRESETS = {  # name: (vocab, T, layers, heads, d_model), as TransformerConfig::preset
    "tiny": (256, 128, 4, 4, 128),
    "small": (256, 256, 6, 6, 384),
    "gpt2": (50304, 1024, 12, 12, 768),  # GPT-2 124M
}

def load_safetensors(path):
    """{name: numpy array} from a safetensors file. numpy is imported here, not
    above: the GPU benchmark imports this module where only torch is sure."""
    import numpy as np
    dtypes = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
              "U8": np.uint8, "BOOL": np.bool_}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = data[8 + n + begin:8 + n + end]
        out[name] = np.frombuffer(buf, dtype=dtypes[info["dtype"]]).reshape(info["shape"]).copy()
    return out



def load_run(folder):
    """What a spmd reference test wrote to `folder`: config.json and the
    model's weights, the batch and spmd's results (each {name: array})."""
    import os
    cfg = json.load(open(os.path.join(folder, "config.json")))
    return (cfg, load_safetensors(os.path.join(folder, "model.safetensors")),
            load_safetensors(os.path.join(folder, "batch.safetensors")),
            load_safetensors(os.path.join(folder, "spmd.safetensors")))