// The progress record's text form.
#include "runtime/progress.h"

#include <cstdlib>
#include <sstream>

#include "runtime/error.h"

namespace spmd {

std::string progress_key(std::string_view group, int rank) {
  return str_cat(group, "/progress/", rank);
}

std::string encode_progress(const RankProgress& p) {
  std::string op = p.op.empty() ? "-" : p.op;
  for (char& c : op) {
    if (c == '\n') c = ' ';
  }
  std::string waiting;
  for (const PeerWait& w : p.waiting)
    waiting += str_cat(waiting.empty() ? "" : ",", w.peer, ":", w.received, ":", w.expected);
  return str_cat("spmd-progress 2 ", p.rank, " ", p.issued, " ", p.completed, " ", p.seq, " ",
                 p.since_us, " ", waiting.empty() ? "-" : waiting, " ", op);
}

namespace {

// "1:0:4000,2:10:20" -> the list; false for anything else.
bool decode_waiting(const std::string& text, std::vector<PeerWait>& out) {
  if (text == "-") return true;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    PeerWait w;
    char c1 = 0, c2 = 0;
    std::istringstream one(item);
    if (!(one >> w.peer >> c1 >> w.received >> c2 >> w.expected) || c1 != ':' || c2 != ':' ||
        w.peer < 0 || w.received > w.expected || !one.eof())
      return false;
    out.push_back(w);
  }
  return !out.empty();
}

}  // namespace

std::optional<RankProgress> decode_progress(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string magic;
  int version = 0;
  RankProgress p;
  std::string waiting;
  if (!(in >> magic >> version >> p.rank >> p.issued >> p.completed >> p.seq >> p.since_us >>
        waiting))
    return std::nullopt;
  if (magic != "spmd-progress" || version != 2 || p.rank < 0 || p.completed > p.issued)
    return std::nullopt;
  if (!decode_waiting(waiting, p.waiting)) return std::nullopt;
  std::getline(in >> std::ws, p.op);
  if (p.op.empty()) return std::nullopt;
  return p;
}

// --- Groups and heartbeats ----------------------------------------------------------

std::string group_count_key(int global_rank) { return str_cat("groups/", global_rank, "/count"); }

std::string group_entry_key(int global_rank, int64_t i) {
  return str_cat("groups/", global_rank, "/", i);
}

std::string encode_group(const GroupEntry& g) {
  std::string globals;
  for (int r : g.globals) globals += str_cat(globals.empty() ? "" : ",", r);
  return str_cat("spmd-group 1 ", g.rank, " ", globals, " ", g.name);
}

std::optional<GroupEntry> decode_group(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string magic, globals;
  int version = 0;
  GroupEntry g;
  if (!(in >> magic >> version >> g.rank >> globals >> g.name) || magic != "spmd-group" ||
      version != 1)
    return std::nullopt;
  std::istringstream list(globals);
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    const long r = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || r < 0) return std::nullopt;
    g.globals.push_back(int(r));
  }
  if (g.rank < 0 || g.rank >= int(g.globals.size())) return std::nullopt;
  return g;
}

std::string heartbeat_key(int global_rank) { return str_cat("alive/", global_rank); }

}  // namespace spmd
