// Merging the workers' flight-recorder dumps into one file and one report.
#include "launcher/flight_report.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace spmd::launcher {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// "32 MiB", "400 B".
std::string human_bytes(uint64_t b) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) return str_cat(b >> 30, " GiB");
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return str_cat(b >> 20, " MiB");
  if (b >= (1ull << 10) && b % (1ull << 10) == 0) return str_cat(b >> 10, " KiB");
  return str_cat(b, " B");
}

// "  #3 all_reduce 32 MiB f32: failed after 15 ms" (times relative to the dump).
std::string op_line(const json& op, int64_t dumped_us) {
  const std::string name = op.value("op", "?");
  const bool p2p = name == "send" || name == "recv";
  std::string line =
      str_cat("    ", p2p ? name + " #" : "#", op.value("seq", 0ull), " ",
              p2p ? str_cat(name == "send" ? "to " : "from ", op.value("peer", -1)) : name);
  const uint64_t bytes = op.value("bytes", 0ull);
  if (bytes > 0) line += str_cat(" ", human_bytes(bytes), " ", op.value("dtype", ""));
  const std::string state = op.value("state", "?");
  const int64_t issued = op.value("issued_us", int64_t(0));
  const int64_t ended = op.value("ended_us", int64_t(0));
  line += ": " + state;
  if (state == "pending" || (state == "failed" && ended == 0)) {
    line += str_cat(" (issued ", (dumped_us - issued) / 1000, " ms before the dump)");
  } else if (ended > 0) {
    line += str_cat(" in ", (ended - issued) / 1000.0, " ms");
  }
  return line;
}

}  // namespace

std::string flight_dir(const std::string& user_dir, const std::string& log_root,
                       std::string& temp_root, int restart) {
  if (!user_dir.empty()) return user_dir;
  if (log_root.empty()) {  // named, not made: the first rank that arms or dumps makes it
    if (temp_root.empty()) {
      const auto nanos = std::chrono::steady_clock::now().time_since_epoch().count();
      temp_root = str_cat("/tmp/spmdrun_flight_", ::getpid(), "_", nanos % 1000000007);
    }
    return (fs::path(temp_root) / str_cat("attempt_", restart)).string();
  }
  const fs::path dir = fs::path(log_root) / str_cat("attempt_", restart) / "flight";
  std::error_code ec;
  fs::create_directories(dir, ec);
  SPMD_CHECK(!ec, "cannot create the flight recorder's folder ", dir.string(), ": ", ec.message());
  return dir.string();
}

void wait_for_flight_dumps(WorkerGroup& group, const std::string& dir,
                           std::chrono::milliseconds grace, SignalChannel& signals) {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (;;) {
    bool waiting = false;
    for (const Worker& w : group.workers()) {
      const bool armed = fs::exists(fs::path(dir) / str_cat("armed_rank", w.rank));
      if (w.running && armed && !has_flight_dump(dir, w.rank)) waiting = true;
    }
    if (!waiting || std::chrono::steady_clock::now() >= deadline) return;
    group.pump(std::chrono::milliseconds(50), signals);
    if (signals.has_termination()) return;
  }
}

std::vector<std::string> flight_dump_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("flight_rank", 0) == 0 && entry.path().extension() == ".json")
      files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool has_flight_dump(const std::string& dir, int rank) {
  const std::string prefix = str_cat("flight_rank", rank, "_");
  for (const std::string& f : flight_dump_files(dir)) {
    if (fs::path(f).filename().string().rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::string merge_flight_dumps(const std::string& dir, size_t per_rank) {
  std::vector<json> dumps;
  std::string unreadable;
  for (const std::string& f : flight_dump_files(dir)) {
    std::ifstream in(f);
    json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("ops") || !doc["ops"].is_array()) {
      unreadable += str_cat("  (", f, " is not a flight-recorder dump: skipped)\n");
      continue;
    }
    dumps.push_back(std::move(doc));
  }
  if (dumps.empty() && unreadable.empty()) return "";
  std::stable_sort(dumps.begin(), dumps.end(), [](const json& a, const json& b) {
    return std::make_pair(a.value("rank", 0), a.value("group", std::string())) <
           std::make_pair(b.value("rank", 0), b.value("group", std::string()));
  });
  const std::string merged = (fs::path(dir) / "flight_recorder.json").string();
  {
    std::ofstream out(merged);
    out << json(dumps).dump(1) << '\n';
  }
  std::string text = str_cat("spmdrun: flight recorder: the last operations of ", dumps.size(),
                             " dump(s), oldest first (all of them: ", merged, ")\n");
  for (const json& d : dumps) {
    const json& ops = d["ops"];
    text += str_cat("  rank ", d.value("rank", -1), ", group ", d.value("group", "?"), " (rank ",
                    d.value("group_rank", -1), " of ", d.value("group_size", 0),
                    "), dumped on: ", d.value("reason", ""), "\n");
    const size_t first = ops.size() > per_rank ? ops.size() - per_rank : 0;
    if (first > 0) text += str_cat("    ... ", first, " earlier\n");
    for (size_t i = first; i < ops.size(); ++i)
      text += op_line(ops[i], d.value("dumped_us", int64_t(0))) + "\n";
  }
  return text + unreadable;
}

}  // namespace spmd::launcher
