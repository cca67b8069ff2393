// Making tensors: uninitialized, filled, ranges, random, and from host data.
// Every factory takes an optional dtype (default f32) and device (default
// cpu, or the device of a DefaultDeviceGuard on this thread).
#pragma once

#include <span>
#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace spmd::ops {

struct TensorOptions {
  DType dtype = DType::kF32;
  Device device = default_device();  // the CPU, unless a DefaultDeviceGuard says otherwise
};

// Uninitialized memory of the given shape (contiguous).
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
// Same shape, dtype and device as `like`.
Tensor empty_like(const Tensor& like);
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
Tensor full_like(const Tensor& like, double value);
// [start, start+step, ...) up to but excluding `end`; i64 by default as in PyTorch.
Tensor arange(double start, double end, double step = 1, TensorOptions opts = {DType::kI64});
Tensor arange(int64_t end, TensorOptions opts = {DType::kI64});
// A 0-d tensor holding `value`.
Tensor scalar_tensor(double value, TensorOptions opts = {});

// Uniform in [low, high) and normal(mean, std) from the Philox generator
// (tensor/random.h); the same seed gives the same values on every device.
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor uniform(const Shape& shape, double low, double high, TensorOptions opts = {},
               Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double std, TensorOptions opts = {},
              Generator* gen = nullptr);
// Integers uniform in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = {DType::kI64},
               Generator* gen = nullptr);

// A tensor holding a copy of host values. REQUIRES: values.size() == shape.numel().
template <class T>
Tensor from_vector(std::span<const T> values, const Shape& shape, Device device = Device::cpu());
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                   Device device = Device::cpu()) {
  return from_vector(std::span<const T>(values), shape, device);
}
// The elements of any tensor, in row-major order, converted to T, on the host.
template <class T>
std::vector<T> to_vector(const Tensor& t);
// bool elements come back as a std::vector<bool> (nonzero is true).
template <>
std::vector<bool> to_vector<bool>(const Tensor& t);

}  // namespace spmd::ops
