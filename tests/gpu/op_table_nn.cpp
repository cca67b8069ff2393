// The op table's transformer cases (op_table.h): softmax, the norms,
// cross-entropy, RoPE, indexing, AdamW and attention, each with its backward.
#include "op_table.h"

namespace spmd::test {
namespace {

using In = std::vector<Tensor>;
using Out = std::vector<Tensor>;

const std::vector<DType> kFloats = {DType::kF32, DType::kBF16, DType::kF16};
const std::vector<DType> kAllFloats = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};

void add_softmax_and_norms(std::vector<OpCase>& t) {
  t.push_back({"softmax and log_softmax (short and long rows)",
               {{{37, 100}}, {{5, 3001}}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Out o = {c.out({37, 100}), c.out({37, 100}), c.out({5, 3001})};
                 c.be.softmax(in[0], o[0], false);
                 c.be.softmax(in[0], o[1], true);
                 c.be.softmax(in[1], o[2], false);
                 return o;
               }});
  t.push_back({"softmax_backward and log_softmax backward",
               {{{37, 100}}, {{37, 100}, Values::kUnit}, {{37, 100}, Values::kFloat}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Out o = {c.out({37, 100}), c.out({37, 100})};
                 c.be.softmax_backward(in[0], in[1], o[0], false);
                 c.be.softmax_backward(in[0], in[2], o[1], true);
                 return o;
               }});
  t.push_back({"layer_norm forward and backward, with and without affine",
               {{{37, 96}}, {{96}}, {{96}}, {{37, 96}}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 const DType s = c.stat_dtype();
                 Tensor y = c.out({37, 96}), mean = c.out({37}, s), rstd = c.out({37}, s);
                 c.be.layer_norm(in[0], in[1], in[2], 1e-5, y, mean, rstd);
                 Tensor dx = c.out({37, 96}), dw = c.out({96}), db = c.out({96});
                 c.be.layer_norm_backward(in[3], in[0], in[1], mean, rstd, dx, dw, db);
                 Tensor y0 = c.out({37, 96}), m0 = c.out({37}, s), r0 = c.out({37}, s);
                 c.be.layer_norm(in[0], Tensor(), Tensor(), 1e-5, y0, m0, r0);
                 Tensor dx0 = c.out({37, 96});
                 c.be.layer_norm_backward(in[3], in[0], Tensor(), m0, r0, dx0, Tensor(), Tensor());
                 return Out{y, mean, rstd, dx, dw, db, y0, dx0};
               }});
  t.push_back({"rms_norm forward and backward",
               {{{37, 96}}, {{96}}, {{37, 96}}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Tensor y = c.out({37, 96}), rstd = c.out({37}, c.stat_dtype());
                 c.be.rms_norm(in[0], in[1], 1e-6, y, rstd);
                 Tensor dx = c.out({37, 96}), dw = c.out({96});
                 c.be.rms_norm_backward(in[2], in[0], in[1], rstd, dx, dw);
                 return Out{y, rstd, dx, dw};
               }});
}

void add_loss_and_rope(std::vector<OpCase>& t) {
  t.push_back({"cross_entropy forward and backward (with ignored rows)",
               {{{29, 1000}}, {{29}, Values::kTarget, 1000}, {{29}, Values::kUnit}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 const DType s = c.stat_dtype();
                 Tensor loss = c.out({29}, s), lse = c.out({29}, s);
                 c.be.cross_entropy(in[0], in[1], -100, loss, lse);
                 Tensor dloss = c.out({29}, s);
                 c.be.copy(in[2], dloss);
                 Tensor dlogits = c.out({29, 1000});
                 c.be.cross_entropy_backward(in[0], in[1], lse, dloss, -100, dlogits);
                 return Out{loss, lse, dlogits};
               }});
  t.push_back({"rope forward and inverse, contiguous and strided x",
               {{{2, 7, 3, 16}}, {{7, 8}}, {{7, 8}}, {{2, 3, 7, 16}}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Tensor cos = c.out({7, 8}, c.stat_dtype()), sin = c.out({7, 8}, c.stat_dtype());
                 c.be.copy(in[1], cos);
                 c.be.copy(in[2], sin);
                 Out o = {c.out({2, 7, 3, 16}), c.out({2, 7, 3, 16}), c.out({2, 7, 3, 16})};
                 c.be.rope(in[0], cos, sin, o[0], false);
                 c.be.rope(in[0], cos, sin, o[1], true);
                 // x as a (B, T, H, D) view of (B, H, T, D) memory
                 c.be.rope(view(in[3], {2, 7, 3, 16}, {336, 16, 112, 1}), cos, sin, o[2], false);
                 return o;
               }});
}

void add_indexing(std::vector<OpCase>& t) {
  t.push_back({"index_select along dims 0 and 1",
               {{{10, 6, 5}}, {{8}, Values::kIndex, 6}, {{13}, Values::kIndex, 10}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Out o = {c.out({10, 8, 5}), c.out({13, 6, 5})};
                 c.be.index_select(in[0], 1, in[1], o[0]);
                 c.be.index_select(in[0], 0, in[2], o[1]);
                 return o;
               }});
  t.push_back({"index_add with repeated indices (the embedding backward)",
               {{{10, 7}}, {{40}, Values::kIndex, 10}, {{40, 7}}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Tensor o = c.clone(in[0]);
                 c.be.index_add(o, 0, in[1], in[2]);
                 return Out{o};
               },
               2});
  t.push_back({"gather and scatter_add along dim 1",
               {{{6, 9}}, {{6, 4}, Values::kIndex, 9}, {{6, 4}}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Tensor g = c.out({6, 4});
                 c.be.gather(in[0], 1, in[1], g);
                 Tensor s = c.clone(in[0]);
                 c.be.scatter_add(s, 1, in[1], in[2]);
                 return Out{g, s};
               },
               2});
}

void add_optimizer_and_attention(std::vector<OpCase>& t) {
  t.push_back({"adamw_step (odd length: the vector tail)",
               {{{1003}}, {{1003}}, {{1003}}, {{1003}, Values::kPositive}},
               {DType::kF32},
               [](const RunContext& c, const In& in) {
                 // The optimizer state is f32 on every device: the reference too.
                 Out o;
                 for (int i = 0; i < 4; ++i) {
                   o.push_back(c.out({1003}, DType::kF32));
                   c.be.copy(in[i], o.back());
                 }
                 c.be.adamw_step(o[0], o[1], o[2], o[3], {1e-2, 0.9, 0.95, 1e-8, 0.1, 3});
                 return Out{o[0], o[2], o[3]};
               },
               10});
  auto attention_case = [](const char* name, Shape q, Shape kv, bool causal) {
    return OpCase{
        name, {{q}, {kv}, {kv}, {q}}, kFloats, [q, kv, causal](const RunContext& c, const In& in) {
          const double scale = 0.125;
          Tensor out = c.out(q), lse = c.out({q[0], q[1], q[2]}, DType::kF32);
          c.be.attention(in[0], in[1], in[2], causal, scale, out, lse);
          Tensor dq = c.out(q), dk = c.out(kv), dv = c.out(kv);
          c.be.attention_backward(in[3], in[0], in[1], in[2], out, lse, causal, scale, dq, dk, dv);
          return Out{out, lse, dq, dk, dv};
        }};
  };
  t.push_back(attention_case("attention causal, grouped-query (H 4, Hkv 2), T 70, D 48",
                             {2, 4, 70, 48}, {2, 2, 70, 48}, true));
  t.push_back(attention_case("attention unmasked, T 37 over S 45, D 64", {1, 3, 37, 64},
                             {1, 3, 45, 64}, false));
  t.push_back(
      attention_case("attention causal, D 128, T 33", {1, 2, 33, 128}, {1, 2, 33, 128}, true));
}

}  // namespace

void add_nn_cases(std::vector<OpCase>& t) {
  add_softmax_and_norms(t);
  add_loss_and_rope(t);
  add_indexing(t);
  add_optimizer_and_attention(t);
}

}  // namespace spmd::test
