// Printing like PyTorch's repr (torch/_tensor_str.py): one formatter for the
// whole tensor picks a common width and a mode (integers with a trailing
// ".", fixed with 4 decimals, or scientific when magnitudes span more than
// 1000x or leave [1e-4, 1e8)); rows wrap at 80 columns; tensors over 1000
// elements show the first and last 3 entries of each dim around "...".
#include "tensor/print.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "tensor/copy.h"
#include "tensor/factory.h"
#include "tensor/views.h"

namespace spmd {
namespace {

constexpr int kLineWidth = 80, kEdgeItems = 3, kPrecision = 4;
constexpr int64_t kThreshold = 1000;

std::string printf_str(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, kPrecision, v);
  return buf;
}

// How the floating values shown are written: a mode and a common width.
class FloatFormat {
 public:
  explicit FloatFormat(const std::vector<double>& shown) {
    double lo = INFINITY, hi = 0;
    for (double v : shown) {
      if (!std::isfinite(v) || v == 0) continue;
      lo = std::min(lo, std::abs(v));
      hi = std::max(hi, std::abs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    if (hi == 0) return;  // no finite non-zero value: "0." style, width 1
    sci_mode_ = hi / lo > 1000 || hi > 1e8 || (!int_mode_ && lo < 1e-4);
    for (double v : shown) {
      if (std::isfinite(v) && v != 0)
        width_ = std::max(width_, int(raw(v).size()) + int_mode_ * !sci_mode_);
    }
  }
  int width() const { return width_; }
  std::string format(double v) const {
    if (!sci_mode_ && int_mode_ && std::isfinite(v)) return raw(v) + ".";
    return raw(v);
  }

 private:
  std::string raw(double v) const {
    return sci_mode_   ? printf_str("%.*e", v)
           : int_mode_ ? printf_str("%.0f", v)
                       : printf_str("%.*f", v);
  }
  bool int_mode_ = true, sci_mode_ = false;
  int width_ = 1;
};

// A host copy of the tensor's values and how to walk and write them.
struct Printer {
  Shape shape, strides;
  DType dtype;
  std::vector<double> floats;  // floating dtypes
  std::vector<int64_t> ints;   // integer dtypes and bool
  bool summarize = false;
  FloatFormat float_format{{}};
  int width = 1;

  std::string raw(int64_t i) const {
    if (is_floating(dtype)) return float_format.format(floats[size_t(i)]);
    if (dtype == DType::kBool) return ints[size_t(i)] ? "True" : "False";
    return std::to_string(ints[size_t(i)]);
  }
  std::string cell(int64_t i) const {
    const std::string s = raw(i);
    return std::string(size_t(std::max(0, width - int(s.size()))), ' ') + s;
  }

  // The indices along a dim of size n that are shown (all, or the edges).
  std::vector<int64_t> shown(int64_t n) const {
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < n; ++i)
      if (!summarize || n <= 2 * kEdgeItems || i < kEdgeItems || i >= n - kEdgeItems)
        idx.push_back(i);
    return idx;
  }

  // Fixes the format and width from the elements that will be shown.
  void measure() {
    std::vector<int64_t> offsets;
    collect(0, 0, offsets);
    if (is_floating(dtype)) {
      std::vector<double> shown_values;
      for (int64_t o : offsets) shown_values.push_back(floats[size_t(o)]);
      float_format = FloatFormat(shown_values);
      width = float_format.width();
    } else {
      for (int64_t o : offsets) width = std::max(width, int(raw(o).size()));
    }
  }

  void collect(int dim, int64_t offset, std::vector<int64_t>& out) const {
    if (dim == shape.ndim()) return out.push_back(offset);
    for (int64_t i : shown(shape[dim])) collect(dim + 1, offset + i * strides[dim], out);
  }

  std::string vector_str(int64_t offset, int indent) const {
    const int per_line = std::max(1, (kLineWidth - indent) / (width + 2));
    std::vector<std::string> items;
    const std::vector<int64_t> idx = shown(shape.back());
    for (size_t k = 0; k < idx.size(); ++k) {
      if (k > 0 && idx[k] != idx[k - 1] + 1) items.push_back(" ...");
      items.push_back(cell(offset + idx[k] * strides.back()));
    }
    std::string s = "[";
    for (size_t k = 0; k < items.size(); ++k) {
      if (k > 0 && k % per_line) s += ", ";
      if (k > 0 && !(k % per_line)) s.append(",\n").append(size_t(indent + 1), ' ');
      s += items[k];
    }
    return s + "]";
  }

  std::string str(int dim, int64_t offset, int indent) const {
    if (dim == shape.ndim()) return raw(offset);
    if (dim == shape.ndim() - 1) return vector_str(offset, indent);
    std::string sep = ",";
    sep.append(size_t(shape.ndim() - dim - 1), '\n').append(size_t(indent + 1), ' ');
    const std::vector<int64_t> idx = shown(shape[dim]);
    std::string s = "[";
    for (size_t k = 0; k < idx.size(); ++k) {
      if (k > 0) s += sep;
      if (k > 0 && idx[k] != idx[k - 1] + 1) s += "..." + sep;
      s += str(dim + 1, offset + idx[k] * strides[dim], indent + 1);
    }
    return s + "]";
  }
};

std::string shape_tuple(const Shape& s) {
  std::string out = "(";
  for (int i = 0; i < s.ndim(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.ndim() == 1 ? ",)" : ")");
}

// ", suffix" for each suffix, moved to a new line when the line would pass 80 columns.
std::string add_suffixes(std::string body, const std::vector<std::string>& suffixes, int indent) {
  int64_t last_line = int64_t(body.size()) - int64_t(body.rfind('\n') + 1) + 1;
  if (body.find('\n') == std::string::npos) last_line = int64_t(body.size()) + 1;
  for (const std::string& suffix : suffixes) {
    if (last_line + int64_t(suffix.size()) + 2 > kLineWidth) {
      body.append(",\n").append(size_t(indent), ' ').append(suffix);
      last_line = indent + int64_t(suffix.size());
    } else {
      body += ", " + suffix;
      last_line += int64_t(suffix.size()) + 2;
    }
  }
  return body + ")";
}

}  // namespace

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  const int indent = 7;  // strlen("tensor(")
  std::vector<std::string> suffixes;
  if (!t.is_cpu()) suffixes.push_back("device='" + t.device().str() + "'");
  const bool default_dtype =
      t.dtype() == DType::kF32 || t.dtype() == DType::kI64 || t.dtype() == DType::kBool;
  std::string body;
  if (t.numel() == 0) {
    if (t.ndim() != 1) suffixes.push_back("size=" + shape_tuple(t.shape()));
    if (t.dtype() != DType::kF32) suffixes.push_back("dtype=" + std::string(dtype_name(t.dtype())));
    body = "[]";
  } else {
    if (!default_dtype) suffixes.push_back("dtype=" + std::string(dtype_name(t.dtype())));
    Printer p{t.shape(), contiguous_strides(t.shape()), t.dtype(), {}, {}};
    if (is_floating(t.dtype()))
      p.floats = ops::to_vector<double>(t);
    else
      p.ints = ops::to_vector<int64_t>(t);
    p.summarize = t.numel() > kThreshold;
    p.measure();
    body = p.str(0, 0, indent);
  }
  if (t.requires_grad()) suffixes.push_back("requires_grad=True");
  return add_suffixes("tensor(" + body, suffixes, indent);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << to_string(t); }

}  // namespace spmd
