// Merging the ranks' trace files: each file's events appended in rank
// order, a sort index per rank so the viewer keeps that order, and a note of
// what was merged; written to a temporary name and renamed, as the ranks
// write theirs.
#include "launcher/trace_merge.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace spmd::launcher {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string rank_file(const std::string& dir, int rank) {
  return (fs::path(dir) / str_cat("trace_rank", rank, ".json")).string();
}

// "0..3", "0, 2".
std::string rank_list(const std::vector<int>& ranks) {
  bool consecutive = true;
  for (size_t i = 1; i < ranks.size(); ++i) consecutive &= ranks[i] == ranks[i - 1] + 1;
  if (consecutive && ranks.size() > 2) return str_cat(ranks.front(), "..", ranks.back());
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

void clear_rank_traces(const std::string& dir, int first_rank, int count) {
  std::error_code ec;
  for (int r = first_rank; r < first_rank + count; ++r) fs::remove(rank_file(dir, r), ec);
}

TraceMerge merge_rank_traces(const std::string& dir, int first_rank, int count, int node, int nodes,
                             const std::string& file_name) {
  TraceMerge m;
  json events = json::array();
  for (int r = first_rank; r < first_rank + count; ++r) {
    const std::string path = rank_file(dir, r);
    std::ifstream in(path);
    if (!in) {
      m.missing.push_back(r);
      continue;
    }
    try {
      json trace = json::parse(in);
      for (json& e : trace.at("traceEvents")) events.push_back(std::move(e));
    } catch (const json::exception& e) {
      m.bad.push_back(str_cat(path, ": ", e.what()));
      continue;
    }
    events.push_back(
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r}, {"args", {{"sort_index", r}}}});
    m.merged.push_back(r);
  }
  if (m.merged.empty()) return m;
  const json doc = {
      {"displayTimeUnit", "ms"},
      {"otherData",
       {{"merged_by", "spmdrun"},
        {"ranks", m.merged},
        {"missing_ranks", m.missing},
        {"node", node},
        {"nodes", nodes},
        {"clock", "wall-clock microseconds since the epoch, shared by the ranks of a host"}}},
      {"traceEvents", std::move(events)}};
  const std::string path = (fs::path(dir) / file_name).string();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    if (!out) {
      m.bad.push_back(str_cat(tmp, ": cannot be written"));
      return m;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    m.bad.push_back(str_cat(path, ": ", ec.message()));
    return m;
  }
  m.path = path;
  return m;
}

std::string describe_trace_merge(const TraceMerge& m, int node, int nodes) {
  std::string out;
  if (!m.path.empty()) {
    out =
        str_cat("spmdrun: the trace of rank", m.merged.size() > 1 ? "s " : " ", rank_list(m.merged),
                " is in ", m.path, " (open it in ui.perfetto.dev or chrome://tracing)\n");
    if (nodes > 1)
      out += str_cat("spmdrun: that is node ", node, "'s ranks only: each of the ", nodes,
                     " launchers merges the ranks it started into trace_node<N>.json\n");
  } else if (m.bad.empty()) {
    out = "spmdrun: SPMD_TRACE is set but no rank wrote a trace file\n";
  }
  if (!m.missing.empty() && !m.merged.empty())
    out += str_cat(
        "spmdrun: no trace file from rank", m.missing.size() > 1 ? "s " : " ", rank_list(m.missing),
        " (a rank writes its file as it exits or is stopped by SIGTERM; one killed by another "
        "signal writes none)\n");
  for (const std::string& b : m.bad) out += "spmdrun: trace not merged: " + b + "\n";
  return out;
}

}  // namespace spmd::launcher
