// Agreement checks: gather every rank's values, compare them with rank 0's.
#include "parallel/agreement.h"

#include <algorithm>
#include <sstream>

#include "parallel/comm/object_collectives.h"
#include "runtime/error.h"
#include "tensor/ops.h"

namespace spmd::dist {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

void check_same_on_every_rank(ProcessGroup& group, const std::string& what,
                              const std::vector<SharedValue>& values) {
  const int n = group.size();
  const int64_t k = int64_t(values.size());
  if (n == 1 || k == 0) return;
  std::vector<int64_t> mine;
  for (const SharedValue& v : values) mine.push_back(v.value);
  Tensor all = ops::empty({n * k}, {DType::kI64});
  group.all_gather(all, ops::from_vector(mine, {k})).wait();
  const std::vector<int64_t> got = ops::to_vector<int64_t>(all);  // rank r's at [r k, r k + k)
  for (int64_t i = 0; i < k; ++i) {
    std::ostringstream differs;
    for (int r = 1; r < n; ++r)
      if (got[size_t(r * k + i)] != got[size_t(i)])
        differs << ", rank " << r << " has " << got[size_t(r * k + i)];
    SPMD_CHECK(differs.str().empty(), what, ": the ranks disagree on ", values[size_t(i)].name,
               ": rank 0 has ", got[size_t(i)], differs.str(),
               " (every rank must be started with the same value)");
  }
}

void check_same_text_on_every_rank(ProcessGroup& group, const std::string& what,
                                   const std::string& text) {
  const int n = group.size();
  if (n == 1) return;
  const std::vector<std::vector<uint8_t>> all =
      all_gather_bytes(group, std::vector<uint8_t>(text.begin(), text.end()));
  auto text_of = [&](int r) { return std::string(all[size_t(r)].begin(), all[size_t(r)].end()); };
  const std::vector<std::string> base = lines_of(text_of(0));
  for (int r = 1; r < n; ++r) {
    const std::vector<std::string> other = lines_of(text_of(r));
    for (size_t i = 0; i < std::max(base.size(), other.size()); ++i) {
      const std::string a = i < base.size() ? base[i] : "(nothing)";
      const std::string b = i < other.size() ? other[i] : "(nothing)";
      SPMD_CHECK(a == b, what, " differs between ranks: rank 0 has '", a, "', rank ", r, " has '",
                 b, "' (every rank must be started with the same settings)");
    }
  }
}

}  // namespace spmd::dist
