// Making tensors: storage from the device's backend, contiguous strides, then
// (for all but empty) one fill, arange or random draw on that device.
#include "tensor/factory.h"

#include <cmath>
#include <cstring>

#include "tensor/backend.h"
#include "tensor/copy.h"
#include "tensor/views.h"

namespace spmd::ops {

Tensor empty(const Shape& shape, TensorOptions opts) {
  for (int64_t d : shape) SPMD_CHECK(d >= 0, "empty: negative size in shape ", shape);
  const size_t nbytes = size_t(shape.numel()) * element_size(opts.dtype);
  Backend& backend = backend_for(opts.device);
  auto storage =
      std::make_shared<Storage>(backend.allocate(nbytes, opts.device), nbytes, opts.device);
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, opts.dtype);
}

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  Tensor t = empty(shape, opts);
  backend_for(opts.device).fill(t, value);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1, opts); }

Tensor empty_like(const Tensor& like) { return empty(like.shape(), {like.dtype(), like.device()}); }
Tensor zeros_like(const Tensor& like) { return full_like(like, 0); }
Tensor ones_like(const Tensor& like) { return full_like(like, 1); }
Tensor full_like(const Tensor& like, double value) {
  return full(like.shape(), value, {like.dtype(), like.device()});
}

Tensor arange(double start, double end, double step, TensorOptions opts) {
  SPMD_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
             "arange: expected finite bounds and a non-zero step, got start ", start, ", end ", end,
             ", step ", step);
  const int64_t n = std::max<int64_t>(0, int64_t(std::ceil((end - start) / step)));
  Tensor t = empty({n}, opts);
  backend_for(opts.device).arange(t, start, step);
  return t;
}
Tensor arange(int64_t end, TensorOptions opts) { return arange(0, double(end), 1, opts); }

Tensor scalar_tensor(double value, TensorOptions opts) { return full(Shape{}, value, opts); }

// --- Random ------------------------------------------------------------------

Tensor uniform(const Shape& shape, double low, double high, TensorOptions opts, Generator* gen) {
  SPMD_CHECK(is_floating(opts.dtype), "uniform: expected a floating dtype, got ",
             dtype_name(opts.dtype), " (use randint for integers)");
  SPMD_CHECK(low <= high, "uniform: low ", low, " is above high ", high);
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, opts);
  backend_for(opts.device).random_uniform(t, low, high, g.seed(), g.advance(t.numel()));
  return t;
}
Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  return uniform(shape, 0, 1, opts, gen);
}

Tensor normal(const Shape& shape, double mean, double std, TensorOptions opts, Generator* gen) {
  SPMD_CHECK(is_floating(opts.dtype), "normal: expected a floating dtype, got ",
             dtype_name(opts.dtype));
  SPMD_CHECK(std >= 0, "normal: std must be >= 0, got ", std);
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, opts);
  backend_for(opts.device).random_normal(t, mean, std, g.seed(), g.advance(t.numel()));
  return t;
}
Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  return normal(shape, 0, 1, opts, gen);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator* gen) {
  SPMD_CHECK(low < high && uint64_t(high - low) <= (uint64_t(1) << 32), "randint: expected low < ",
             "high and a range of at most 2^32, got [", low, ", ", high, ")");
  SPMD_CHECK(opts.dtype != DType::kBool, "randint: cannot draw bool values");
  Generator& g = gen ? *gen : default_generator();
  const DType draw = is_floating(opts.dtype) ? DType::kI64 : opts.dtype;
  Tensor t = empty(shape, {draw, opts.device});
  backend_for(opts.device)
      .random_uniform(t, double(low), double(high), g.seed(), g.advance(t.numel()));
  return draw == opts.dtype ? t : to(t, opts.dtype);
}

// --- Host data ---------------------------------------------------------------

template <class T>
Tensor from_vector(std::span<const T> values, const Shape& shape, Device device) {
  SPMD_CHECK(int64_t(values.size()) == shape.numel(), "from_vector: ", values.size(),
             " values for shape ", shape, " (", shape.numel(), " elements)");
  Tensor t = empty(shape, {dtype_of<T>(), Device::cpu()});
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return to(t, device);
}

template <class T>
std::vector<T> to_vector(const Tensor& t) {
  const Tensor host = contiguous(to(to(t, Device::cpu()), dtype_of<T>()));
  std::vector<T> out(size_t(host.numel()));
  if (!out.empty()) std::memcpy(out.data(), host.raw_data(), out.size() * sizeof(T));
  return out;
}

// std::vector<bool> packs bits, so bool tensors travel as bytes.
template <>
std::vector<bool> to_vector<bool>(const Tensor& t) {
  const std::vector<uint8_t> bytes = to_vector<uint8_t>(to(t, DType::kBool));
  return std::vector<bool>(bytes.begin(), bytes.end());
}

#define SPMD_INSTANTIATE(T)                                                 \
  template Tensor from_vector<T>(std::span<const T>, const Shape&, Device); \
  template std::vector<T> to_vector<T>(const Tensor&);
SPMD_INSTANTIATE(float)
SPMD_INSTANTIATE(double)
SPMD_INSTANTIATE(BFloat16)
SPMD_INSTANTIATE(Half)
SPMD_INSTANTIATE(int32_t)
SPMD_INSTANTIATE(int64_t)
SPMD_INSTANTIATE(uint8_t)
#undef SPMD_INSTANTIATE
template Tensor from_vector<bool>(std::span<const bool>, const Shape&, Device);

}  // namespace spmd::ops
