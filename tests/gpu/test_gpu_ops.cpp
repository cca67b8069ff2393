// [gpu] The CUDA backend against the CPU backend: the op table (op_table.h),
// random numbers (bit-identical uniform draws), TF32 and mixed-precision
// GEMM, index checks, and host<->device copies of every shape of layout.
#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>

#include "gpu_test_util.h"
#include "op_table.h"

namespace spmd::test {
namespace {

// The values of one input of a case, rounded to what `dtype` holds.
std::vector<double> draw(const InputSpec& spec, DType dtype, uint64_t seed) {
  const int64_t n = spec.shape.numel();
  std::vector<double> v;
  switch (spec.values) {
    case Values::kFloat:
      v = uniform_values(n, -2, 2, seed);
      break;
    case Values::kPositive:
      v = uniform_values(n, 0.5, 2, seed);
      break;
    case Values::kUnit:
      v = uniform_values(n, 0.5, 1.5, seed);
      break;
    case Values::kInt:
      v = uniform_values(n, -9, 10, seed);
      for (double& x : v) x = std::floor(x);
      return v;
    case Values::kBool:
      v = uniform_values(n, 0, 2, seed);
      for (double& x : v) x = std::floor(x);
      return v;
    case Values::kIndex:
    case Values::kTarget:
      v = uniform_values(n, 0, double(spec.range), seed);
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = spec.values == Values::kTarget && i % 5 == 3 ? -100 : std::floor(v[i]);
      return v;
  }
  for (double& x : v) x = round_to(x, dtype);
  return v;
}

DType input_dtype(const InputSpec& spec, DType run_dtype) {
  switch (spec.values) {
    case Values::kBool:
      return DType::kBool;
    case Values::kIndex:
    case Values::kTarget:
      return DType::kI64;
    default:
      return run_dtype;
  }
}

// Runs a case on `device` in `dtype` and on the CPU in f64 (or in `dtype` when
// it is an integer type), and returns "" or a report of what differs.
std::string run_case(const OpCase& c, size_t case_index, DType dtype, Device device) {
  const DType ref_dtype = is_floating(dtype) ? DType::kF64 : dtype;
  std::vector<Tensor> gpu_in, cpu_in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const InputSpec& spec = c.inputs[i];
    const std::vector<double> v = draw(spec, dtype, 1000 * case_index + i);
    gpu_in.push_back(from_doubles(v, spec.shape, input_dtype(spec, dtype), device));
    cpu_in.push_back(from_doubles(v, spec.shape, input_dtype(spec, ref_dtype), kCpu));
  }
  std::vector<Tensor> got, ref;
  try {
    got = c.run(RunContext{backend_for(device), device, dtype}, gpu_in);
  } catch (const std::exception& e) {
    return std::string("the tested run threw: ") + e.what();
  }
  try {
    ref = c.run(RunContext{backend_for(kCpu), kCpu, ref_dtype}, cpu_in);
  } catch (const std::exception& e) {
    return std::string("the CPU reference threw: ") + e.what();
  }
  std::ostringstream report;
  for (size_t k = 0; k < got.size(); ++k) {
    const double rtol = is_floating(got[k].dtype()) ? tolerance(dtype) * c.tol_scale : 0;
    const std::string m = differences(to_doubles(got[k]), to_doubles(ref[k]), rtol);
    if (!m.empty()) report << "output " << k << ": " << m;
  }
  return report.str();
}

}  // namespace

// The table itself, checked where it can always run: the CPU in f32 (and in
// i64 for the integer cases) against the CPU in f64. A case that fails here
// is wrong, not the GPU.
TEST_CASE("the op table runs on the CPU: f32 against f64", "[cpu]") {
  const std::vector<OpCase> table = op_table();
  int runs = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    for (DType dtype : table[i].dtypes) {
      if (dtype != DType::kF32 && dtype != DType::kI64) continue;
      const std::string report = run_case(table[i], i, dtype, kCpu);
      if (!report.empty()) FAIL_CHECK(table[i].name << " [" << dtype << "]: " << report);
      ++runs;
    }
  }
  CHECK(runs > 50);
}

TEST_CASE("every Backend op on CUDA matches the CPU, forward and backward", "[gpu]") {
  SPMD_REQUIRE_GPU();
  const std::vector<OpCase> table = op_table();
  int runs = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    for (DType dtype : table[i].dtypes) {
      const std::string report = run_case(table[i], i, dtype, kGpu);
      if (!report.empty()) FAIL_CHECK(table[i].name << " [" << dtype << "]: " << report);
      ++runs;
    }
  }
  INFO(runs << " runs of " << table.size() << " cases");
  CHECK(runs > 150);
}

TEST_CASE("random numbers: the same seed gives the CPU's values", "[gpu]") {
  SPMD_REQUIRE_GPU();
  Backend& gpu = backend_for(kGpu);
  Backend& cpu = backend_for(kCpu);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI64}) {
    INFO("uniform " << dtype);
    Tensor g = empty(kGpu, {1001}, dtype), c = empty(kCpu, {1001}, dtype);
    // 3.7 - -2 is inexact in f32, so an unfused CPU or GPU side would differ.
    const double low = is_floating(dtype) ? -2 : 3, high = is_floating(dtype) ? 3.7 : 1000;
    gpu.random_uniform(g, low, high, 1234, 7);
    cpu.random_uniform(c, low, high, 1234, 7);
    CHECK(differences(to_doubles(g), to_doubles(c), 0) == "");  // bit for bit
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    INFO("normal " << dtype);
    Tensor g = empty(kGpu, {1003}, dtype), c = empty(kCpu, {1003}, dtype);
    gpu.random_normal(g, 0.5, 2, 99, 3);
    cpu.random_normal(c, 0.5, 2, 99, 3);
    // logf/sinf/cosf may differ in the last bit between CUDA and the C library.
    CHECK(differences(to_doubles(g), to_doubles(c), dtype == DType::kF32 ? 1e-5 : 1e-2) == "");
  }
}

TEST_CASE("TF32 and bf16-to-f32 matmuls stay within their tolerances", "[gpu]") {
  SPMD_REQUIRE_GPU();
  const Shape sa{192, 256}, sb{256, 96};
  const auto va = uniform_values(sa.numel(), -1, 1, 1), vb = uniform_values(sb.numel(), -1, 1, 2);
  Tensor ra = from_doubles(va, sa, DType::kF64, kCpu), rb = from_doubles(vb, sb, DType::kF64, kCpu);
  Tensor ref = empty(kCpu, {192, 96}, DType::kF64);
  backend_for(kCpu).matmul(ra, rb, ref, 1, 0);

  Tensor a = from_doubles(va, sa, DType::kF32, kGpu), b = from_doubles(vb, sb, DType::kF32, kGpu);
  Tensor out = poisoned(kGpu, {192, 96}, DType::kF32);
  cuda::set_allow_tf32(true);
  backend_for(kGpu).matmul(a, b, out, 1, 0);
  cuda::set_allow_tf32(false);
  // TF32 rounds the operands to 10-bit mantissas: ~3e-4 of the result's norm.
  const double tf32_error = relative_error(to_doubles(out), to_doubles(ref));
  CHECK(tf32_error < 1e-3);  // (cuBLAS may still pick an f32 kernel: ~1e-7)

  // Mixed precision: bf16 operands, f32 accumulation and output. The
  // reference takes the same bf16-rounded operands.
  std::vector<double> ha(va), hb(vb);
  for (double& x : ha) x = round_to(x, DType::kBF16);
  for (double& x : hb) x = round_to(x, DType::kBF16);
  backend_for(kCpu).matmul(from_doubles(ha, sa, DType::kF64, kCpu),
                           from_doubles(hb, sb, DType::kF64, kCpu), ref, 1, 0);
  Tensor out32 = poisoned(kGpu, {192, 96}, DType::kF32);
  backend_for(kGpu).matmul(from_doubles(ha, sa, DType::kBF16, kGpu),
                           from_doubles(hb, sb, DType::kBF16, kGpu), out32, 1, 0);
  CHECK(differences(to_doubles(out32), to_doubles(ref), 1e-5) == "");
}

// Index checks run on the GPU without waiting: the op returns, skips the bad
// index, and the error comes at the next wait for the device, named.
TEST_CASE("an index out of range is skipped on the GPU and thrown at the next wait", "[gpu]") {
  SPMD_REQUIRE_GPU();
  Backend& gpu = backend_for(kGpu);
  Tensor x = from_doubles(uniform_values(40, -1, 1, 3), {10, 4}, DType::kF32, kGpu);
  Tensor out = from_doubles(std::vector<double>(12, 7.0), {3, 4}, DType::kF32, kGpu);
  Tensor bad = from_doubles({1, 10, 2}, {3}, DType::kI64, kGpu);
  gpu.index_select(x, 0, bad, out);  // queues, does not wait
  CHECK_THROWS_WITH(cuda::synchronize(), Catch::Contains("index_select: index 10 at position 1 is "
                                                         "out of range for size 10"));
  CHECK_NOTHROW(cuda::synchronize());  // reported once, then cleared
  const std::vector<double> got = to_doubles(out);
  CHECK(std::vector<double>(got.begin() + 4, got.begin() + 8) == std::vector<double>(4, 7.0));

  // The first bad index of the first failing op is the one reported, at a copy to the host.
  Tensor negative = from_doubles({0, -1, -3}, {3}, DType::kI64, kGpu);
  gpu.index_add(x, 0, negative, out);
  gpu.index_select(x, 0, bad, out);
  CHECK_THROWS_WITH(to_doubles(out), Catch::Contains("index_add: index -1 at position 1"));

  Tensor logits = from_doubles(uniform_values(20, -1, 1, 4), {4, 5}, DType::kF32, kGpu);
  Tensor loss = empty(kGpu, {4}, DType::kF32), lse = empty(kGpu, {4}, DType::kF32);
  gpu.cross_entropy(logits, from_doubles({0, -100, 4, 2}, {4}, DType::kI64, kGpu), -100, loss, lse);
  CHECK_NOTHROW(cuda::synchronize());
  gpu.cross_entropy(logits, from_doubles({0, 5, 4, 2}, {4}, DType::kI64, kGpu), -100, loss, lse);
  CHECK_THROWS_WITH(cuda::current_stream().synchronize(),
                    Catch::Contains("cross_entropy") && Catch::Contains("out of range"));
}

TEST_CASE("host<->device copies: large, strided, converting, and item()", "[gpu]") {
  SPMD_REQUIRE_GPU();
  Backend& gpu = backend_for(kGpu);
  // 5M floats: three chunks of the 8 MiB staging buffers, the last one partial.
  const std::vector<double> big = uniform_values(5'000'001, -1, 1, 5);
  Tensor d = from_doubles(big, {5'000'001}, DType::kF32, kGpu);
  std::vector<double> back = to_doubles(d);
  std::vector<double> expect(big);
  for (double& x : expect) x = round_to(x, DType::kF32);
  CHECK(back == expect);

  // A transposed host tensor into a contiguous device one, and back into a
  // transposed host view; f32 on the host, bf16 on the device.
  const std::vector<double> v = uniform_values(6 * 7, -3, 3, 6);
  Tensor host = from_doubles(v, {6, 7}, DType::kF32, kCpu);
  Tensor dev = poisoned(kGpu, {7, 6}, DType::kBF16);
  gpu.copy(view(host, {7, 6}, {1, 7}), dev);
  Tensor host2 = poisoned(kCpu, {6, 7}, DType::kF32);
  gpu.copy(dev, view(host2, {7, 6}, {1, 7}));
  std::vector<double> expect2(v);
  for (double& x : expect2) x = round_to(x, DType::kBF16);
  CHECK(differences(to_doubles(host2), expect2, 0) == "");

  Tensor one = from_doubles({2.5}, {1}, DType::kF32, kGpu);
  CHECK(one.item_as_double() == 2.5);
}

TEST_CASE("copies between two GPUs", "[gpu]") {
  SPMD_REQUIRE_GPU();
  if (cuda::device_count() < 2) {
    WARN("one GPU: skipping the GPU-to-GPU copy");
    return;
  }
  const std::vector<double> v = uniform_values(1000, -1, 1, 7);
  Tensor a = from_doubles(v, {10, 100}, DType::kF32, Device::cuda(0));
  Tensor b = poisoned(Device::cuda(1), {100, 10}, DType::kF32);
  backend_for(Device::cuda(1)).copy(view(a, {100, 10}, {1, 100}), b);
  Tensor back = poisoned(kCpu, {100, 10}, DType::kF32);
  backend_for(Device::cuda(1)).copy(b, back);
  Tensor expect = poisoned(kCpu, {100, 10}, DType::kF32);
  backend_for(kCpu).copy(view(from_doubles(v, {10, 100}, DType::kF32, kCpu), {100, 10}, {1, 100}),
                         expect);
  CHECK(differences(to_doubles(back), to_doubles(expect), 0) == "");
}

}  // namespace spmd::test
