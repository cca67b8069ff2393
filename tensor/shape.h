// A tensor's shape (or strides): up to kMaxDims sizes kept inline, so building
// a view or an output never allocates. Prints as [2, 3].
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <vector>

#include "runtime/error.h"

namespace spmd {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(std::span<const int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }

  int ndim() const { return ndim_; }
  bool empty() const { return ndim_ == 0; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t back() const { return dims_[ndim_ - 1]; }
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + ndim_; }
  int64_t* begin() { return dims_; }
  int64_t* end() { return dims_ + ndim_; }

  void push_back(int64_t d) {
    SPMD_CHECK(ndim_ < kMaxDims, "tensors have at most ", kMaxDims, " dims");
    dims_[ndim_++] = d;
  }
  void insert(int pos, int64_t d) {
    push_back(0);
    std::copy_backward(dims_ + pos, dims_ + ndim_ - 1, dims_ + ndim_);
    dims_[pos] = d;
  }
  void erase(int pos) {
    std::copy(dims_ + pos + 1, dims_ + ndim_, dims_ + pos);
    --ndim_;
  }

  // The number of elements a tensor of this shape holds (1 for a 0-d shape).
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= dims_[i];
    return n;
  }
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }

  friend bool operator==(const Shape& a, const Shape& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  template <class It>
  void assign(It first, It last) {
    SPMD_CHECK(last - first <= kMaxDims, "tensors have at most ", kMaxDims, " dims, got ",
               last - first);
    ndim_ = int(last - first);
    std::copy(first, last, dims_);
  }

  int64_t dims_[kMaxDims] = {};
  int ndim_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (int i = 0; i < s.ndim(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

// The strides of a contiguous (row-major) tensor of this shape.
inline Shape contiguous_strides(const Shape& shape) {
  Shape strides = shape;
  int64_t step = 1;
  for (int i = shape.ndim() - 1; i >= 0; --i) {
    strides[i] = step;
    step *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

// Turns a possibly negative dim into 0..ndim-1; throws naming `op` when out of range.
inline int wrap_dim(int dim, int ndim, const char* op) {
  const int d = dim < 0 ? dim + ndim : dim;
  SPMD_CHECK(d >= 0 && d < std::max(ndim, 1), op, ": dim ", dim, " is out of range for a ",
             ndim, "-d tensor");
  return d;
}

}  // namespace spmd
