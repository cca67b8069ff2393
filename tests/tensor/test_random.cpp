// The Philox generator: Random123's known-answer vectors, the exact mapping
// of tensor/random.h from counters to values, and the statistics of the
// uniform and normal draws.
#include <cmath>

#include "reference.h"

using namespace spmd;
using namespace spmd::test;

TEST_CASE("philox4x32-10 matches Random123's known-answer vectors", "[random]") {
  // Random123's known-answer file (its kat_vectors), "philox4x32 10": counter words, key words,
  // result.
  CHECK(philox4x32(0, 0, 0) ==
        std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32(~0ull, ~0ull, ~0ull) ==
        std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  // counter (243f6a88 85a308d3 13198a2e 03707344), key (a4093822 299f31d0)
  CHECK(philox4x32(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull) ==
        std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("rand and randn follow the documented counter mapping exactly", "[random]") {
  Generator gen(1234);
  gen.set_offset(7);
  // A width whose products are inexact, so that a fused and an unfused
  // lo + width u differ for some draws: the mapping is the fused one (the
  // CUDA kernel's too), whatever the compiler does with a * b + c.
  const float lo = -1.0f, width = float(2.3 - -1.0);
  const std::vector<float> u = ops::to_vector<float>(ops::uniform({1000}, -1, 2.3, {}, &gen));
  CHECK(gen.offset() == 7 + 250);  // 1000 / 4 counters used
  int unfused_differs = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    const uint32_t r = philox4x32(1234, 7 + i / 4)[i % 4];
    const float unit = float(r >> 8) * 0x1p-24f;
    CHECK(u[i] == std::fma(width, unit, lo));
    volatile float product = width * unit;  // stored: rounded before the add
    unfused_differs += u[i] != lo + product;
  }
  CHECK(unfused_differs > 0);  // the check above could tell the two apart
  gen.set_offset(0);
  const std::vector<float> z = ops::to_vector<float>(ops::normal({6}, 1, 2, {}, &gen));
  for (size_t i = 0; i < z.size(); ++i) {
    const auto r = philox4x32(1234, i / 4);
    const size_t j = (i % 4) & ~size_t(1);
    const double u1 = (r[j] >> 8) * 0x1p-24 + 0x1p-25, u2 = (r[j + 1] >> 8) * 0x1p-24;
    const double rad = std::sqrt(-2 * std::log(u1)), angle = 2 * M_PI * u2;
    CHECK(z[i] == Approx(1 + 2 * rad * (i % 2 ? std::sin(angle) : std::cos(angle))).epsilon(1e-5));
  }
}

TEST_CASE("a draw does not depend on thread count or on the draws beside it", "[random]") {
  Generator a(99), b(99);
  const Tensor big = ops::rand({100003}, {}, &a);
  const Tensor small = ops::rand({13}, {}, &b);
  CHECK(ops::to_vector<float>(small) ==
        ops::to_vector<float>(ops::narrow(big, 0, 0, 13)));  // the counters decide, not the size
  manual_seed(5);
  const Tensor x = ops::randn({1000});
  const Tensor y = ops::randn({1000});
  manual_seed(5);
  CHECK(ops::to_vector<float>(ops::randn({1000})) == ops::to_vector<float>(x));
  CHECK(ops::to_vector<float>(x) != ops::to_vector<float>(y));  // the offset moved on
}

TEST_CASE("uniform and normal draws have the right statistics", "[random]") {
  Generator gen(7);
  const int64_t n = 1 << 20;
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    const Tensor u = ops::uniform({n}, 2, 5, {dt}, &gen);
    CHECK(ops::amin(u).item<double>() >= 2);
    CHECK(ops::amax(u).item<double>() <= 5);  // < 5 before rounding to bf16
    CHECK(ops::mean(ops::to(u, DType::kF64)).item<double>() == Approx(3.5).margin(0.01));
    const Tensor z = ops::to(ops::normal({n}, -1, 3, {dt}, &gen), DType::kF64);
    CHECK(ops::mean(z).item<double>() == Approx(-1).margin(0.02));
    CHECK(std::sqrt(ops::var(z).item<double>()) == Approx(3).margin(0.02));
  }
  const Tensor k = ops::randint(-3, 4, {n}, {DType::kI64}, &gen);
  CHECK(ops::amin(k).item<int64_t>() == -3);
  CHECK(ops::amax(k).item<int64_t>() == 3);
  const Tensor counts = ops::sum(ops::eq(k, 0.0));
  CHECK(double(counts.item<int64_t>()) == Approx(n / 7.0).epsilon(0.02));
  CHECK_THROWS_WITH(ops::uniform({2}, 0, 1, {DType::kI32}),
                    Catch::Contains("expected a floating dtype"));
  CHECK_THROWS_WITH(ops::randint(3, 3, {2}), Catch::Contains("randint: expected low < high"));
}
