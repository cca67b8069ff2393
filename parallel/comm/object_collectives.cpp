// all_gather_bytes: the sizes first, then the bytes padded to the longest
// (see object_collectives.h).
#include "parallel/comm/object_collectives.h"

#include <algorithm>

#include "tensor/ops.h"

namespace spmd::dist {

std::vector<std::vector<uint8_t>> all_gather_bytes(ProcessGroup& group,
                                                   const std::vector<uint8_t>& mine) {
  const int n = group.size();
  // 1. Every rank's byte count, so each knows how much of its block is real.
  Tensor sizes = ops::empty({n}, {DType::kI64});
  group.all_gather(sizes, ops::full({1}, double(mine.size()), {DType::kI64})).wait();
  const std::vector<int64_t> counts = ops::to_vector<int64_t>(sizes);
  const int64_t longest = *std::max_element(counts.begin(), counts.end());
  std::vector<std::vector<uint8_t>> all{size_t(n)};
  if (longest == 0) return all;  // every rank knows it: no second collective anywhere
  // 2. Every rank's bytes in a block of `words` i64s, zero-padded.
  const int64_t words = (longest + 7) / 8;
  Tensor block = ops::zeros({words}, {DType::kI64});
  std::copy(mine.begin(), mine.end(), static_cast<uint8_t*>(block.raw_data()));
  Tensor gathered = ops::empty({n * words}, {DType::kI64});
  group.all_gather(gathered, block).wait();
  const auto* bytes = static_cast<const uint8_t*>(gathered.raw_data());
  for (int r = 0; r < n; ++r) {
    const uint8_t* begin = bytes + size_t(r) * size_t(words) * 8;
    all[size_t(r)].assign(begin, begin + counts[size_t(r)]);
  }
  return all;
}

}  // namespace spmd::dist
