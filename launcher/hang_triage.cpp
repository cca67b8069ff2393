// Hang triage: who waits on whom across the job's groups, the stuck ranks
// named, and the table.
#include "launcher/hang_triage.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

#include "runtime/error.h"

namespace spmd::launcher {

namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += str_cat(i ? ", " : "", ranks[i]);
  return text;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// One collective a rank waits in.
struct Wait {
  int group = -1;   // index into job.groups; -1: the rank waits in none
  int member = -1;  // the rank's group rank there
  const RankProgress* p = nullptr;
};

// What one rank is doing, as the records tell.
struct RankView {
  Wait in;                        // the oldest collective it waits in
  std::vector<int> on;            // global ranks it waits on
  std::vector<int> absent;        // of them, those that never entered it
  std::vector<int> completed_by;  // members that completed the collective it is in
  std::string bytes;              // "0/4032 B from rank 1": what the backend said
};

int64_t order_of(const RankProgress& p) {
  return p.since_us > 0 ? p.since_us : std::numeric_limits<int64_t>::max();
}

// The member index of global rank g in `group`, or -1.
int member_of(const GroupProgress& group, int g) {
  auto it = std::find(group.globals.begin(), group.globals.end(), g);
  return it == group.globals.end() ? -1 : int(it - group.globals.begin());
}

// Whether global rank g has published a progress record in any group.
bool has_record(const JobProgress& job, int g) {
  for (const GroupProgress& group : job.groups) {
    const int k = member_of(group, g);
    if (k >= 0 && group.ranks[k]) return true;
  }
  return false;
}

std::vector<RankView> view_ranks(const JobProgress& job, int world) {
  std::vector<RankView> views(world);
  for (int g = 0; g < world; ++g) {
    RankView& v = views[g];
    for (int gi = 0; gi < int(job.groups.size()); ++gi) {
      const int k = member_of(job.groups[gi], g);
      if (k < 0) continue;
      const auto& p = job.groups[gi].ranks[k];
      if (p && p->in_flight() && (!v.in.p || order_of(*p) < order_of(*v.in.p))) v.in = {gi, k, &*p};
    }
    if (!v.in.p) continue;
    const GroupProgress& group = job.groups[v.in.group];
    const uint64_t s = v.in.p->seq;
    for (size_t m = 0; m < group.globals.size(); ++m) {
      const auto& q = group.ranks[m];
      if (int(m) == v.in.member) continue;
      if (!q || q->issued <= s) v.absent.push_back(group.globals[m]);
      if (q && q->completed > s) v.completed_by.push_back(group.globals[m]);
    }
    v.on = v.absent;
    for (const PeerWait& w : v.in.p->waiting) {
      if (w.peer < 0 || w.peer >= int(group.globals.size())) continue;
      const int peer = group.globals[w.peer];
      v.bytes +=
          str_cat(v.bytes.empty() ? "" : ", ", w.received, "/", w.expected, " B from rank ", peer);
      if (v.absent.empty() && w.received < w.expected) v.on.push_back(peer);
    }
  }
  return views;
}

std::string collective_text(const JobProgress& job, const Wait& w) {
  return str_cat("collective #", w.p->seq, " of group ", job.groups[w.group].name,
                 w.p->op == "?" ? "" : str_cat(" (", w.p->op, ")"));
}

// How long rank g's heartbeat has been silent, when that says its process
// is stopped or frozen (a few intervals); negative otherwise.
double silent_s(const JobProgress& job, int g, int64_t now_us) {
  if (job.beat_us[g] <= 0) return -1;
  const double s = double(now_us - job.beat_us[g]) / 1e6;
  return s >= 3.0 * double(kHeartbeat.count()) / 1000 ? s : -1;
}

// A rank whose process does not run: stopped (this node), or silent (any node).
bool frozen(const JobProgress& job, int g, int64_t now_us) {
  return job.process[g].stopped() || (job.process[g].state == 0 && silent_s(job, g, now_us) > 0);
}

// "; its process is asleep (state S), 0.0 s of CPU in the last 5.1 s".
std::string process_text(const JobProgress& job, int g) {
  const ProcessState& ps = job.process[g];
  if (ps.state == 0) return "";
  std::string text = "; its process is " + describe_process_state(ps.state);
  const double cpu = job.cpu_while_stalled_s[g];
  if (cpu >= 0 && job.stalled_s > 0)
    text += str_cat(", ", seconds(cpu), " of CPU in the last ", seconds(job.stalled_s));
  return text;
}

// The table's process cell: "stopped (T)", "asleep (S)"; "silent 12.0 s"
// for a rank elsewhere whose heartbeat stopped; "-" when nothing is known.
std::string process_cell(const JobProgress& job, int g, int64_t now_us) {
  const ProcessState& ps = job.process[g];
  if (ps.stopped()) return str_cat("stopped (", ps.state, ")");
  if (ps.state == 'R') return "running (R)";
  if (ps.state == 'S') return "asleep (S)";
  if (ps.state != 0) return str_cat("state ", ps.state);
  if (silent_s(job, g, now_us) > 0) return "silent " + seconds(silent_s(job, g, now_us));
  return "-";
}

std::string wait_verb(const std::vector<int>& ranks) {
  return ranks_text(ranks) + (ranks.size() == 1 ? " waits" : " wait");
}

// The headline's sentence for one stuck rank: where it is against those
// that wait on it. A frozen rank's record may be an interval older than its
// last collective (it stopped before publishing again), so of it the line
// says only what its last record shows.
std::string stuck_text(const JobProgress& job, const std::vector<RankView>& views, int c,
                       int64_t now_us) {
  std::vector<int> waiters;
  const Wait* oldest = nullptr;  // the oldest collective in which some rank waits on c
  for (int w = 0; w < int(views.size()); ++w) {
    if (std::count(views[w].on.begin(), views[w].on.end(), c) == 0) continue;
    waiters.push_back(w);
    if (!oldest || order_of(*views[w].in.p) < order_of(*oldest->p)) oldest = &views[w].in;
  }
  const RankView& v = views[c];
  if (frozen(job, c, now_us)) {
    std::string text =
        job.process[c].stopped()
            ? str_cat("rank ", c, "'s process is ", describe_process_state(job.process[c].state))
            : str_cat(
                  "rank ", c, " has been silent for ", seconds(silent_s(job, c, now_us)),
                  " (no heartbeat: its process is stopped or frozen, or its host cannot reach the "
                  "store)");
    if (oldest)
      text += str_cat(": ", wait_verb(waiters), " for it in ", collective_text(job, *oldest));
    if (!has_record(job, c)) return text + "; it had published no progress record";
    return text + str_cat("; its last record shows it ",
                          v.in.p ? "inside " + collective_text(job, v.in) : "in its own code");
  }
  std::string text = str_cat("rank ", c);
  if (!oldest) {  // nobody waits on it (yet): say where it is
    text += v.in.p ? " is inside " + collective_text(job, v.in) : " is in its own code";
    return text + process_text(job, c);
  }
  const GroupProgress& group = job.groups[oldest->group];
  const int k = member_of(group, c);
  const bool entered = k >= 0 && group.ranks[k] && group.ranks[k]->issued > oldest->p->seq;
  const bool elsewhere = v.in.p && (v.in.group != oldest->group || v.in.p->seq != oldest->p->seq);
  if (elsewhere && (!v.completed_by.empty() || entered)) {  // held up in an earlier collective
    text += str_cat(
        " is still inside ", collective_text(job, v.in),
        v.completed_by.empty() ? "" : str_cat(", which ", ranks_text(v.completed_by), " completed"),
        "; ", wait_verb(waiters), " for it in ", collective_text(job, *oldest));
  } else if (!entered) {
    text +=
        str_cat(" never entered ", collective_text(job, *oldest), ", where ", wait_verb(waiters));
  } else {
    text += str_cat(" has not sent what ", wait_verb(waiters), " for in ",
                    collective_text(job, *oldest));
  }
  return text + process_text(job, c);
}

// The first line's text after "spmdrun: hang: ".
std::string headline(const JobProgress& job, const std::vector<RankView>& views, int64_t now_us) {
  const int world = int(views.size());
  std::vector<int> stuck;
  for (int c = 0; c < world; ++c) {
    bool waited_on = false;
    for (const RankView& v : views)
      waited_on = waited_on || std::count(v.on.begin(), v.on.end(), c);
    if (frozen(job, c, now_us) || (waited_on && views[c].on.empty())) stuck.push_back(c);
  }
  std::stable_partition(stuck.begin(), stuck.end(), [&](int c) { return frozen(job, c, now_us); });
  std::string text;
  for (int c : stuck)
    text += str_cat(text.empty() ? "" : "; and ", stuck_text(job, views, c, now_us));
  if (!text.empty()) return text;
  // Nobody to blame by the records: the oldest waiter's collective.
  const RankView* first = nullptr;
  for (const RankView& v : views) {
    if (v.in.p && (!first || order_of(*v.in.p) < order_of(*first->in.p))) first = &v;
  }
  if (!first) return "no rank is inside a collective";
  bool all_inside = true;
  std::vector<std::string> waits;
  for (int g = 0; g < world; ++g) {
    const RankView& v = views[g];
    if (!v.in.p) continue;
    if (!v.on.empty())
      waits.push_back(
          str_cat("rank ", g, " in ", collective_text(job, v.in), " on ", ranks_text(v.on)));
    all_inside = all_inside && v.on.empty();
  }
  if (!all_inside) {
    std::string list;
    for (const auto& w : waits) list += (list.empty() ? "" : ", ") + w;
    return "ranks wait on each other (a deadlock across groups): " + list;
  }
  return str_cat("every rank is inside ", collective_text(job, first->in),
                 ": one of them is stuck in it (a peer or the network that does not move)");
}

// For a dead rank: what the others were doing when it died.
std::string dead_line(const JobProgress& job, const std::vector<RankView>& views, int dead,
                      const std::string& how) {
  const Wait* oldest = nullptr;
  for (int g = 0; g < int(views.size()); ++g) {
    if (g != dead && views[g].in.p && (!oldest || order_of(*views[g].in.p) < order_of(*oldest->p)))
      oldest = &views[g].in;
  }
  std::string text = str_cat("rank ", dead, " ", how);
  if (!oldest) return text;
  std::vector<int> waiting;
  for (int g = 0; g < int(views.size()); ++g) {
    const Wait& w = views[g].in;
    if (g != dead && w.p && w.group == oldest->group && w.p->seq == oldest->p->seq)
      waiting.push_back(g);
  }
  return str_cat(text, " while the others were at ", collective_text(job, *oldest), ", where ",
                 ranks_text(waiting), waiting.size() == 1 ? " waits" : " wait");
}

}  // namespace

int64_t wall_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string wavefront_report(const JobProgress& job, int64_t now_us, int dead_rank,
                             const std::string& how) {
  const int world = int(job.process.size());
  const std::vector<RankView> views = view_ranks(job, world);
  // The group and collective the headline is about, for the own-code rows.
  const Wait* focus = nullptr;
  for (const RankView& v : views) {
    if (v.in.p && !v.on.empty() && (!focus || order_of(*v.in.p) < order_of(*focus->p)))
      focus = &v.in;
  }
  std::vector<std::vector<std::string>> rows = {
      {"rank", "process", "group", "op", "seq", "state", "waiting on"}};
  for (int g = 0; g < world; ++g) {
    const RankView& v = views[g];
    std::vector<std::string> row = {std::to_string(g),
                                    g == dead_rank ? "-" : process_cell(job, g, now_us)};
    if (v.in.p) {
      const std::string ranks = v.absent.empty() ? "-" : ranks_text(v.absent);
      std::string waiting = v.bytes.empty() ? ranks
                            : ranks == "-"  ? v.bytes
                                            : str_cat(ranks, " (", v.bytes, ")");
      row.insert(row.end(),
                 {job.groups[v.in.group].name, v.in.p->op, std::to_string(v.in.p->seq),
                  v.in.p->since_us > 0 ? str_cat("in the collective for ",
                                                 seconds(double(now_us - v.in.p->since_us) / 1e6))
                                       : "in the collective",
                  waiting});
    } else {
      std::string state = "in its own code";
      if (focus) {
        const GroupProgress& group = job.groups[focus->group];
        const int k = member_of(group, g);
        if (k >= 0 && group.ranks[k])
          state = group.ranks[k]->issued == 0
                      ? "in its own code (no collective yet)"
                      : str_cat("in its own code (#0-#", group.ranks[k]->issued - 1, " done)");
      }
      if (!has_record(job, g)) state = "no progress record";
      row.insert(row.end(), {"-", "-", "-", state, "-"});
    }
    if (g == dead_rank) row[5] = how + "; last record: " + row[5];
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string text = str_cat(
      "spmdrun: ", dead_rank >= 0 ? "wavefront" : "hang", ": ",
      dead_rank >= 0 ? dead_line(job, views, dead_rank, how) : headline(job, views, now_us), "\n");
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

HangWatch::HangWatch(Store& store, int attempt, int world_size, std::chrono::milliseconds timeout,
                     std::vector<pid_t> pids)
    : reader_(store, attempt, world_size, std::move(pids)),
      timeout_(timeout),
      changed_(std::chrono::steady_clock::now()) {}

bool HangWatch::stalled() {
  last_ = reader_.read();
  std::string text = JobReader::progress_text(last_);
  bool waiting = false;
  for (const GroupProgress& group : last_.groups) {
    for (const auto& p : group.ranks) waiting = waiting || (p && p->in_flight());
  }
  const auto now = std::chrono::steady_clock::now();
  if (text != last_text_) {
    last_text_ = std::move(text);
    changed_ = now;
    cpu_at_change_.clear();
    for (const ProcessState& ps : last_.process) cpu_at_change_.push_back(ps.state ? ps.cpu_s : -1);
    return false;
  }
  return waiting && now - changed_ >= timeout_;
}

std::string HangWatch::report() {
  for (size_t g = 0; g < last_.process.size() && g < cpu_at_change_.size(); ++g) {
    if (last_.process[g].state && cpu_at_change_[g] >= 0)
      last_.cpu_while_stalled_s[g] = last_.process[g].cpu_s - cpu_at_change_[g];
  }
  last_.stalled_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - changed_).count();
  return wavefront_report(last_, wall_clock_us());
}

}  // namespace spmd::launcher
