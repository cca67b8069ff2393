// Random inputs in every layout, and the element-by-element comparison.
#include "reference.h"

namespace spmd::test {

Tensor random_tensor(std::mt19937& rng, const Shape& shape, DType dtype, Layout layout, double lo,
                     double hi) {
  Shape mem = shape;  // the shape of the memory the view is cut from
  if (layout == Layout::kTransposed && shape.ndim() >= 2) {
    std::swap(mem[mem.ndim() - 1], mem[mem.ndim() - 2]);
  } else if (layout == Layout::kStrided && shape.ndim() >= 1) {
    mem[0] = 2 * shape[0];
  }
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(size_t(mem.numel()));
  for (double& v : values) v = is_floating(dtype) ? dist(rng) : std::floor(dist(rng));
  if (dtype == DType::kBool)
    for (double& v : values) v = v > (lo + hi) / 2;
  Tensor t = ops::to(ops::from_vector(values, mem), dtype);
  if (layout == Layout::kTransposed && shape.ndim() >= 2) return ops::transpose(t, -1, -2);
  if (layout == Layout::kStrided && shape.ndim() >= 1) return ops::slice(t, 0, 0, mem[0], 2);
  return t;
}

void check_close(const Tensor& got, const Ref& want, double rtol, double atol,
                 const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape);
  const std::vector<double> g = ops::to_vector<double>(got);
  for (size_t i = 0; i < g.size(); ++i) {
    const double w = want.v[i];
    const bool ok = (std::isnan(w) && std::isnan(g[i])) || g[i] == w ||
                    std::abs(g[i] - w) <= atol + rtol * std::abs(w);
    if (!ok) {
      FAIL_CHECK("element " << i << " of " << got.shape() << ": got " << g[i] << ", want " << w);
      return;
    }
  }
  SUCCEED();
}

}  // namespace spmd::test
