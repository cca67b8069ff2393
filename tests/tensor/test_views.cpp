// Views share storage and address the right elements; factories fill what
// they say; bad shapes, dims and devices throw errors that name the op.
#include "reference.h"
#include "tensor/cpu/allocator.h"

using namespace spmd;
using namespace spmd::test;

namespace {
std::vector<float> values(const Tensor& t) { return ops::to_vector<float>(t); }
Tensor iota(const Shape& shape) {
  return ops::reshape(ops::arange(0, double(shape.numel()), 1, {DType::kF32}), shape);
}
}  // namespace

TEST_CASE("factories fill what they say", "[factory]") {
  CHECK(values(ops::zeros({2, 2})) == std::vector<float>(4, 0));
  CHECK(values(ops::full({3}, 2.5)) == std::vector<float>(3, 2.5));
  CHECK(ops::ones({2}, {DType::kI32}).dtype() == DType::kI32);
  CHECK(ops::to_vector<int64_t>(ops::arange(int64_t(4))) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(values(ops::arange(1, 2, 0.25, {DType::kF32})) == std::vector<float>{1, 1.25, 1.5, 1.75});
  CHECK(ops::arange(5, 1, 1).numel() == 0);
  CHECK(values(ops::arange(3, 0, -1, {DType::kF32})) == std::vector<float>{3, 2, 1});
  CHECK(ops::scalar_tensor(4).ndim() == 0);
  CHECK(ops::scalar_tensor(4).item<float>() == 4);
  CHECK(ops::zeros_like(ops::ones({2, 3}, {DType::kF64})).dtype() == DType::kF64);
  CHECK(ops::empty({0, 5}).numel() == 0);
  CHECK(reinterpret_cast<uintptr_t>(ops::empty({3}).raw_data()) % 64 == 0);  // aligned
  CHECK_THROWS_WITH(ops::empty({2, -1}), Catch::Contains("negative size"));
  CHECK_THROWS_WITH(ops::arange(0, 1, 0), Catch::Contains("non-zero step"));
  CHECK_THROWS_WITH(ops::from_vector<float>({1, 2, 3}, {2, 2}),
                    Catch::Contains("3 values for shape [2, 2]"));
  CHECK_THROWS_WITH(ops::zeros({2}).item<float>(), Catch::Contains("one-element"));
}

TEST_CASE("views share storage and address the right elements", "[views]") {
  const Tensor x = iota({2, 3, 4});
  const Tensor t = ops::transpose(x, 0, 2);  // (4, 3, 2)
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.storage() == x.storage());
  CHECK(!t.is_contiguous());
  CHECK(values(ops::contiguous(t))[1] == 12);  // t[0][0][1] = x[1][0][0]
  const Tensor p = ops::permute(x, {1, 2, 0});
  CHECK(values(ops::contiguous(p))[1] == 12);
  CHECK(values(ops::slice(x, 2, 1, 4, 2)) ==
        std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  CHECK(values(ops::slice(x, 1, -1, 100)) == std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(ops::slice(x, 1, 2, 1).size(1) == 0);
  CHECK(values(ops::narrow(x, 0, 1, 1)).front() == 12);
  CHECK(values(ops::select(x, 1, -1)) == std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(ops::squeeze(ops::zeros({1, 3, 1})).shape() == Shape{3});
  CHECK(ops::squeeze(ops::zeros({1, 3, 1}), 1).shape() == Shape{1, 3, 1});
  CHECK(ops::unsqueeze(ops::zeros({3}), -1).shape() == Shape{3, 1});
  CHECK(ops::unsqueeze(ops::zeros({3}), 0).shape() == Shape{1, 3});
  CHECK(ops::flatten(x, 1).shape() == Shape{2, 12});
  const Tensor e = ops::expand(ops::from_vector<float>({1, 2}, {2, 1}), {3, 2, 4});
  CHECK(e.stride(0) == 0);
  CHECK(e.stride(2) == 0);
  CHECK(values(ops::contiguous(e))[5] == 2);
  // Writing through a view writes the base.
  Tensor col = ops::select(iota({2, 2}), 1, 0);
  Tensor base = col;  // keep a handle
  ops::fill_(col, -1);
  CHECK(col.storage()->version() > 0);
}

TEST_CASE("view and reshape follow PyTorch's stride rules", "[views]") {
  const Tensor x = iota({4, 6});
  CHECK(ops::view(x, {2, 2, -1}).shape() == Shape{2, 2, 6});
  CHECK(ops::view(x, {3, 8}).storage() == x.storage());
  const Tensor t = ops::transpose(x, 0, 1);                 // (6, 4), not contiguous
  CHECK(ops::view(t, {3, 2, 4}).storage() == x.storage());  // splitting a dim is a view
  CHECK_THROWS_WITH(ops::view(t, {24}), Catch::Contains("cannot be viewed as [24] without a copy"));
  const Tensor r = ops::reshape(t, {24});  // reshape copies instead
  CHECK(r.storage() != x.storage());
  CHECK(values(r)[1] == 6);
  const Tensor s = ops::slice(x, 1, 0, 6, 2);  // (4, 3) strided
  CHECK(ops::view(ops::unsqueeze(s, 0), {4, 3}).storage() == x.storage());
  CHECK(ops::view(ops::zeros({}), {1, 1}).shape() == Shape{1, 1});
  CHECK(ops::view(ops::zeros({0, 4}), {4, 0, 2}).numel() == 0);
  CHECK_THROWS_WITH(ops::view(x, {5, -1}), Catch::Contains("invalid for 24 elements"));
  CHECK_THROWS_WITH(ops::view(x, {-1, -1}), Catch::Contains("only one dim may be -1"));
}

TEST_CASE("views reject bad dims with messages naming the op", "[views][errors]") {
  const Tensor x = ops::zeros({2, 3});
  CHECK_THROWS_WITH(ops::transpose(x, 0, 2), Catch::Contains("transpose: dim 2 is out of range"));
  CHECK_THROWS_WITH(ops::permute(x, {0, 0}), Catch::Contains("permute: dim 0 appears twice"));
  CHECK_THROWS_WITH(ops::permute(x, {0}), Catch::Contains("permute: 1 dims given"));
  CHECK_THROWS_WITH(ops::narrow(x, 1, 2, 2), Catch::Contains("narrow: [2, 4) is out of range"));
  CHECK_THROWS_WITH(ops::select(x, 0, 2), Catch::Contains("select: index 2 is out of range"));
  CHECK_THROWS_WITH(ops::expand(x, {3, 3}),
                    Catch::Contains("expand: shape [2, 3] cannot expand to [3, 3]"));
  CHECK_THROWS_WITH(ops::slice(x, 0, 0, 2, 0), Catch::Contains("step must be positive"));
  CHECK_THROWS_WITH(ops::add(x, ops::zeros({4})),
                    Catch::Contains("add: shapes [2, 3] and [4] do not broadcast"));
  CHECK_THROWS_WITH(ops::where(x, x, x), Catch::Contains("where: the condition must be bool"));
  CHECK_THROWS_WITH(ops::to(x, Device::cuda(0)).item<float>(), Catch::Contains("cuda"));
}

TEST_CASE("copy_ broadcasts, converts and bumps the version", "[copy]") {
  Tensor dst = ops::zeros({2, 3}, {DType::kF64});
  ops::copy_(dst, ops::from_vector<int32_t>({1, 2, 3}, {3}));
  CHECK(ops::to_vector<double>(dst) == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(dst.storage()->version() == 1);
  const Tensor c = ops::clone(ops::transpose(dst, 0, 1));
  CHECK(c.is_contiguous());
  CHECK(ops::to_vector<double>(c) == std::vector<double>{1, 1, 2, 2, 3, 3});
  CHECK(ops::to(dst, DType::kF64).is_same(dst));
  CHECK(ops::to(dst, Device::cpu()).is_same(dst));
  CHECK_THROWS_WITH(ops::copy_(dst, ops::zeros({4})), Catch::Contains("expand"));
}

TEST_CASE("large elementwise ops split across threads give the serial answer", "[ops][threads]") {
  std::mt19937 rng(20);
  const Tensor a = random_tensor(rng, {300, 1001}, DType::kF32, Layout::kTransposed);
  const Tensor b = random_tensor(rng, {1001}, DType::kF32, Layout::kContiguous);
  const Ref ra(a), rb(b);
  Ref want({300, 1001});
  for (int64_t i = 0; i < want.numel(); ++i)
    want.v[size_t(i)] = std::tanh(ra.v[size_t(i)] * rb.v[size_t(i % 1001)]);
  check_close(ops::tanh(ops::mul(a, b)), want, 1e-5, 1e-6, "tanh(a * b)");
  const Tensor big = ops::full({1 << 20}, 1.0, {DType::kBF16});
  CHECK(ops::sum(big).item<double>() == double(1 << 20));  // an f32 accumulator for bf16
}

TEST_CASE("large host blocks are cached and reused by size class", "[allocator]") {
  const cpu::HostMemoryStats before = cpu::host_memory_stats();
  void* first = nullptr;
  {
    const Tensor t = ops::empty({3 << 20});  // 12 MiB
    first = t.raw_data();
    CHECK(cpu::host_memory_stats().allocated >= before.allocated + (size_t(12) << 20));
  }
  CHECK(cpu::host_memory_stats().cached >= size_t(12) << 20);
  const Tensor again = ops::empty({(3 << 20) - 5});  // the same size class
  CHECK(again.raw_data() == first);
  cpu::empty_host_cache();
  CHECK(cpu::host_memory_stats().cached == 0);
}

TEST_CASE("host blocks from 128 KiB up are cached, smaller ones go back to malloc", "[allocator]") {
  // From 128 KiB (glibc's mmap threshold) the cache keeps them, so glibc's
  // heap never holds a training step's mid-sized activations (allocator.h).
  cpu::empty_host_cache();
  { const Tensor t = ops::empty({128 << 8}); }  // 128 KiB of f32
  CHECK(cpu::host_memory_stats().cached == size_t(128) << 10);
  { const Tensor t = ops::empty({(128 << 8) - 16}); }  // 64 bytes short: malloc's
  CHECK(cpu::host_memory_stats().cached == size_t(128) << 10);
  cpu::empty_host_cache();
}
