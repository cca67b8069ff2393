// Helpers of the [gpu] tests: skipping without a GPU, making tensors on any
// device through the Backend interface alone (so these tests depend on the
// backends they test and nothing above them), reading any tensor back as
// doubles, poisoning outputs, and comparing with a tolerance per dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cuda_api.h"
#include "tests/skip.h"

// Every [gpu] test starts with this: without a GPU (or in a build without
// CUDA) it skips the case (tests/skip.h: ctest then reports it as skipped).
#define SPMD_REQUIRE_GPU()                                                         \
  do {                                                                             \
    if (!::spmd::cuda::is_available())                                             \
      SPMD_SKIP_WITHOUT_GPU("no CUDA GPU (or spmd built without CUDA): skipping"); \
  } while (0)

namespace spmd::test {

const Device kCpu = Device::cpu();
const Device kGpu = Device::cuda(0);

// A contiguous, uninitialized tensor.
Tensor empty(Device device, const Shape& shape, DType dtype);
// A contiguous tensor filled with NaN (floating dtypes) or -77 (others), set
// by a host-to-device copy, not by the backend's fill: an element an op
// fails to write shows up as NaN or -77.
Tensor poisoned(Device device, const Shape& shape, DType dtype);
// A tensor holding `values` (row-major) converted to dtype.
Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype,
                    Device device);
// The elements of any tensor on any device, row-major, as doubles.
std::vector<double> to_doubles(const Tensor& t);
// A view of t's storage with other sizes, strides and offset (in elements).
Tensor view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset = 0);

// n values uniform in [lo, hi) from a fixed-seed std::mt19937_64.
std::vector<double> uniform_values(int64_t n, double lo, double hi, uint64_t seed);
// v rounded to what dtype can hold (through f32 for the half types).
double round_to(double v, DType dtype);

// The relative tolerance of a computation in dtype: f32 1e-5, bf16 1e-2,
// f16 2e-3, f64 1e-12, integers and bool exact.
double tolerance(DType dtype);

// Compares got with ref elementwise: |got - ref| <= rtol (|ref| + rms(ref)),
// NaN only where ref is NaN. Returns "" when they match, else a report of
// the worst elements.
std::string differences(const std::vector<double>& got, const std::vector<double>& ref,
                        double rtol);

// ||got - ref||_2 / ||ref||_2: the error of a whole result (the measure for
// products, whose elementwise error grows with their length).
double relative_error(const std::vector<double>& got, const std::vector<double>& ref);

}  // namespace spmd::test
