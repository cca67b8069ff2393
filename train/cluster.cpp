// Reading spmd-bench's measured bus bandwidths and looking one up by op,
// group size and message size (cluster.h).
#include "train/cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace spmd::train {

BusbwTable BusbwTable::read(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  SPMD_CHECK(in.is_open(), flag, " \"", path, "\": cannot read it");
  std::vector<Row> rows;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const bool ok = j.is_object() && j.contains("op") && j["op"].is_string() &&
                    j.contains("nranks") && j["nranks"].is_number() && j.contains("size") &&
                    j["size"].is_number() && j.contains("busbw") && j["busbw"].is_number();
    SPMD_CHECK(ok, flag, " \"", path, "\" line ", line,
               ": not a row of spmd-bench --json (an object with op, nranks, size and busbw)");
    Row r{j["op"].get<std::string>(), j["nranks"].get<int64_t>(), j["size"].get<double>(),
          j["busbw"].get<double>() * 1e9};
    SPMD_CHECK(r.busbw > 0 && std::isfinite(r.busbw) && r.size > 0 && r.nranks >= 2, flag, " \"",
               path, "\" line ", line, ": busbw ", j["busbw"].dump(), " GB/s at size ",
               j["size"].dump(), " over ", j["nranks"].dump(),
               " ranks: a busbw must be above 0, a size above 0, and the ranks at least 2");
    rows.push_back(r);
  }
  SPMD_CHECK(!rows.empty(), flag, " \"", path, "\": no rows (spmd-bench --json FILE writes them)");
  return BusbwTable(std::move(rows));
}

double BusbwTable::busbw(const std::string& op, int64_t nranks, double bytes) const {
  // The rows of the op with the group size nearest nranks, by size.
  int64_t nearest = 0;
  for (const Row& r : rows_)
    if (r.op == op &&
        (nearest == 0 || std::llabs(r.nranks - nranks) < std::llabs(nearest - nranks)))
      nearest = r.nranks;
  SPMD_CHECK(nearest > 0, "the measured busbw has no rows of ", op,
             " (run spmd-bench with it: spmd-bench ", op, " --json FILE)");
  std::vector<Row> of;
  for (const Row& r : rows_)
    if (r.op == op && r.nranks == nearest) of.push_back(r);
  std::sort(of.begin(), of.end(), [](const Row& a, const Row& b) { return a.size < b.size; });
  if (bytes <= of.front().size) return of.front().busbw;
  if (bytes >= of.back().size) return of.back().busbw;
  size_t i = 1;
  while (of[i].size < bytes) ++i;
  const double w = std::log(bytes / of[i - 1].size) / std::log(of[i].size / of[i - 1].size);
  return of[i - 1].busbw + w * (of[i].busbw - of[i - 1].busbw);
}

}  // namespace spmd::train
