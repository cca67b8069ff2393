// The CPU capabilities (tensor/cpu/capability.h) against each other. (The
// BLAS core: test_blas.cpp.)
//
// Each op runs on the same inputs under every capability this machine has.
// Elementwise ops must give the same bits under avx2 and avx512: every
// element goes through the same vector code, lane for lane, whatever the
// register width (the default capability of a build without x86 flags has no
// FMA, so it is held to the op table's tolerance against f64). Ops that sum (reductions, norms,
// softmax, cross-entropy, attention) may round differently, as their sums run in another order, so
// they are held to a few ulps instead. (The op table checks each capability against naive f64
// loops: tests/tensor/CMakeLists.txt runs it once per capability.)
#include <cstdlib>

#include "reference.h"
#include "tensor/attention.h"
#include "tensor/cpu/capability.h"

using namespace spmd;
using namespace spmd::test;
using cpu::CpuCapability;

namespace {

// Runs later ops under `c` until destroyed, then under the capability before.
class ScopedCapability {
 public:
  explicit ScopedCapability(CpuCapability c) : before_(cpu::cpu_capability()) {
    cpu::set_cpu_capability(c);
  }
  ~ScopedCapability() { cpu::set_cpu_capability(before_); }

 private:
  CpuCapability before_;
};

// f() under each available capability: one list of output tensors per capability.
std::vector<std::vector<Tensor>> under_each(const std::function<std::vector<Tensor>()>& f) {
  std::vector<std::vector<Tensor>> results;
  for (CpuCapability c : cpu::available_capabilities()) {
    const ScopedCapability scope(c);
    results.push_back(f());
  }
  return results;
}

// Every output of each capability against the best one's: bit for bit when
// rtol == 0, else within rtol of the output's largest magnitude (a sum in
// another order moves an element by a few ulps of the terms summed, not of
// the element). A pair with the default capability is held to
// default_rtol: without x86 flags there is no FMA (a multiply-add rounds
// twice) and Eigen's SSE code is other code.
void check_agree(const std::vector<std::vector<Tensor>>& results, double rtol,
                 const std::string& what, double default_rtol) {
  const auto caps = cpu::available_capabilities();
  const size_t best = results.size() - 1;
  for (size_t c = 0; c < best; ++c) {
    const bool with_default = caps[c] == CpuCapability::kDefault;
    const double tol = with_default ? std::max(rtol, default_rtol) : rtol;
    for (size_t k = 0; k < results[best].size(); ++k) {
      INFO(what << ", output " << k << ": " << cpu::capability_name(caps[c]) << " against "
                << cpu::capability_name(caps[best]));
      const std::vector<double> a = ops::to_vector<double>(results[best][k]);
      const std::vector<double> b = ops::to_vector<double>(results[c][k]);
      REQUIRE(a.size() == b.size());
      double scale = 0;
      for (double v : a) scale = std::max(scale, std::abs(v));
      for (size_t i = 0; i < a.size(); ++i) {
        const bool same = a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])) ||
                          std::abs(a[i] - b[i]) <= tol * scale;
        if (!same) {
          FAIL_CHECK("element " << i << ": " << b[i] << " against " << a[i]);
          break;
        }
      }
    }
  }
}

// Inputs that end mid-vector and start off a vector boundary (the view
// from element 1 of a longer tensor), and strided ones (gathered blocks).
std::vector<Tensor> elementwise_inputs(std::mt19937& rng, DType dt, double lo, double hi) {
  std::vector<Tensor> xs;
  for (int64_t n : {1, 7, 15, 16, 17, 33, 1000, 4099}) {
    xs.push_back(random_tensor(rng, {n}, dt, Layout::kContiguous, lo, hi));
    xs.push_back(
        ops::slice(random_tensor(rng, {n + 1}, dt, Layout::kContiguous, lo, hi), 0, 1, n + 1));
  }
  xs.push_back(random_tensor(rng, {37, 21}, dt, Layout::kTransposed, lo, hi));
  xs.push_back(random_tensor(rng, {9, 40}, dt, Layout::kStrided, lo, hi));
  return xs;
}

const DType kDtypes[] = {DType::kF32, DType::kF64, DType::kBF16};

}  // namespace

TEST_CASE("the best capability this CPU runs is available, and only what it runs", "[capability]") {
  const auto caps = cpu::available_capabilities();
  REQUIRE(!caps.empty());
  const cpu::CpuId& id = cpu::cpu_id();
  for (CpuCapability c : {CpuCapability::kDefault, CpuCapability::kAvx2, CpuCapability::kAvx512}) {
    const bool runs = c == CpuCapability::kDefault || (c == CpuCapability::kAvx2 && id.x86_64_v3) ||
                      (c == CpuCapability::kAvx512 && id.x86_64_v4);
    const bool compiled = cpu::capability_backend(c) != nullptr;
    INFO(cpu::capability_name(c) << ": compiled " << compiled << ", runs here " << runs);
    CHECK((std::find(caps.begin(), caps.end(), c) != caps.end()) == (compiled && runs));
  }
  const char* forced = std::getenv("SPMD_CPU_CAPABILITY");
  if (forced == nullptr || *forced == '\0') CHECK(cpu::cpu_capability() == caps.back());
  if (id.x86_64_v4 && cpu::capability_backend(CpuCapability::kAvx512))
    CHECK(caps.back() == CpuCapability::kAvx512);
  CHECK(cpu::describe_cpu().find(id.model) != std::string::npos);
}

TEST_CASE("set_cpu_capability refuses what this machine cannot run", "[capability]") {
  const auto caps = cpu::available_capabilities();
  for (CpuCapability c : {CpuCapability::kDefault, CpuCapability::kAvx2, CpuCapability::kAvx512}) {
    if (std::find(caps.begin(), caps.end(), c) != caps.end()) continue;
    CHECK_THROWS_WITH(cpu::set_cpu_capability(c),
                      Catch::Contains("is not available") && Catch::Contains("available: "));
  }
}

TEST_CASE("elementwise ops give the same bits under every capability", "[capability][ops]") {
  std::mt19937 rng(7);
  const std::vector<std::pair<UnaryOp, std::pair<double, double>>> unary = {
      {UnaryOp::kExp, {-10, 10}},    {UnaryOp::kLog, {0.01, 50}},  {UnaryOp::kSqrt, {0, 9}},
      {UnaryOp::kRsqrt, {0.01, 9}},  {UnaryOp::kTanh, {-6, 6}},    {UnaryOp::kSigmoid, {-9, 9}},
      {UnaryOp::kGeluTanh, {-6, 6}}, {UnaryOp::kGeluErf, {-6, 6}}, {UnaryOp::kSilu, {-9, 9}},
      {UnaryOp::kSin, {-20, 20}},    {UnaryOp::kCos, {-20, 20}},   {UnaryOp::kReciprocal, {0.1, 9}},
      {UnaryOp::kRelu, {-3, 3}},     {UnaryOp::kAbs, {-3, 3}},     {UnaryOp::kSquare, {-3, 3}},
      {UnaryOp::kNeg, {-3, 3}},      {UnaryOp::kSign, {-3, 3}}};
  for (const auto& [op, domain] : unary)
    for (DType dt : kDtypes)
      for (const Tensor& x : elementwise_inputs(rng, dt, domain.first, domain.second))
        check_agree(under_each([&] { return std::vector<Tensor>{ops::unary(op, x)}; }), 0,
                    str_cat(op_name(op), " ", dtype_name(dt), " ", x.shape()), rtol_for(dt) * 4);
  const BinaryOp binary[] = {BinaryOp::kAdd,
                             BinaryOp::kMul,
                             BinaryOp::kDiv,
                             BinaryOp::kPow,
                             BinaryOp::kMaximum,
                             BinaryOp::kGeluTanhBackward,
                             BinaryOp::kGeluErfBackward,
                             BinaryOp::kSiluBackward,
                             BinaryOp::kTanhBackward,
                             BinaryOp::kSigmoidBackward};
  for (BinaryOp op : binary)
    for (DType dt : kDtypes)
      for (const Tensor& a : elementwise_inputs(rng, dt, 0.5, 3)) {
        const Tensor b = random_tensor(rng, a.shape(), dt, Layout::kContiguous, -3, 3);
        check_agree(under_each([&] {
                      return std::vector<Tensor>{ops::binary(op, a, b), ops::binary(op, b, a),
                                                 ops::mul(a, 0.37), ops::add(a, b)};
                    }),
                    0, str_cat(op_name(op), " ", dtype_name(dt), " ", a.shape()), rtol_for(dt) * 4);
      }
}

TEST_CASE("ops that sum agree across capabilities up to the order of their sums",
          "[capability][nn]") {
  std::mt19937 rng(8);
  for (DType dt : {DType::kF32, DType::kF64}) {
    const double rtol = dt == DType::kF32 ? 1e-5 : 1e-13;
    const Tensor x = random_tensor(rng, {6, 37, 129}, dt, Layout::kContiguous, -4, 4);
    const Tensor w = random_tensor(rng, {129}, dt, Layout::kContiguous, 0.5, 1.5);
    const Tensor b = random_tensor(rng, {129}, dt, Layout::kContiguous, -1, 1);
    const Tensor dy = random_tensor(rng, {6, 37, 129}, dt, Layout::kContiguous, -1, 1);
    check_agree(under_each([&] {
                  return std::vector<Tensor>{ops::sum(x, {2}), ops::sum(x, {0, 1}),
                                             ops::mean(x),     ops::amax(x, {2}),
                                             ops::softmax(x),  ops::log_softmax(x, 1)};
                }),
                rtol, str_cat("reductions and softmax ", dtype_name(dt)), 0);
    check_agree(under_each([&] {
                  const ops::NormResult ln = ops::layer_norm(x, w, b);
                  const ops::NormGrads g = ops::layer_norm_backward(dy, x, w, ln, true);
                  const ops::NormResult rms = ops::rms_norm(x, w);
                  const ops::NormGrads gr = ops::rms_norm_backward(dy, x, w, rms);
                  return std::vector<Tensor>{ln.y, g.dx, g.dweight, g.dbias, rms.y, gr.dx};
                }),
                rtol * 10, str_cat("norms ", dtype_name(dt)), 0);
    const Tensor logits = ops::reshape(x, {6 * 37, 129});
    const Tensor targets = ops::randint(0, 129, {6 * 37});
    check_agree(under_each([&] {
                  const ops::CrossEntropyResult ce = ops::cross_entropy(logits, targets);
                  return std::vector<Tensor>{ce.loss, ce.lse,
                                             ops::cross_entropy_backward(logits, targets, ce, 1.0)};
                }),
                rtol, str_cat("cross_entropy ", dtype_name(dt)), 0);
    const Tensor q = random_tensor(rng, {2, 4, 45, 16}, dt, Layout::kContiguous, -1, 1);
    const Tensor k = random_tensor(rng, {2, 2, 45, 16}, dt, Layout::kContiguous, -1, 1);
    const Tensor v = random_tensor(rng, {2, 2, 45, 16}, dt, Layout::kContiguous, -1, 1);
    const Tensor dout = random_tensor(rng, {2, 4, 45, 16}, dt, Layout::kContiguous, -1, 1);
    check_agree(under_each([&] {
                  const ops::AttentionResult r = ops::attention(q, k, v, true);
                  const ops::AttentionGrads g = ops::attention_backward(dout, q, k, v, r, true);
                  return std::vector<Tensor>{r.out, r.lse, g.dq, g.dk, g.dv};
                }),
                rtol * 10, str_cat("attention ", dtype_name(dt)), 0);
  }
}
