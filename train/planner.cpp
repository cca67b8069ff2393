// The planner's search: read the sizes and the layout a user gives, refuse
// a layout with its reason, then walk every way of splitting the devices
// into dp_replicate x dp_shard x cp x tp x pp, and keep the layouts whose
// largest rank's memory plan fits a device and, on a timed cluster, its
// step time (step_time.h). The explanation for one device is in
// plan_explain.cpp, the tables in plan_tables.cpp.
#include "train/planner.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <tuple>
#include <utility>

#include "runtime/error.h"
#include "train/parallelize.h"

namespace spmd::train {
namespace {

// The divisors of n, ascending (each pair d, n / d found by d up to sqrt(n)).
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> small, large;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    small.push_back(d);
    if (d != n / d) large.push_back(n / d);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// The checkpointing the search tries, least recomputation first: none;
// selective "op" (the cheap ops again, no GEMM); selective every 2nd block
// (half the blocks' forwards again); full (every block's).
constexpr const char* kCheckpointing[] = {"none", "op", "2", "full"};

// What each mode of kCheckpointing runs again in backward: the products'
// FLOPs, and the forward's collectives (0: nothing, 1: some blocks', 2:
// every block's; step_time.h).
constexpr std::pair<int, int> kReruns[] = {{0, 0}, {0, 2}, {1, 1}, {2, 2}};

// Whether mode j runs again no more of either than mode i.
bool runs_no_more(size_t j, size_t i) {
  return kReruns[j].first <= kReruns[i].first && kReruns[j].second <= kReruns[i].second;
}

// The most stages per rank an interleaved schedule of the search has (the
// range --explain tries for Meta's layout).
constexpr int64_t kMaxStagesPerRank = 7;

// A positive integer, or 0 when `text` is not one.
int64_t positive(const std::string& text) {
  if (text.empty() || text.size() > 12) return 0;
  int64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return 0;
    v = 10 * v + (ch - '0');
  }
  return v;
}

// How much a checkpointing mode recomputes, in kCheckpointing's order.
int recompute_rank(const std::string& ac) {
  const auto at = std::find(std::begin(kCheckpointing), std::end(kCheckpointing), ac);
  return at == std::end(kCheckpointing) ? 2 : int(at - std::begin(kCheckpointing));
}

}  // namespace

uint64_t parse_bytes(const std::string& flag, const std::string& text) {
  size_t end = 0;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
    ++end;
  const std::string number = text.substr(0, end), unit = lower(text.substr(end));
  const std::vector<std::pair<std::string, double>> units = {
      {"", 1},      {"b", 1},
      {"kb", 1e3},  {"kib", 1024.0},
      {"mb", 1e6},  {"mib", 1 << 20},
      {"gb", 1e9},  {"gib", double(1 << 30)},
      {"tb", 1e12}, {"tib", 1024.0 * double(1 << 30)}};
  double scale = 0;
  for (const auto& [name, s] : units)
    if (unit == name) scale = s;
  const bool one_point = std::count(number.begin(), number.end(), '.') <= 1;
  const bool ok = scale > 0 && !number.empty() && number != "." && one_point &&
                  (unit != "" || number.find('.') == std::string::npos);
  SPMD_CHECK(ok, flag, " \"", text,
             "\" is not a size: give a number and a unit, 80GB (80 x 10^9 bytes) or 80GiB "
             "(80 x 2^30), MB, MiB, TB, TiB, or whole bytes alone");
  const double bytes = std::stod(number) * scale;
  SPMD_CHECK(bytes >= 1 && bytes < 1.8e19, flag, " \"", text,
             "\" must be at least 1 byte and less than 2^64");
  return uint64_t(std::llround(bytes));
}

std::string format_gb(uint64_t bytes) {
  char buf[32];
  if (bytes == 0) return "0";
  if (bytes >= 1000000000ull) {
    std::snprintf(buf, sizeof(buf), "%.1f GB", double(bytes) / 1e9);
  } else if (bytes >= 1000000ull) {
    std::snprintf(buf, sizeof(buf), "%.1f MB", double(bytes) / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f kB", double(bytes) / 1e3);
  }
  return buf;
}

Layout parse_layout(const std::string& text) {
  Layout l;
  std::stringstream in(text);
  std::string piece;
  while (std::getline(in, piece, ',')) {
    const size_t eq = piece.find('=');
    const std::string key = piece.substr(0, eq),
                      value = eq == piece.npos ? "" : piece.substr(eq + 1);
    SPMD_CHECK(eq != piece.npos, "--layout \"", text, "\": \"", piece, "\" is not key=value");
    if (key == "ac") {
      SPMD_CHECK(value == "none" || value == "full" || value == "op" || positive(value) > 0,
                 "--layout \"", text,
                 "\": ac must be none, full, op (selective, the products kept) or a positive "
                 "integer k (selective, every k-th block), got \"",
                 value, "\"");
      l.checkpointing = value;
      continue;
    }
    if (key == "schedule") {
      SPMD_CHECK(value == "gpipe" || value == "1f1b" || value == "interleaved" || value == "zbh1",
                 "--layout \"", text,
                 "\": schedule must be gpipe, 1f1b, interleaved or zbh1, got \"", value, "\"");
      l.schedule = value;
      continue;
    }
    int64_t* field = key == "dp_replicate"   ? &l.dp_replicate
                     : key == "dp_shard"     ? &l.dp_shard
                     : key == "tp"           ? &l.tp
                     : key == "pp"           ? &l.pp
                     : key == "cp"           ? &l.cp
                     : key == "ep"           ? &l.ep
                     : key == "microbatches" ? &l.microbatches
                     : key == "v"            ? &l.stages_per_rank
                                             : nullptr;
    SPMD_CHECK(field != nullptr, "--layout \"", text, "\": unknown key \"", key,
               "\" (keys: dp_replicate, dp_shard, tp, pp, cp, ep, microbatches, ac, schedule, v)");
    *field = positive(value);
    SPMD_CHECK(*field > 0, "--layout \"", text, "\": ", key, " must be a positive integer, got \"",
               value, "\"");
  }
  return l;
}

std::string describe(const Layout& l) {
  std::string out;
  const auto add = [&](const std::string& s) { out += (out.empty() ? "" : " · ") + s; };
  if (l.dp_replicate > 1) add(str_cat("dp_replicate ", l.dp_replicate));
  if (l.dp_shard > 1) add(str_cat("dp_shard ", l.dp_shard));
  if (l.cp > 1) add(str_cat("cp ", l.cp));
  if (l.ep > 1) add(str_cat("ep ", l.ep));
  if (l.tp > 1) add(str_cat("tp ", l.tp));
  if (l.pp > 1) {
    std::string schedule = l.schedule.empty() ? "" : " " + l.schedule;
    if (l.stages_per_rank > 1) schedule += str_cat(" x ", l.stages_per_rank);
    add(str_cat("pp ", l.pp, schedule));
  }
  if (out.empty()) add("1 device");
  const int64_t m = l.microbatches > 0 ? l.microbatches : l.pp;
  if (m > 1) add(str_cat(m, " microbatches"));
  const bool every_k = positive(l.checkpointing) > 0;
  add((every_k ? "ac every " : "ac ") + l.checkpointing);
  return out;
}

TrainConfig with_layout(const TrainConfig& config, const Layout& l) {
  TrainConfig c = config;
  ParallelConfig& p = c.parallel;
  p.dp_replicate = l.dp_replicate, p.dp_shard = l.dp_shard, p.tp = l.tp, p.pp = l.pp, p.cp = l.cp;
  p.ep = l.ep;
  p.sequence_parallel = l.tp > 1 && c.model.n_experts == 0;
  const int64_t m = l.microbatches > 0 ? l.microbatches : l.pp;
  p.pp_microbatches = l.pp > 1 ? m : 0;
  c.training.microbatches = l.pp > 1 ? 1 : m;
  if (!l.schedule.empty()) p.pp_schedule = l.schedule;
  if (l.stages_per_rank > 0) p.pp_stages_per_rank = l.stages_per_rank;
  if (p.pp == 1 && p.pp_schedule == "interleaved") p.pp_schedule = "1f1b", p.pp_stages_per_rank = 1;
  const bool selective = l.checkpointing != "none" && l.checkpointing != "full";
  c.training.activation_checkpointing = selective ? "selective" : l.checkpointing;
  if (selective) c.training.selective_ac_option = l.checkpointing;
  return c;
}

void check_planned_layout(const TrainConfig& config, int64_t devices) {
  SPMD_CHECK(devices >= 1 && devices <= (int64_t(1) << 30), "--devices must be in [1, 2^30], got ",
             devices);
  check_layout(config, int(devices));
  check_supported(config.parallel);
  const ParallelConfig& p = config.parallel;
  const int64_t m = p.pp_microbatches > 0 ? p.pp_microbatches : p.pp;
  SPMD_CHECK(p.pp == 1 || m >= p.pp, "parallel: pp_microbatches ", m,
             " is fewer than the pipeline's ", p.pp,
             " stages: each stage would idle for more "
             "of the step than it works (the bubble is (pp - 1) / (microbatches + pp - 1))");
}

Fit evaluate(const TrainConfig& config, const Layout& layout, int64_t devices) {
  return {layout, largest_plan(with_layout(config, layout), int(devices)), std::nullopt};
}

Fit evaluate(const TrainConfig& config, const Layout& layout, const Cluster& cluster) {
  Fit f = evaluate(config, layout, cluster.devices);
  if (cluster.timed()) f.time = step_time(with_layout(config, layout), f.plan, cluster);
  return f;
}

bool fits_before(const Fit& a, const Fit& b) {
  if (a.time && b.time && a.time->total != b.time->total) return a.time->total < b.time->total;
  const auto key = [](const Fit& f) {
    const Layout& l = f.layout;
    return std::make_tuple(l.tp * l.cp * l.pp, recompute_rank(l.checkpointing), l.microbatches,
                           f.plan.peak(), l.dp_replicate, l.ep);
  };
  return key(a) < key(b);
}

namespace {

// The fewest microbatches of `candidates` (ascending) with which the layout
// fits, by bisection: more microbatches never hold more (each is smaller,
// and a schedule holds no more of them); that count in `fewest`. Records
// the smallest need seen.
std::optional<Fit> fewest_that_fit(const TrainConfig& config, Layout l,
                                   const std::vector<int64_t>& candidates, const Cluster& cluster,
                                   Search& out, int64_t& fewest) {
  const auto try_m = [&](int64_t m) {
    l.microbatches = m;
    const Fit f = evaluate(config, l, cluster.devices);  // memory alone: timed once, below
    if (!out.smallest || f.plan.peak() < out.smallest->plan.peak()) out.smallest = f;
    return f;
  };
  Fit best = try_m(candidates.back());
  if (best.plan.peak() > cluster.device_memory) return std::nullopt;
  size_t lo = 0, hi = candidates.size() - 1;  // candidates[hi] fits
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    const Fit f = try_m(candidates[mid]);
    if (f.plan.peak() <= cluster.device_memory) {
      best = f, hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  fewest = best.layout.microbatches;
  if (!cluster.timed()) return best;
  // More microbatches than the fewest that fit hold less and may run faster
  // (a pipeline's bubble shrinks): the shortest step of them. Their
  // parameters, which size the collectives, are the same as `best`'s.
  const auto first = std::find(candidates.begin(), candidates.end(), best.layout.microbatches);
  Layout fastest = best.layout;
  double shortest = 0;
  for (auto m = first; m != candidates.end(); ++m) {
    l.microbatches = *m;
    const double t = step_time(with_layout(config, l), best.plan, cluster).total;
    if (m == first || t < shortest) shortest = t, fastest = l;
  }
  if (fastest == best.layout) {
    best.time = step_time(with_layout(config, fastest), best.plan, cluster);
    return best;
  }
  return evaluate(config, fastest, cluster);
}

// The layout's fit over the checkpointing modes, each with the microbatch
// counts the checks allow (fewest_that_fit). Untimed, the first that fits
// in order of what it recomputes (none; selective "op", no GEMM again;
// every 2nd block; full); timed, the fastest of those that fit, since
// recomputing may let fewer microbatches fit, and fewer may be faster. A
// mode that runs no less than an earlier one (kReruns) is no faster with
// as many microbatches, so it is tried only with fewer than the earlier
// one's fewest. `valid_any` is set when the checks allow any.
std::optional<Fit> best_checkpointing(const TrainConfig& config, Layout l, const Cluster& cluster,
                                      Search& out, bool& valid_any) {
  const int64_t dp = l.dp_replicate * l.dp_shard;
  const size_t modes = std::size(kCheckpointing);
  std::vector<int64_t> fewest(modes, 0);  // each mode's fewest microbatches that fit; 0: none
  std::optional<Fit> best;
  for (size_t i = 0; i < modes; ++i) {
    l.checkpointing = kCheckpointing[i];
    std::vector<int64_t> valid;  // microbatches the checks allow, fewest first
    for (int64_t m : divisors(config.training.global_batch / dp)) {
      l.microbatches = m;
      try {
        check_planned_layout(with_layout(config, l), cluster.devices);
        valid.push_back(m);
      } catch (const InvalidArgument&) {
      }
    }
    if (valid.empty()) return std::nullopt;
    valid_any = true;
    for (size_t j = 0; j < i && cluster.timed(); ++j)
      if (fewest[j] > 0 && runs_no_more(j, i))
        std::erase_if(valid, [&](int64_t m) { return m >= fewest[j]; });
    if (valid.empty()) continue;
    const std::optional<Fit> f = fewest_that_fit(config, l, valid, cluster, out, fewest[i]);
    if (!f) continue;
    if (!cluster.timed()) return f;
    if (!best || fits_before(*f, *best)) best = f;
  }
  return best;
}

// The schedules a pipeline of the search tries: the config's; on a timed
// cluster also ZB-H1 and interleaved 1F1B over v = 2 .. kMaxStagesPerRank
// stages per rank while pp x v stages have a block each, whose bubbles are
// smaller (1/v) and whose memory and sends are larger.
std::vector<std::pair<std::string, int64_t>> schedules(const TrainConfig& config,
                                                       const Cluster& cluster, int64_t pp) {
  std::vector<std::pair<std::string, int64_t>> out = {{"", 0}};
  if (pp == 1 || !cluster.timed()) return out;
  if (config.parallel.pp_schedule != "zbh1") out.push_back({"zbh1", 1});
  for (int64_t v = 2; v <= kMaxStagesPerRank && pp * v <= config.model.n_layers; ++v)
    if (config.parallel.pp_schedule != "interleaved" || config.parallel.pp_stages_per_rank != v)
      out.push_back({"interleaved", v});
  return out;
}

// The layout's best fit over the schedules (fits_before: on a timed cluster
// the fastest). Interleaved schedules are walked v = 2, 3, ... and left at
// the first v that does not fit or is no faster than v - 1: the bubble
// shrinks as 1/v and the pipeline's sends grow as v, so the step is taken
// to be convex in v (the split of the blocks and the microbatches chosen
// for each v can make it not quite so).
std::optional<Fit> best_schedule(const TrainConfig& config, Layout l, const Cluster& cluster,
                                 Search& out, bool& valid) {
  std::optional<Fit> best, previous;
  for (const auto& [schedule, v] : schedules(config, cluster, l.pp)) {
    l.schedule = schedule, l.stages_per_rank = v;
    const std::optional<Fit> f = best_checkpointing(config, l, cluster, out, valid);
    if (f && (!best || fits_before(*f, *best))) best = f;
    if (schedule != "interleaved") continue;
    if (v > 2 && (!f || !previous || !fits_before(*f, *previous))) break;
    previous = f;
  }
  return best;
}

// The ep values a layout of these data axes may take: 1, and for a model
// with experts each other divisor of n_experts that check_planned_layout
// allows (it divides the data ranks, and under FSDP dp_shard x cp).
std::vector<int64_t> ep_values(const TrainConfig& config, const Layout& l) {
  std::vector<int64_t> out = {1};
  const int64_t data = l.dp_replicate * l.dp_shard * l.cp;
  for (int64_t ep : divisors(config.model.n_experts)) {
    if (ep == 1 || data % ep != 0) continue;
    if (l.dp_shard > 1 && (l.dp_shard * l.cp) % ep != 0) continue;
    out.push_back(ep);
  }
  return out;
}

}  // namespace

Search search_layouts(const TrainConfig& config, const Cluster& cluster) {
  Search out;
  const int64_t n = cluster.devices;
  for (int64_t pp : divisors(n)) {
    if (pp > config.model.n_layers) continue;
    for (int64_t tp : divisors(n / pp)) {
      if (cluster.devices_per_node % tp != 0) continue;
      for (int64_t cp : divisors(n / pp / tp)) {
        for (int64_t dp_replicate : divisors(n / pp / tp / cp)) {
          Layout l{dp_replicate, n / pp / tp / cp / dp_replicate, tp, pp, cp, 1, "none"};
          if (config.training.global_batch % (l.dp_replicate * l.dp_shard) != 0) continue;
          for (int64_t ep : ep_values(config, l)) {
            l.ep = ep;
            bool valid = false;
            const std::optional<Fit> best = best_schedule(config, l, cluster, out, valid);
            out.layouts += valid;
            if (best) out.fits.push_back(*best);
          }
        }
      }
    }
  }
  std::sort(out.fits.begin(), out.fits.end(), fits_before);
  return out;
}

}  // namespace spmd::train
