// Helpers of the [gpu] tests (gpu_test_util.h).
#include "gpu_test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

namespace spmd::test {

Tensor empty(Device device, const Shape& shape, DType dtype) {
  const size_t nbytes = size_t(shape.numel()) * element_size(dtype);
  Backend& be = backend_for(device);
  return Tensor(std::make_shared<Storage>(be.allocate(nbytes, device), nbytes, device), shape,
                contiguous_strides(shape), 0, dtype);
}

Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype,
                    Device device) {
  SPMD_CHECK(int64_t(values.size()) == shape.numel(), "from_doubles: ", values.size(),
             " values for shape ", shape);
  Tensor host = empty(kCpu, shape, dtype);
  visit_dtype(dtype, [&]<class T>() {
    T* p = host.data<T>();
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
        p[i] = T(float(values[i]));
      } else {
        p[i] = static_cast<T>(values[i]);
      }
    }
  });
  if (device.is_cpu()) return host;
  Tensor t = empty(device, shape, dtype);
  backend_for(device).copy(host, t);
  return t;
}

Tensor poisoned(Device device, const Shape& shape, DType dtype) {
  const double poison = is_floating(dtype) ? std::numeric_limits<double>::quiet_NaN() : -77;
  if (dtype == DType::kBool || dtype == DType::kU8) {  // 0xff bytes (no bool is 0xff)
    Tensor bytes =
        from_doubles(std::vector<double>(size_t(shape.numel()), 255), shape, DType::kU8, device);
    return Tensor(bytes.storage(), shape, contiguous_strides(shape), 0, dtype);
  }
  return from_doubles(std::vector<double>(size_t(shape.numel()), poison), shape, dtype, device);
}

std::vector<double> to_doubles(const Tensor& t) {
  Tensor host = empty(kCpu, t.shape(), t.dtype());
  backend_for(t.device()).copy(t, host);
  std::vector<double> out(size_t(t.numel()));
  if (t.dtype() == DType::kBool) {  // read the bytes: anything but 0 or 1 was never written
    const auto* p = static_cast<const uint8_t*>(host.raw_data());
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = p[i] <= 1 ? p[i] : std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  visit_dtype(t.dtype(), [&]<class T>() {
    const T* p = host.data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = double(p[i]);
  });
  return out;
}

Tensor view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  return Tensor(t.storage(), shape, strides, t.offset() + offset, t.dtype());
}

std::vector<double> uniform_values(int64_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(size_t(std::max<int64_t>(n, 0)));
  for (double& x : v) x = dist(rng);
  return v;
}

double round_to(double v, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return double(float(v));
    case DType::kBF16:
      return double(float(BFloat16(float(v))));
    case DType::kF16:
      return double(float(Half(float(v))));
    default:
      return v;
  }
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 1e-5;
    case DType::kF64:
      return 1e-12;
    case DType::kBF16:
      return 1e-2;
    case DType::kF16:
      return 2e-3;
    default:
      return 0;
  }
}

std::string differences(const std::vector<double>& got, const std::vector<double>& ref,
                        double rtol) {
  if (got.size() != ref.size()) {
    return "got " + std::to_string(got.size()) + " elements, expected " +
           std::to_string(ref.size());
  }
  double sum_sq = 0;
  for (double r : ref)
    if (std::isfinite(r)) sum_sq += r * r;
  const double rms = ref.empty() ? 0 : std::sqrt(sum_sq / double(ref.size()));
  std::ostringstream os;
  int shown = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i], r = ref[i];
    bool ok;
    if (std::isnan(r))
      ok = std::isnan(g);
    else if (std::isinf(r))
      ok = g == r;
    else
      ok = std::abs(g - r) <= rtol * (std::abs(r) + rms);  // false for a NaN g
    if (ok) continue;
    ++bad;
    if (shown++ < 5) os << "  [" << i << "] got " << g << ", expected " << r << "\n";
  }
  if (bad == 0) return "";
  std::ostringstream head;
  head << bad << " of " << ref.size() << " elements differ (rtol " << rtol << ", rms " << rms
       << "):\n";
  return head.str() + os.str();
}

double relative_error(const std::vector<double>& got, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    diff += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  return std::sqrt(diff) / std::sqrt(norm);  // NaN anywhere gives NaN: never below a bound
}

}  // namespace spmd::test
