// The op table of the [gpu] tests (after ggml's test-backend-ops): every
// method of the Backend interface, forward and backward, as cases that run
// the same way on any backend. The runner (test_gpu_ops.cpp) runs each case
// on the GPU in each of its dtypes and on the CPU in f64 on the same input
// values (rounded to the GPU's dtype first), then compares every output with
// the dtype's tolerance. Outputs start poisoned, so unwritten elements fail.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gpu_test_util.h"

namespace spmd::test {

// How an input's values are drawn.
enum class Values {
  kFloat,     // uniform in [-2, 2)
  kPositive,  // uniform in [0.5, 2)  (log, sqrt, divisors, second moments)
  kUnit,      // uniform in [0.5, 1.5) (long sums and products stay well scaled)
  kInt,       // integers in [-9, 9], stored in the run's dtype
  kBool,      // 0 or 1, bool
  kIndex,     // i64 in [0, range)
  kTarget,    // i64 in [0, range), every fifth one -100 (ignore_index)
};

struct InputSpec {
  Shape shape;
  Values values = Values::kFloat;
  int64_t range = 0;  // for kIndex and kTarget
};

// Where a case runs: the backend, its device, and the dtype of this run's
// floating tensors (f64 on the CPU reference, the tested dtype on the GPU).
struct RunContext {
  Backend& be;
  Device device;
  DType dtype;

  // A poisoned output of the run's dtype (or of `dt`).
  Tensor out(const Shape& shape) const { return poisoned(device, shape, dtype); }
  Tensor out(const Shape& shape, DType dt) const { return poisoned(device, shape, dt); }
  // The dtype of saved statistics (mean, rstd, lse): f64 for f64, else f32.
  DType stat_dtype() const { return dtype == DType::kF64 ? DType::kF64 : DType::kF32; }
  // A fresh copy of an input (for ops that write in place).
  Tensor clone(const Tensor& t) const;
};

struct OpCase {
  std::string name;
  std::vector<InputSpec> inputs;
  std::vector<DType> dtypes;  // the dtypes it runs in on the GPU
  std::function<std::vector<Tensor>(const RunContext&, const std::vector<Tensor>&)> run;
  double tol_scale = 1;  // times tolerance(dtype)
};

std::vector<OpCase> op_table();

}  // namespace spmd::test
