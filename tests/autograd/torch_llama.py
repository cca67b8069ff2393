"""The Llama-shaped Transformer of autograd/nn/transformer.h, and its mixture-
of-experts blocks, written in PyTorch from the papers' definitions.

Parameter names and shapes are spmd's state dict (Transformer::save), so a
model built here loads spmd's initial weights with load_state_dict(strict=True).
test_torch_reference_llama checks spmd against it through
torch_reference_llama.py. Each piece is written from its paper:

  RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * g.
  RoPE (Su et al., RoFormer): the pairs (x_{2i}, x_{2i+1}) of each head of q
      and k at position m turned by the angle m * theta^(-2i/D).
  SwiGLU (Shazeer 2020): (silu(x W) * x V) W2, with W = w1 the gate, V = w3.
  Grouped-query attention (Ainslie et al. 2023): the H query heads in
      n_kv_heads groups of consecutive heads, each group reading one key and
      value head.
  Mixture of experts: a softmax router over E experts, each token's top k
      (Switch Transformer, Fedus et al., for k = 1, with gate p_e; GShard and
      Mixtral for k = 2, with the gates renormalized over the k chosen),
      expert capacity ceil(factor * N * k / E) filled first choices first and
      tokens in order within a choice (GShard), a dropped assignment adding
      nothing; and Switch's auxiliary load-balancing loss
      E * sum_e f_e * P_e, f_e the share of the N * k assignments that chose
      e (before capacity; for k = 1 Switch's fraction of tokens), P_e the mean
      router probability of e.

The same class also builds the GPT-2 shape (LayerNorm, GELU-tanh MLP, learned
positions, fused qkv with biases, tied head), so that an MoE block can be
checked with biased GELU experts too.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_angles(T, D, theta):
    """cos, sin (T, D/2) of the angles m * theta^(-2i/D), computed in float64
    and rounded to float32 once."""
    i = torch.arange(D // 2, dtype=torch.float64)
    m = torch.arange(T, dtype=torch.float64)
    angle = m[:, None] * theta ** (-2.0 * i / D)[None, :]
    return torch.cos(angle).float(), torch.sin(angle).float()


def apply_rope(x, cos, sin):
    """x (B, T, H, D): each pair (x_{2i}, x_{2i+1}) at position m multiplied
    by the rotation [[cos, -sin], [sin, cos]] of m's i-th angle."""
    B, T, H, D = x.shape
    pairs = x.reshape(B, T, H, D // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c, s = cos[None, :T, None, :], sin[None, :T, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).reshape(B, T, H, D)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, H = cfg["d_model"], cfg["n_heads"]
        self.H, self.Hkv, self.D = H, cfg["n_kv_heads"], C // H
        self.fused = cfg["fused_qkv"]
        bias = cfg["bias"]
        q_dim, kv_dim = self.H * self.D, self.Hkv * self.D
        if self.fused:
            self.wqkv = nn.Linear(C, q_dim + 2 * kv_dim, bias=bias)
        else:
            self.wq = nn.Linear(C, q_dim, bias=bias)
            self.wk = nn.Linear(C, kv_dim, bias=bias)
            self.wv = nn.Linear(C, kv_dim, bias=bias)
        self.wo = nn.Linear(q_dim, C, bias=bias)
        self.rope = cfg["positions"] == "rope"
        if self.rope:
            cos, sin = rope_angles(cfg["max_seq_len"], self.D, cfg["rope_theta"])
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        B, T, _ = x.shape
        H, Hkv, D = self.H, self.Hkv, self.D
        if self.fused:
            q, k, v = self.wqkv(x).split([H * D, Hkv * D, Hkv * D], dim=-1)
        else:
            q, k, v = self.wq(x), self.wk(x), self.wv(x)
        q, k, v = q.view(B, T, H, D), k.view(B, T, Hkv, D), v.view(B, T, Hkv, D)
        if self.rope:
            q, k = apply_rope(q, self.cos, self.sin), apply_rope(k, self.cos, self.sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, D)
        # Query head h belongs to group h // (H / Hkv), which reads key/value head h // (H / Hkv).
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        y = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
        return self.wo(y.transpose(1, 2).reshape(B, T, H * D))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, Hd, bias = cfg["d_model"], cfg["hidden"], cfg["bias"]
        self.swiglu = cfg["activation"] == "swiglu"
        self.w1 = nn.Linear(C, Hd, bias=bias)
        self.w2 = nn.Linear(Hd, C, bias=bias)
        if self.swiglu:
            self.w3 = nn.Linear(C, Hd, bias=bias)

    def forward(self, x):
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, Hd, E = cfg["d_model"], cfg["hidden"], cfg["n_experts"]
        self.E, self.k, self.factor = E, cfg["moe_top_k"], cfg["moe_capacity_factor"]
        self.swiglu = cfg["activation"] == "swiglu"
        self.bias = cfg["bias"]
        self.router = nn.Linear(C, E, bias=False)
        # Expert e's weights are w1[e] (H, C), w2[e] (C, H), w3[e]: a Linear's (out, in).
        self.w1 = nn.Parameter(torch.empty(E, Hd, C))
        self.w2 = nn.Parameter(torch.empty(E, C, Hd))
        if self.swiglu:
            self.w3 = nn.Parameter(torch.empty(E, Hd, C))
        if self.bias:
            self.b1 = nn.Parameter(torch.empty(E, Hd))
            self.b2 = nn.Parameter(torch.empty(E, C))
            if self.swiglu:
                self.b3 = nn.Parameter(torch.empty(E, Hd))
        self.aux = None     # the balancing loss of the last forward
        self.counts = None  # assignments each expert took (after capacity) in the last forward

    def expert(self, e, x):
        b = (lambda name: getattr(self, name)[e]) if self.bias else (lambda name: None)
        h = F.linear(x, self.w1[e], b("b1"))
        if self.swiglu:
            h = F.silu(h) * F.linear(x, self.w3[e], b("b3"))
        else:
            h = F.gelu(h, approximate="tanh")
        return F.linear(h, self.w2[e], b("b2"))

    def forward(self, x):
        C, E, k = x.shape[-1], self.E, self.k
        xf = x.reshape(-1, C)
        N = xf.shape[0]
        probs = F.softmax(self.router(xf), dim=-1)  # (N, E)
        # Each token's k most probable experts, best first; a stable sort
        # puts the lower expert index first on a tie.
        choice = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices[:, :k]
        gates = probs.gather(1, choice)  # (N, k)
        if k > 1:
            gates = gates / gates.sum(dim=1, keepdim=True)

        # Capacity: every token's first choice, then every token's second, ...
        capacity = math.ceil(self.factor * N * k / E) if self.factor > 0 else N * k
        kept = torch.zeros(N, k, dtype=torch.bool)
        taken = [0] * E
        for j in range(k):
            for n in range(N):
                e = int(choice[n, j])
                if taken[e] < capacity:
                    kept[n, j] = True
                    taken[e] += 1
        self.counts = torch.tensor(taken, dtype=torch.int64)

        y = torch.zeros_like(xf)
        for e in range(E):
            for j in range(k):
                tokens = ((choice[:, j] == e) & kept[:, j]).nonzero().flatten()
                if len(tokens):
                    out = self.expert(e, xf[tokens]) * gates[tokens, j].unsqueeze(1)
                    y = y.index_add(0, tokens, out)

        chosen = torch.bincount(choice.flatten(), minlength=E).to(probs.dtype)
        f = chosen / (N * k)     # share of the assignments, a constant
        P = probs.mean(dim=0)    # mean router probability, differentiable
        self.aux = E * (f * P).sum()
        return y.reshape(x.shape)


class Block(nn.Module):
    def __init__(self, cfg, moe_block):
        super().__init__()
        norm = (lambda: RMSNorm(cfg["d_model"], cfg["norm_eps"])) if cfg["norm"] == "rms" else (
            lambda: nn.LayerNorm(cfg["d_model"], eps=cfg["norm_eps"]))
        self.attn_norm = norm()
        self.attn = Attention(cfg)
        self.ffn_norm = norm()
        if moe_block:
            self.moe = MoE(cfg)
        else:
            self.mlp = MLP(cfg)

    def forward(self, x):
        h = x + self.attn(self.attn_norm(x))
        ffn = self.moe if hasattr(self, "moe") else self.mlp
        return h + ffn(self.ffn_norm(h))


class Transformer(nn.Module):
    """cfg: the dict test_torch_reference_llama writes to config.json."""

    def __init__(self, cfg):
        super().__init__()
        if cfg["norm"] == "layer":
            assert cfg["bias"], "torch's LayerNorm here always has a bias, as spmd's with bias"
        self.tok_embeddings = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        if cfg["positions"] == "learned":
            self.pos_embeddings = nn.Embedding(cfg["max_seq_len"], cfg["d_model"])
        self.layers = nn.ModuleList(
            Block(cfg, cfg["n_experts"] > 0 and i % cfg["moe_every"] == 0)
            for i in range(cfg["n_layers"]))
        self.norm = (RMSNorm(cfg["d_model"], cfg["norm_eps"]) if cfg["norm"] == "rms" else
                     nn.LayerNorm(cfg["d_model"], eps=cfg["norm_eps"]))
        self.tied = cfg["tie_embeddings"]
        if not self.tied:
            self.output = nn.Linear(cfg["d_model"], cfg["vocab_size"], bias=False)

    def forward(self, ids):
        x = self.tok_embeddings(ids)
        if hasattr(self, "pos_embeddings"):
            x = x + self.pos_embeddings(torch.arange(ids.shape[1]))
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        return x @ self.tok_embeddings.weight.t() if self.tied else self.output(x)

    def moe_layers(self):
        """(name, MoE) of every MoE block, in order."""
        return [(n, m) for n, m in self.named_modules() if isinstance(m, MoE)]
