// CausalSelfAttention: project, split into heads, rotate (RoPE), attend, merge.
#include "autograd/nn/attention.h"

#include "autograd/nn_functional.h"
#include "autograd/tensor_ops.h"

namespace spmd::nn {

CausalSelfAttention::CausalSelfAttention(const AttentionOptions& opts, Generator* gen)
    : options([&] {
        AttentionOptions o = opts;
        if (o.n_kv_heads == 0) o.n_kv_heads = o.n_heads;
        return o;
      }()),
      head_dim(opts.n_heads > 0 ? opts.d_model / opts.n_heads : 0) {
  const AttentionOptions& o = options;
  SPMD_CHECK(o.n_heads > 0 && o.d_model % o.n_heads == 0 && o.n_heads % o.n_kv_heads == 0,
             "CausalSelfAttention: d_model ", o.d_model, " must split into n_heads ", o.n_heads,
             ", a multiple of n_kv_heads ", o.n_kv_heads);
  const int64_t q_dim = o.n_heads * head_dim, kv_dim = o.n_kv_heads * head_dim;
  if (o.fused_qkv) {
    wqkv = register_module("wqkv",
                           std::make_shared<Linear>(o.d_model, q_dim + 2 * kv_dim, o.bias, gen));
  } else {
    wq = register_module("wq", std::make_shared<Linear>(o.d_model, q_dim, o.bias, gen));
    wk = register_module("wk", std::make_shared<Linear>(o.d_model, kv_dim, o.bias, gen));
    wv = register_module("wv", std::make_shared<Linear>(o.d_model, kv_dim, o.bias, gen));
  }
  wo = register_module("wo", std::make_shared<Linear>(q_dim, o.d_model, o.bias, gen));
  if (o.rope) {
    SPMD_CHECK(o.max_seq_len > 0 && head_dim % 2 == 0, "CausalSelfAttention: RoPE needs ",
               "max_seq_len > 0 and an even head size, got ", o.max_seq_len, " and ", head_dim);
    ops::RopeTables t = ops::rope_tables(o.max_seq_len, head_dim, o.rope_theta);
    rope_cos_ = t.cos;
    rope_sin_ = t.sin;
    register_buffer("rope_cos", rope_cos_, /*persistent=*/false);
    register_buffer("rope_sin", rope_sin_, /*persistent=*/false);
  }
}

CausalSelfAttention::Projected CausalSelfAttention::project(const Tensor& x) {
  SPMD_CHECK(x.ndim() == 3 && x.size(2) == options.d_model, "CausalSelfAttention: expected x ",
             "(B, T, ", options.d_model, "), got ", x.shape());
  const int64_t B = x.size(0), T = x.size(1);
  // The heads are the ones the projections produce: all of them, or the
  // slice a tensor-parallel split left this module (whole heads of q, k and
  // v in the same proportion, so group = H / Hkv holds either way).
  const int64_t group = options.n_heads / options.n_kv_heads;
  int64_t H = 0, Hkv = 0;
  Tensor q, k, v;
  if (wqkv) {
    const Tensor qkv = (*wqkv)(x);  // (B, T, (H + 2 Hkv) D)
    Hkv = qkv.size(-1) / ((group + 2) * head_dim), H = group * Hkv;
    std::vector<Tensor> parts =
        split(qkv, std::vector<int64_t>{H * head_dim, Hkv * head_dim, Hkv * head_dim}, -1);
    q = parts[0], k = parts[1], v = parts[2];  // (B, T, H*D) views of one (B, T, 3C)
  } else {
    q = (*wq)(x), k = (*wk)(x), v = (*wv)(x);
    H = q.size(-1) / head_dim, Hkv = k.size(-1) / head_dim;
  }
  return {view(q, {B, T, H, head_dim}), view(k, {B, T, Hkv, head_dim}),
          view(v, {B, T, Hkv, head_dim})};
}

Tensor CausalSelfAttention::rotate(const Tensor& x, int64_t start) const {
  if (!options.rope) return x;
  const int64_t T = x.size(1);
  SPMD_CHECK(start >= 0 && start + T <= options.max_seq_len, "CausalSelfAttention: positions ",
             start, " .. ", start + T - 1, " exceed max_seq_len ", options.max_seq_len);
  return rope(x, narrow(rope_cos_, 0, start, T), narrow(rope_sin_, 0, start, T));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  auto [q, k, v] = project(x);
  const int64_t B = x.size(0), T = x.size(1), H = q.size(2);
  if (options.rope) {
    SPMD_CHECK(T <= options.max_seq_len, "CausalSelfAttention: sequence of ", T,
               " exceeds max_seq_len ", options.max_seq_len);
    const Tensor cos = rope_rows ? rope_rows(rope_cos_, T) : rope_cos_;
    const Tensor sin = rope_rows ? rope_rows(rope_sin_, T) : rope_sin_;
    q = rope(q, cos, sin);
    k = rope(k, cos, sin);
  }
  // (B, T, H, D) -> (B, H, T, D): views, no copies.
  Tensor y = attention_fn ? attention_fn(transpose(q, 1, 2), transpose(k, 1, 2), transpose(v, 1, 2))
                          : scaled_dot_product_attention(transpose(q, 1, 2), transpose(k, 1, 2),
                                                         transpose(v, 1, 2), /*causal=*/true);
  y = reshape(transpose(y, 1, 2), {B, T, H * head_dim});  // heads side by side again
  return (*wo)(y);
}

}  // namespace spmd::nn
