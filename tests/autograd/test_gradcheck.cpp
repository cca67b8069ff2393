// The gradient-check table: one row per differentiable op (and per notable
// form of one: broadcasting, batched, vector operands), each checked in f64
// against central finite differences by autograd::gradcheck. The table is
// the list: a last test reads autograd/tensor_ops.h and nn_functional.h and
// fails if any op declared there has no row.
#include <strings.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/checkpoint.h"
#include "autograd/gradcheck.h"
#include "tensor/cpu/capability.h"
#include "tensor/ops.h"

using namespace spmd;
using Inputs = std::vector<Tensor>;

namespace {

enum class Domain { kAny, kPositive };  // inputs in [-1, 1] or in [0.5, 2]

struct OpCase {
  std::string name;  // the declared name, then an optional "(variant)"
  std::vector<Shape> shapes;
  std::function<Tensor(const Inputs&)> fn;
  Domain domain = Domain::kAny;
  autograd::GradcheckOptions options = {};
};

Tensor i64(std::vector<int64_t> v, const Shape& s) { return ops::from_vector(v, s); }
Tensor mask(std::vector<bool> v, const Shape& s) {
  return ops::to(ops::from_vector(std::vector<double>(v.begin(), v.end()), s), DType::kBool);
}

// Lower precision in the middle (f64 -> f32 -> f64): a larger step keeps
// the f32 rounding small beside it.
autograd::GradcheckOptions coarse() { return {1e-3, 1e-4, 1e-3, 0}; }

std::vector<OpCase> op_table() {
  const Shape m23{2, 3}, v3{3};
  return {
      // --- elementwise, broadcasting
      {"add", {m23, v3}, [](const Inputs& x) { return add(x[0], x[1]); }},
      {"sub", {m23, {2, 1}}, [](const Inputs& x) { return sub(x[0], x[1]); }},
      {"mul", {m23, v3}, [](const Inputs& x) { return mul(x[0], x[1]); }},
      {"div", {m23, v3}, [](const Inputs& x) { return div(x[0], x[1]); }, Domain::kPositive},
      {"maximum", {m23, v3}, [](const Inputs& x) { return maximum(x[0], x[1]); }},
      {"minimum", {m23, v3}, [](const Inputs& x) { return minimum(x[0], x[1]); }},
      {"add(scalar)", {m23}, [](const Inputs& x) { return add(x[0], 2.5); }},
      {"sub(scalar)", {m23}, [](const Inputs& x) { return sub(x[0], 2.5); }},
      {"sub(scalar first)", {m23}, [](const Inputs& x) { return sub(2.5, x[0]); }},
      {"mul(scalar)", {m23}, [](const Inputs& x) { return mul(x[0], -1.5); }},
      {"div(scalar)", {m23}, [](const Inputs& x) { return div(x[0], 4.0); }},
      {"div(scalar first)",
       {m23},
       [](const Inputs& x) { return div(3.0, x[0]); },
       Domain::kPositive},
      {"pow", {m23}, [](const Inputs& x) { return pow(x[0], 2.5); }, Domain::kPositive},
      {"clamp", {m23}, [](const Inputs& x) { return clamp(x[0], -0.5, 0.5); }},
      {"operator+", {m23, v3}, [](const Inputs& x) { return x[0] + x[1] + 1.5 + (2.0 + x[0]); }},
      {"operator-",
       {m23, v3},
       [](const Inputs& x) { return x[0] - x[1] - 1.5 - (2.0 - x[0]) + (-x[1]); }},
      {"operator*", {m23, v3}, [](const Inputs& x) { return x[0] * x[1] * 1.5 * (2.0 * x[0]); }},
      {"operator/",
       {m23, v3},
       [](const Inputs& x) { return x[0] / x[1] / 1.5 + 2.0 / x[0]; },
       Domain::kPositive},
      {"neg", {m23}, [](const Inputs& x) { return neg(x[0]); }},
      {"abs", {m23}, [](const Inputs& x) { return abs(x[0]); }},
      {"exp", {m23}, [](const Inputs& x) { return exp(x[0]); }},
      {"log", {m23}, [](const Inputs& x) { return log(x[0]); }, Domain::kPositive},
      {"sqrt", {m23}, [](const Inputs& x) { return sqrt(x[0]); }, Domain::kPositive},
      {"rsqrt", {m23}, [](const Inputs& x) { return rsqrt(x[0]); }, Domain::kPositive},
      {"square", {m23}, [](const Inputs& x) { return square(x[0]); }},
      {"reciprocal", {m23}, [](const Inputs& x) { return reciprocal(x[0]); }, Domain::kPositive},
      {"sin", {m23}, [](const Inputs& x) { return sin(x[0]); }},
      {"cos", {m23}, [](const Inputs& x) { return cos(x[0]); }},
      {"tanh", {m23}, [](const Inputs& x) { return tanh(x[0]); }},
      {"sigmoid", {m23}, [](const Inputs& x) { return sigmoid(x[0]); }},
      {"relu", {m23}, [](const Inputs& x) { return relu(x[0]); }},
      {"gelu(tanh)", {m23}, [](const Inputs& x) { return gelu(x[0], true); }},
      {"gelu(erf)", {m23}, [](const Inputs& x) { return gelu(x[0], false); }},
      {"silu", {m23}, [](const Inputs& x) { return silu(x[0]); }},
      {"where",
       {m23, v3},
       [](const Inputs& x) {
         return where(mask({true, false, true, false, false, true}, {2, 3}), x[0], x[1]);
       }},
      {"masked_fill",
       {m23},
       [](const Inputs& x) {
         return masked_fill(x[0], mask({true, false, true}, {3}), 7.0);
       }},
      {"tril", {{3, 3}}, [](const Inputs& x) { return tril(x[0]); }},
      {"triu", {{3, 3}}, [](const Inputs& x) { return triu(x[0], 1); }},
      // --- reductions
      {"sum", {{2, 3, 4}}, [](const Inputs& x) { return sum(x[0], {1}); }},
      {"sum(all, keepdim)", {{2, 3, 4}}, [](const Inputs& x) { return sum(x[0], {}, true); }},
      {"mean",
       {{2, 3, 4}},
       [](const Inputs& x) {
         return mean(x[0], {0, 2}, true);
       }},
      {"amax", {{2, 3, 4}}, [](const Inputs& x) { return amax(x[0], {1}); }},
      {"amin", {{2, 3, 4}}, [](const Inputs& x) { return amin(x[0]); }},
      // --- matrix products
      {"matmul", {{2, 3}, {3, 4}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {"matmul(broadcast batch)",
       {{2, 1, 3, 4}, {3, 4, 2}},
       [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {"matmul(folded batch)",
       {{2, 3, 4}, {4, 2}},
       [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {"matmul(vectors)",
       {{3}, {3, 4}, {4}},
       [](const Inputs& x) {  // (3) @ (3, 4), (3, 4) @ (4), (3) @ (3)
         return cat({matmul(x[0], x[1]), matmul(x[1], x[2]), unsqueeze(matmul(x[0], x[0]), 0)});
       }},
      {"matmul(transposed operand)",
       {{4, 3}, {2, 4}},
       [](const Inputs& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); }},
      {"linear",
       {{2, 3, 4}, {5, 4}, {5}},
       [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
      {"linear(no bias)", {{3, 4}, {5, 4}}, [](const Inputs& x) { return linear(x[0], x[1]); }},
      // --- views and copies
      {"view",
       {{2, 6}},
       [](const Inputs& x) {
         return view(x[0], {3, 4});
       }},
      {"reshape",
       {{2, 6}},
       [](const Inputs& x) {
         return reshape(transpose(x[0], 0, 1), {4, 3});
       }},
      {"flatten", {{2, 3, 2}}, [](const Inputs& x) { return flatten(x[0], 1); }},
      {"transpose", {{2, 3, 4}}, [](const Inputs& x) { return mul(transpose(x[0], 0, 2), 2.0); }},
      {"permute",
       {{2, 3, 4}},
       [](const Inputs& x) {
         return permute(x[0], {2, 0, 1});
       }},
      {"slice", {{2, 6}}, [](const Inputs& x) { return slice(x[0], 1, 1, 6, 2); }},
      {"narrow", {{2, 6}}, [](const Inputs& x) { return narrow(x[0], 1, 2, 3); }},
      {"select", {{2, 3, 4}}, [](const Inputs& x) { return select(x[0], 1, 2); }},
      {"expand",
       {{3, 1}},
       [](const Inputs& x) {
         return expand(x[0], {2, 3, 4});
       }},
      {"squeeze", {{2, 1, 3}}, [](const Inputs& x) { return squeeze(x[0], 1); }},
      {"unsqueeze", {m23}, [](const Inputs& x) { return unsqueeze(x[0], 0); }},
      {"contiguous", {m23}, [](const Inputs& x) { return contiguous(transpose(x[0], 0, 1)); }},
      {"clone", {m23}, [](const Inputs& x) { return clone(x[0]); }},
      {"to(dtype)",
       {m23},
       [](const Inputs& x) { return to(to(x[0], DType::kF32), DType::kF64); },
       Domain::kAny,
       coarse()},
      {"to(device)", {m23}, [](const Inputs& x) { return mul(to(x[0], Device::cpu()), 3.0); }},
      {"cat",
       {{2, 3}, {2, 1}, {2, 2}},
       [](const Inputs& x) {
         return cat({x[0], mul(x[1], 2.0), x[2]}, 1);
       }},
      {"stack",
       {m23, m23},
       [](const Inputs& x) {
         return stack({x[0], exp(x[1])}, 1);
       }},
      {"split",
       {{2, 5}},
       [](const Inputs& x) {
         std::vector<Tensor> p = split(x[0], std::vector<int64_t>{2, 3}, 1);
         return cat({exp(p[1]), mul(p[0], 3.0)}, 1);  // pieces used in another order
       }},
      {"split(size)",
       {{5, 2}},
       [](const Inputs& x) {
         std::vector<Tensor> p = split(x[0], int64_t(2), 0);  // 2, 2, 1
         return cat({p[2], mul(p[0], p[1])}, 0);
       }},
      {"chunk",
       {{2, 6}},
       [](const Inputs& x) {
         std::vector<Tensor> p = chunk(x[0], 3, 1);
         return add(mul(p[0], p[2]), p[0]);  // p[1] gets no gradient: zeros
       }},
      // --- indexing
      {"index_select",
       {{4, 3}},
       [](const Inputs& x) {
         return index_select(x[0], 0, i64({2, 0, 2}, {3}));
       }},
      {"gather",
       {{3, 4}},
       [](const Inputs& x) {
         return gather(x[0], 1, i64({0, 3, 1, 1, 2, 0}, {3, 2}));
       }},
      // --- neural-network ops
      {"softmax", {{2, 5}}, [](const Inputs& x) { return softmax(x[0]); }},
      {"softmax(dim 0)", {{3, 4}}, [](const Inputs& x) { return softmax(x[0], 0); }},
      {"log_softmax", {{2, 5}}, [](const Inputs& x) { return log_softmax(x[0]); }},
      {"layer_norm",
       {{2, 3, 5}, {5}, {5}},
       [](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); }},
      {"layer_norm(no affine)", {{3, 4}}, [](const Inputs& x) { return layer_norm(x[0], {}, {}); }},
      {"rms_norm", {{2, 3, 5}, {5}}, [](const Inputs& x) { return rms_norm(x[0], x[1]); }},
      {"bias_gelu", {{2, 3, 5}, {5}}, [](const Inputs& x) { return bias_gelu(x[0], x[1]); }},
      {"bias_gelu(erf)", {m23, v3}, [](const Inputs& x) { return bias_gelu(x[0], x[1], false); }},
      {"embedding",
       {{5, 3}},
       [](const Inputs& x) {
         return embedding(x[0], i64({1, 4, 1, 0, 1, 2}, {2, 3}));
       }},
      {"cross_entropy",
       {{2, 3, 5}},
       [](const Inputs& x) {
         return cross_entropy(x[0], i64({4, 0, -100, 2, 2, 1}, {2, 3}));  // one row ignored
       }},
      {"rope",
       {{2, 3, 2, 4}},
       [](const Inputs& x) {
         const ops::RopeTables t = ops::rope_tables(3, 4);
         return rope(x[0], t.cos, t.sin);
       }},
      {"dropout",
       {{4, 5}},
       [](const Inputs& x) {
         Generator gen(3);  // the same mask on every evaluation
         return dropout(x[0], 0.3, true, &gen);
       }},
      {"scaled_dot_product_attention",
       {{1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}},
       [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }},
      {"scaled_dot_product_attention(GQA, strided)",
       {{2, 3, 4, 2}, {2, 3, 2, 2}, {2, 3, 2, 2}},
       [](const Inputs& x) {  // heads as views of (B, T, H, D), 4 query heads over 2 kv heads
         return scaled_dot_product_attention(transpose(x[0], 1, 2), transpose(x[1], 1, 2),
                                             transpose(x[2], 1, 2), true);
       }},
      {"scaled_dot_product_attention(not causal, T != S)",
       {{1, 1, 2, 3}, {1, 1, 4, 3}, {1, 1, 4, 3}},
       [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false, 0.7); }},
      {"checkpoint",
       {{2, 3}, {3}},
       [](const Inputs& x) {
         return autograd::checkpoint([&](const Tensor& h) { return tanh(mul(h, x[1])); }, x[0]);
       }},
  };
}

Inputs make_inputs(const OpCase& c, uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  for (const Shape& s : c.shapes) {
    Tensor t = c.domain == Domain::kPositive ? ops::uniform(s, 0.5, 2.0, {DType::kF64}, &gen)
                                             : ops::uniform(s, -1.0, 1.0, {DType::kF64}, &gen);
    t.requires_grad_();
    in.push_back(t);
  }
  return in;
}

std::string base_name(const std::string& row) { return row.substr(0, row.find('(')); }

}  // namespace

TEST_CASE("every differentiable op's backward matches finite differences (f64)", "[gradcheck]") {
  uint64_t seed = 100;
  for (const OpCase& c : op_table()) {
    SECTION(c.name) {
      const Inputs inputs = make_inputs(c, seed);
      const autograd::GradcheckResult r = autograd::gradcheck(c.fn, inputs, c.options);
      INFO(c.name << ": " << r.message << " (max abs error " << r.max_abs_error << ")");
      CHECK(r.ok);
    }
    ++seed;
  }
}

TEST_CASE("gradcheck itself catches a wrong backward", "[gradcheck]") {
  struct WrongSquare : autograd::Function<WrongSquare> {
    static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x) {
      ctx.save_for_backward({x});
      return ops::square(x);
    }
    static autograd::TensorList backward(autograd::FunctionCtx& ctx,
                                         const autograd::TensorList& g) {
      return {ops::mul(g[0], ctx.saved_tensors()[0])};  // x, where 2x is right
    }
  };
  Tensor x = ops::uniform({4}, 0.5, 1.0, {DType::kF64});
  x.requires_grad_();
  const auto r =
      autograd::gradcheck([](const Inputs& in) { return WrongSquare::apply(in[0]); }, {x});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("analytic"));
}

TEST_CASE("the table lists every op declared in tensor_ops.h and nn_functional.h", "[gradcheck]") {
  const char* root = std::getenv("SPMD_SOURCE_DIR");
  REQUIRE(root != nullptr);
  std::set<std::string> rows;
  for (const OpCase& c : op_table()) rows.insert(base_name(c.name));
  const std::regex decl(R"(^(?:Tensor|std::vector<Tensor>) (operator\S+?|\w+)\()");
  int declared = 0;
  for (const char* header : {"autograd/tensor_ops.h", "autograd/nn_functional.h"}) {
    std::ifstream in(std::string(root) + "/" + header);
    REQUIRE(in.good());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, decl)) continue;
      ++declared;
      INFO(header << " declares " << m[1] << " with no row in the gradcheck table");
      CHECK(rows.count(m[1]) == 1);
    }
  }
  CHECK(declared > 60);
}

TEST_CASE("the table runs under the CPU capability SPMD_CPU_CAPABILITY names", "[gradcheck]") {
  // ctest runs this binary once per capability (tests/autograd/CMakeLists.txt).
  const char* forced = std::getenv("SPMD_CPU_CAPABILITY");
  const char* running = cpu::capability_name(cpu::cpu_capability());
  INFO("the kernels run as " << running);
  if (forced != nullptr && *forced != '\0') CHECK(strcasecmp(forced, running) == 0);
}
