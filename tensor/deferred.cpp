// Materializing meta tensors, and drawing a box of a parameter's initial
// values (deferred.h).
#include "tensor/deferred.h"

#include "tensor/backend.h"
#include "tensor/copy.h"
#include "tensor/factory.h"
#include "tensor/views.h"

namespace spmd::ops {
namespace {

// Elements [g0, g0 + n) of the whole draw into `run`, n contiguous elements.
// The draw's element g is lane g % 4 of counter g / 4: the kernel starts
// every tensor at lane 0 of a counter, so a run that starts mid-counter
// takes its first (up to 3) elements from a draw of that counter's four.
void normal_run(const Tensor& run, double mean, double std, uint64_t key, uint64_t g0) {
  Backend& backend = backend_for(run.device());
  const int64_t n = run.numel();
  const int64_t head = std::min<int64_t>(n, int64_t((4 - g0 % 4) % 4));
  if (head > 0) {
    const Tensor four = empty(Shape{4}, {run.dtype(), run.device()});
    backend.random_normal(four, mean, std, key, g0 / 4);
    copy_(narrow(run, 0, 0, head), narrow(four, 0, int64_t(g0 % 4), head));
  }
  if (n > head)
    backend.random_normal(narrow(run, 0, head, n - head), mean, std, key,
                          (g0 + uint64_t(head)) / 4);
}

}  // namespace

void materialize_(const Tensor& t, Device device) {
  if (!t.device().is_meta()) return;
  SPMD_CHECK(!device.is_meta(), "materialize_: expected a device with bytes, got meta");
  Storage& storage = *t.storage();
  DataPtr data;
  if (!storage.is_released()) data = backend_for(device).allocate(storage.nbytes(), device);
  storage.materialize(std::move(data), device);
}

uint64_t init_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64-bit
  for (const char c : name) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  uint64_t z = h ^ (seed + 0x9e3779b97f4a7c15ull);  // SplitMix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void normal_box_(const Tensor& box, double mean, double std, uint64_t key, const Shape& whole,
                 const Shape& offset) {
  const int n = whole.ndim();
  SPMD_CHECK(box.ndim() == n && offset.ndim() == n, "normal_box_: a box ", box.shape(),
             " at offset ", offset, " of a whole ", whole, " must have the whole's rank");
  for (int d = 0; d < n; ++d)
    SPMD_CHECK(offset[d] >= 0 && offset[d] + box.size(d) <= whole[d], "normal_box_: the box ",
               box.shape(), " at offset ", offset, " does not lie within ", whole);
  if (box.numel() == 0) return;
  if (!box.is_contiguous()) {
    const Tensor dense = empty(box.shape(), {box.dtype(), box.device()});
    normal_box_(dense, mean, std, key, whole, offset);
    copy_(box, dense);
    return;
  }
  // The box's rows that are contiguous in the whole as well: past the
  // outermost dim k after which the box spans whole dims, one run of
  // box[k] x (the whole's size past k) elements per index of the dims before k.
  int k = n - 1;
  while (k > 0 && box.size(k) == whole[k]) --k;
  const Shape strides = contiguous_strides(whole);
  const int64_t run = n == 0 ? 1 : box.size(k) * strides[k];
  const Tensor flat = view(box, Shape{box.numel()});
  for (int64_t r = 0; r * run < box.numel(); ++r) {
    int64_t g0 = n == 0 ? 0 : offset[k] * strides[k], rest = r;
    for (int d = k - 1; d >= 0; --d) {
      g0 += (offset[d] + rest % box.size(d)) * strides[d];
      rest /= box.size(d);
    }
    normal_run(narrow(flat, 0, r * run, run), mean, std, key, uint64_t(g0));
  }
}

}  // namespace spmd::ops
