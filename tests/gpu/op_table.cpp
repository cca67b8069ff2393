// The op table (op_table.h): one case per Backend method and variant, with
// shapes that are not multiples of any tile or vector width, strided and
// broadcast (stride 0) operands, and the backward ops beside the forward ones.
#include "op_table.h"

namespace spmd::test {
namespace {

using In = std::vector<Tensor>;
using Out = std::vector<Tensor>;

const std::vector<DType> kFloats = {DType::kF32, DType::kBF16, DType::kF16};
const std::vector<DType> kAllFloats = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};
const std::vector<DType> kF32 = {DType::kF32};

Tensor transposed(const Tensor& t) {  // the last two dims swapped
  Shape shape = t.shape(), strides = t.strides();
  const int n = t.ndim();
  std::swap(shape[n - 1], shape[n - 2]);
  std::swap(strides[n - 1], strides[n - 2]);
  return view(t, shape, strides);
}

Tensor expanded(const Tensor& t, const Shape& shape) {  // size-1 dims broadcast (stride 0)
  Shape strides = t.strides();
  for (int d = 0; d < t.ndim(); ++d)
    if (t.size(d) == 1 && shape[d] != 1) strides[d] = 0;
  return view(t, shape, strides);
}

void add_elementwise(std::vector<OpCase>& t) {
  t.push_back({"fill (strided out)", {}, kAllFloats, [](const RunContext& c, const In&) {
                 Tensor o = c.out({6, 9});
                 c.be.fill(view(o, {6, 4}, {9, 2}, 1), 1.25);  // every other column
                 c.be.fill(view(o, {6, 5}, {9, 2}, 0), 0.0);
                 return Out{o};
               }});
  t.push_back({"arange", {}, kAllFloats, [](const RunContext& c, const In&) {
                 Tensor o = c.out({100});
                 c.be.arange(o, -3, 0.25);
                 return Out{o};
               }});
  t.push_back({"copy: cast to bf16, f16, i64, bool; transposed; broadcast",
               {{{7, 13}, Values::kFloat}, {{1, 13}, Values::kFloat}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Tensor bf = c.out({7, 13}, DType::kBF16), h = c.out({7, 13}, DType::kF16);
                 Tensor i = c.out({7, 13}, DType::kI64), b = c.out({7, 13}, DType::kBool);
                 Tensor tr = c.out({13, 7}), bc = c.out({7, 13});
                 c.be.copy(in[0], bf);
                 c.be.copy(in[0], h);
                 c.be.copy(in[0], i);  // truncation toward zero
                 c.be.copy(in[0], b);
                 c.be.copy(transposed(in[0]), tr);
                 c.be.copy(expanded(in[1], {7, 13}), bc);
                 return Out{bf, h, i, b, tr, bc};
               }});
  t.push_back({"copy: i64 to floating",
               {{{11, 5}, Values::kInt}},
               {DType::kI64},
               [](const RunContext& c, const In& in) {
                 Tensor f = c.out({11, 5}, DType::kF32), d = c.out({11, 5}, DType::kF64);
                 c.be.copy(in[0], f);
                 c.be.copy(in[0], d);
                 return Out{f, d};
               }});
  for (int k = 0; k <= int(UnaryOp::kLogicalNot); ++k) {
    const auto op = UnaryOp(k);
    const bool positive = op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt ||
                          op == UnaryOp::kReciprocal;
    const Values values = positive ? Values::kPositive : Values::kFloat;
    t.push_back({std::string("unary ") + op_name(op) + " (contiguous and transposed)",
                 {{{33, 65}, values}, {{65, 33}, values}},
                 kAllFloats,
                 [op](const RunContext& c, const In& in) {
                   const DType odt = op == UnaryOp::kLogicalNot ? DType::kBool : c.dtype;
                   Tensor a = c.out({33, 65}, odt), b = c.out({33, 65}, odt);
                   c.be.unary(op, in[0], a);
                   c.be.unary(op, transposed(in[1]), b);
                   return Out{a, b};
                 }});
  }
  t.push_back(
      {"unary on integers: neg abs square sign",
       {{{9, 7}, Values::kInt}},
       {DType::kI64},
       [](const RunContext& c, const In& in) {
         Out outs;
         for (UnaryOp op : {UnaryOp::kNeg, UnaryOp::kAbs, UnaryOp::kSquare, UnaryOp::kSign}) {
           outs.push_back(c.out({9, 7}, DType::kI64));
           c.be.unary(op, in[0], outs.back());
         }
         return outs;
       }});
  for (int k = 0; k <= int(BinaryOp::kTanhBackward); ++k) {
    const auto op = BinaryOp(k);
    const bool logical = produces_bool(op);
    const Values va = op == BinaryOp::kPow ? Values::kPositive : Values::kFloat;
    const Values vb = op == BinaryOp::kDiv ? Values::kPositive : Values::kFloat;
    t.push_back({std::string("binary ") + op_name(op) + " (broadcast, and a contiguous pair)",
                 {{{7, 1, 33}, va}, {{1, 5, 33}, vb}, {{5, 33}, va}, {{5, 33}, vb}},
                 kAllFloats,
                 [op, logical](const RunContext& c, const In& in) {
                   const DType odt = logical ? DType::kBool : c.dtype;
                   Tensor o1 = c.out({7, 5, 33}, odt), o2 = c.out({5, 33}, odt);
                   c.be.binary(op, expanded(in[0], {7, 5, 33}), expanded(in[1], {7, 5, 33}), o1);
                   c.be.binary(op, in[2], in[3], o2);
                   return Out{o1, o2};
                 }});
  }
  t.push_back(
      {"binary on integers: add mul maximum lt",
       {{{9, 7}, Values::kInt}, {{9, 7}, Values::kInt}},
       {DType::kI64},
       [](const RunContext& c, const In& in) {
         Out outs;
         for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kMul, BinaryOp::kMaximum, BinaryOp::kLt}) {
           outs.push_back(c.out({9, 7}, op == BinaryOp::kLt ? DType::kBool : DType::kI64));
           c.be.binary(op, in[0], in[1], outs.back());
         }
         return outs;
       }});
  t.push_back({"binary_scalar: a+s, s-a, s/a, a^2.5, max(a,s), a<s",
               {{{19, 23}, Values::kPositive}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Out o = {c.out({19, 23}), c.out({19, 23}), c.out({19, 23}),
                          c.out({19, 23}), c.out({19, 23}), c.out({19, 23}, DType::kBool)};
                 c.be.binary_scalar(BinaryOp::kAdd, in[0], 0.5, o[0], false);
                 c.be.binary_scalar(BinaryOp::kSub, in[0], 0.5, o[1], true);
                 c.be.binary_scalar(BinaryOp::kDiv, in[0], 3.0, o[2], true);
                 c.be.binary_scalar(BinaryOp::kPow, in[0], 2.5, o[3], false);
                 c.be.binary_scalar(BinaryOp::kMaximum, in[0], 1.0, o[4], false);
                 c.be.binary_scalar(BinaryOp::kLt, in[0], 1.25, o[5], false);
                 return o;
               }});
  t.push_back({"where (broadcast cond and b)",
               {{{5, 1, 17}, Values::kBool}, {{5, 8, 17}}, {{1, 8, 17}}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Tensor o = c.out({5, 8, 17});
                 c.be.where(expanded(in[0], {5, 8, 17}), in[1], expanded(in[2], {5, 8, 17}), o);
                 return Out{o};
               }});
  t.push_back({"masked_fill (broadcast mask, in place)",
               {{{9, 31}}, {{1, 31}, Values::kBool}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Tensor o = c.clone(in[0]);
                 c.be.masked_fill(o, expanded(in[1], {9, 31}), -4.5, o);
                 return Out{o};
               }});
  t.push_back({"triangle: tril, triu(2), tril(-3) of a transposed view",
               {{{3, 17, 23}}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Tensor a = c.out({3, 17, 23}), b = c.out({3, 17, 23}), d = c.out({3, 23, 17});
                 c.be.triangle(in[0], 0, false, a);
                 c.be.triangle(in[0], 2, true, b);
                 c.be.triangle(transposed(in[0]), -3, false, d);
                 return Out{a, b, d};
               }});
}

void add_reductions(std::vector<OpCase>& t) {
  t.push_back({"reduce sum/mean/max/min/prod over one, two and all dims",
               {{{6, 50, 40}, Values::kUnit}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Out o = {c.out({6, 1, 40}), c.out({1, 50, 1}),  c.out({1, 1, 1}),
                          c.out({6, 50, 1}), c.out({1, 50, 40}), c.out({1, 1, 1}),
                          c.out({6, 50, 1})};
                 c.be.reduce(Reduction::kSum, in[0], o[0]);
                 c.be.reduce(Reduction::kMean, in[0], o[1]);
                 c.be.reduce(Reduction::kSum, in[0], o[2]);
                 c.be.reduce(Reduction::kMax, in[0], o[3]);
                 c.be.reduce(Reduction::kMin, in[0], o[4]);
                 c.be.reduce(Reduction::kMax, in[0], o[5]);
                 c.be.reduce(Reduction::kProd, in[0], o[6]);
                 return o;
               }});
  t.push_back(
      {"reduce: long rows and columns split across blocks",
       {{{300007}, Values::kUnit}, {{2, 200003}, Values::kUnit}, {{40009, 6}, Values::kUnit}},
       {DType::kF32, DType::kF64},
       [](const RunContext& c, const In& in) {
         Out o = {c.out({1}), c.out({2, 1}), c.out({1, 6}), c.out({1, 6})};
         c.be.reduce(Reduction::kSum, in[0], o[0]);
         c.be.reduce(Reduction::kMean, in[1], o[1]);
         c.be.reduce(Reduction::kSum, in[2], o[2]);
         c.be.reduce(Reduction::kMax, in[2], o[3]);
         return o;
       }});
  t.push_back({"reduce over a transposed view",
               {{{37, 29}}},
               kFloats,
               [](const RunContext& c, const In& in) {
                 Out o = {c.out({29, 1}), c.out({1, 37})};
                 c.be.reduce(Reduction::kSum, transposed(in[0]), o[0]);
                 c.be.reduce(Reduction::kSum, transposed(in[0]), o[1]);
                 return o;
               }});
  t.push_back({"reduce sum of integers to i64",
               {{{13, 17}, Values::kInt}},
               {DType::kI64},
               [](const RunContext& c, const In& in) {
                 Out o = {c.out({13, 1}, DType::kI64), c.out({1, 1}, DType::kI64)};
                 c.be.reduce(Reduction::kSum, in[0], o[0]);
                 c.be.reduce(Reduction::kSum, in[0], o[1]);
                 return o;
               }});
  t.push_back({"arg_reduce: argmax over rows, argmin over columns",
               {{{37, 300}}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Out o = {c.out({37, 1}, DType::kI64), c.out({1, 300}, DType::kI64)};
                 c.be.arg_reduce(true, in[0], 1, o[0]);
                 c.be.arg_reduce(false, in[0], 0, o[1]);
                 return o;
               }});
}

void add_matmul(std::vector<OpCase>& t) {
  t.push_back({"matmul: plain, a^T, b^T, column-major out",
               {{{65, 33}}, {{33, 47}}, {{33, 65}}, {{47, 33}}},
               kAllFloats,
               [](const RunContext& c, const In& in) {
                 Out o = {c.out({65, 47}), c.out({65, 47}), c.out({65, 47}), c.out({47, 65})};
                 c.be.matmul(in[0], in[1], o[0], 1, 0);
                 c.be.matmul(transposed(in[2]), in[1], o[1], 1, 0);
                 c.be.matmul(in[0], transposed(in[3]), o[2], 1, 0);
                 c.be.matmul(in[0], in[1], transposed(o[3]), 1, 0);
                 return o;
               }});
  t.push_back(
      {"matmul: batched, broadcast a, alpha and beta, unmergeable batch",
       {{{3, 4, 17, 9}}, {{3, 4, 9, 11}}, {{17, 9}}, {{3, 4, 17, 11}}, {{4, 3, 17, 9}}},
       kAllFloats,
       [](const RunContext& c, const In& in) {
         Tensor o1 = c.out({3, 4, 17, 11}), o2 = c.out({5, 17, 11});
         Tensor o3 = c.clone(in[3]), o4 = c.out({3, 4, 17, 11});
         c.be.matmul(in[0], in[1], o1, 0.5, 0);
         const Tensor b0 = view(in[1], {5, 9, 11}, {0, 11, 1});  // one b for all
         c.be.matmul(expanded(view(in[2], {1, 17, 9}, {0, 9, 1}), {5, 17, 9}), b0, o2, 1, 0);
         c.be.matmul(in[0], in[1], o3, -1.5, 1);  // accumulates into out
         // a's batch dims swapped: (3, 4) with strides that do not merge
         const Tensor a_perm = view(in[4], {3, 4, 17, 9}, {153, 459, 9, 1});
         c.be.matmul(a_perm, in[1], o4, 1, 0);
         return Out{o1, o2, o3, o4};
       }});
}

}  // namespace

void add_nn_cases(std::vector<OpCase>& t);  // op_table_nn.cpp

Tensor RunContext::clone(const Tensor& t) const {
  Tensor c = poisoned(device, t.shape(), t.dtype());
  be.copy(t, c);
  return c;
}

std::vector<OpCase> op_table() {
  std::vector<OpCase> t;
  add_elementwise(t);
  add_reductions(t);
  add_matmul(t);
  add_nn_cases(t);
  return t;
}

}  // namespace spmd::test
