// Hang triage: reading the ranks' progress and naming the culprit.
#include "launcher/hang_triage.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "runtime/error.h"

namespace spmd::launcher {

namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += str_cat(i ? ", " : "", ranks[i]);
  return text;
}

std::string seconds(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", double(us) / 1e6);
  return buf;
}

// "0/4008 B from rank 1, 10/20 B from rank 2": what the backend said the
// collective waits for; "" when it said nothing.
std::string bytes_text(const std::vector<PeerWait>& waiting) {
  std::string text;
  for (const PeerWait& w : waiting)
    text += str_cat(text.empty() ? "" : ", ", w.received, "/", w.expected, " B from rank ", w.peer);
  return text;
}

// The "waiting on" cell: the ranks it waits for (those that never entered),
// then the bytes the backend reported.
std::string waiting_on(const std::string& ranks, const std::vector<PeerWait>& waiting) {
  const std::string bytes = bytes_text(waiting);
  if (bytes.empty()) return ranks;
  return ranks == "-" ? bytes : str_cat(ranks, " (", bytes, ")");
}

struct Wavefront {
  uint64_t seq = 0;                       // the oldest collective a rank waits in
  std::string op;                         // what most of the ranks in it called
  std::vector<int> waiting, absent, odd;  // in it; not entered (or no record); another op
};

Wavefront find_wavefront(const std::vector<std::optional<RankProgress>>& ranks) {
  Wavefront w;
  bool any = false;
  for (const auto& p : ranks) {
    if (p && p->in_flight() && (!any || p->seq < w.seq)) w.seq = p->seq, any = true;
  }
  if (!any) return w;
  std::map<std::string, int> votes;
  for (const auto& p : ranks) {
    if (p && p->in_flight() && p->seq == w.seq) ++votes[p->op];
  }
  w.op = std::max_element(votes.begin(), votes.end(), [](auto& a, auto& b) {
           return a.second < b.second;
         })->first;
  for (int r = 0; r < int(ranks.size()); ++r) {
    const auto& p = ranks[r];
    if (!p || p->issued <= w.seq) {
      w.absent.push_back(r);
    } else if (p->in_flight() && p->seq == w.seq) {
      (p->op == w.op ? w.waiting : w.odd).push_back(r);
    }
  }
  return w;
}

std::string culprit_line(const Wavefront& w, const std::string& group, int dead_rank,
                         const std::string& how) {
  const std::string at = str_cat("collective #", w.seq, " of group ", group, " (", w.op, ")");
  const std::string where =
      w.waiting.empty() ? "" : str_cat(", where ", ranks_text(w.waiting), " wait");
  if (dead_rank >= 0) {
    return str_cat("rank ", dead_rank, " ", how,
                   w.op.empty() ? "" : str_cat(" while the others were at ", at), where);
  }
  if (w.op.empty()) return "no rank is inside a collective of group " + group;
  if (!w.absent.empty()) return str_cat(ranks_text(w.absent), " never entered ", at, where);
  if (!w.odd.empty()) return str_cat(ranks_text(w.odd), " entered another op at ", at, where);
  return str_cat("every rank is inside ", at,
                 ": one of them is stuck in it (a peer or the network that does not move)");
}

}  // namespace

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string wavefront_report(const std::vector<std::optional<RankProgress>>& ranks,
                             const std::string& group, int64_t now_us, int dead_rank,
                             const std::string& how) {
  const Wavefront w = find_wavefront(ranks);
  std::vector<std::vector<std::string>> rows = {
      {"rank", "group", "op", "seq", "state", "waiting on"}};
  for (int r = 0; r < int(ranks.size()); ++r) {
    const auto& p = ranks[r];
    std::vector<std::string> row = {std::to_string(r), group};
    if (!p) {
      row.insert(row.end(), {"-", "-", "no progress record", "-"});
    } else if (p->in_flight()) {
      const bool behind = std::count(w.absent.begin(), w.absent.end(), r) > 0;
      row.insert(row.end(),
                 {p->op, std::to_string(p->seq),
                  str_cat("in the collective for ", seconds(now_us - p->since_us)),
                  waiting_on(behind || w.absent.empty() ? "-" : ranks_text(w.absent), p->waiting)});
    } else {
      row.insert(row.end(),
                 {"-", "-",
                  p->issued == 0 ? "in its own code (no collective yet)"
                                 : str_cat("in its own code (#0-#", p->issued - 1, " done)"),
                  "-"});
    }
    if (r == dead_rank) row[4] = how + "; last record: " + row[4];
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string text = str_cat("spmdrun: ", dead_rank >= 0 ? "wavefront" : "hang", ": ",
                             culprit_line(w, group, dead_rank, how), "\n");
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    text += line + "\n";
  }
  return text;
}

std::vector<std::optional<RankProgress>> read_progress(Store& store, int attempt, int world_size) {
  std::vector<std::optional<RankProgress>> ranks(world_size);
  for (int r = 0; r < world_size; ++r) {
    const std::string key = str_cat("attempt_", attempt, "/", progress_key("world", r));
    if (!store.check({key})) continue;
    const Bytes b = store.get(key, std::chrono::seconds(5));
    ranks[r] = decode_progress(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  }
  return ranks;
}

HangWatch::HangWatch(Store& store, int attempt, int world_size, std::chrono::milliseconds timeout)
    : store_(store),
      attempt_(attempt),
      world_size_(world_size),
      timeout_(timeout),
      changed_(std::chrono::steady_clock::now()) {}

bool HangWatch::stalled() {
  last_ = read_progress(store_, attempt_, world_size_);
  std::string text;
  bool waiting = false;
  for (const auto& p : last_) {
    text += p ? encode_progress(*p) + "\n" : "-\n";
    waiting = waiting || (p && p->in_flight());
  }
  const auto now = std::chrono::steady_clock::now();
  if (text != last_text_) {
    last_text_ = std::move(text);
    changed_ = now;
    return false;
  }
  return waiting && now - changed_ >= timeout_;
}

std::string HangWatch::report() const { return wavefront_report(last_, "world", wall_clock_us()); }

}  // namespace spmd::launcher
