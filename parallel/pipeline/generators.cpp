// The schedule generators: GPipe, 1F1B, Megatron's interleaved 1F1B and the
// zero-bubble ZB-H1, each a function of (ranks, microbatches[, stages per
// rank]) that returns every rank's list. The checker is schedule.cpp.
#include <algorithm>
#include <deque>
#include <optional>

#include "parallel/pipeline/schedule.h"
#include "runtime/error.h"

namespace spmd::dist::pp {
namespace {

using Type = Action::Type;
Action forward(int stage, int microbatch) { return {Type::kForward, stage, microbatch}; }
Action backward(int stage, int microbatch) { return {Type::kBackward, stage, microbatch}; }
Action weight(int stage, int microbatch) { return {Type::kWeight, stage, microbatch}; }

// GPipe on rank r: every forward of stage r, then every backward, the last
// microbatch's first (its activations are the freshest).
std::vector<Action> gpipe_rank(int rank, int m) {
  std::vector<Action> list;
  for (int i = 0; i < m; ++i) list.push_back(forward(rank, i));
  for (int i = m - 1; i >= 0; --i) list.push_back(backward(rank, i));
  return list;
}

// 1F1B on rank r of p: p - r - 1 forwards fill the pipe below it, then one
// forward and one backward in turn (so at most p - r microbatches are held),
// then the backwards still owed.
std::vector<Action> one_f_one_b_rank(int rank, int p, int m) {
  const int warmup = std::min(p - rank - 1, m);
  std::vector<Action> list;
  int f = 0, b = 0;  // the next microbatch to forward, to backward
  while (f < warmup) list.push_back(forward(rank, f++));
  while (f < m) {
    list.push_back(forward(rank, f++));
    list.push_back(backward(rank, b++));
  }
  while (b < m) list.push_back(backward(rank, b++));
  return list;
}

// Interleaved 1F1B on rank r (Megatron-LM's schedule): the rank holds the v
// stages r, r + p, ..., r + (v-1)p (its "model chunks"), and runs m v
// forwards and as many backwards. Its k-th forward is of chunk (k / p) % v
// and microbatch (k / pv) p + k % p: p microbatches through chunk 0, the
// same p through chunk 1, ..., then the next p; backwards take the chunks
// in the reverse order. A warm-up of 2(p - r - 1) + (v - 1)p forwards (all
// of them when fewer), then one forward and one backward in turn, then the
// backwards left. The groups of p are why m must be a multiple of p: a
// microbatch leaving rank p-1's chunk c must find rank 0 about to run chunk
// c + 1 of that same group.
std::vector<Action> interleaved_rank(int rank, int p, int m, int v) {
  const int total = m * v;
  auto stage_of = [&](int k, bool reverse) {
    const int chunk = (k / p) % v;
    return (reverse ? v - 1 - chunk : chunk) * p + rank;
  };
  auto microbatch_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto f = [&](int k) { return forward(stage_of(k, false), microbatch_of(k)); };
  auto b = [&](int k) { return backward(stage_of(k, true), microbatch_of(k)); };
  const int warmup = std::min(2 * (p - rank - 1) + (v - 1) * p, total);
  std::vector<Action> list;
  for (int k = 0; k < warmup; ++k) list.push_back(f(k));
  for (int k = 0; k < total - warmup; ++k) {
    list.push_back(f(warmup + k));
    list.push_back(b(k));
  }
  for (int k = total - warmup; k < total; ++k) list.push_back(b(k));
  return list;
}

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"): every rank runs
// 1F1B's forwards and backwards in 1F1B's order, each backward now only the
// input gradient B, and places the weight passes W in time: played out in
// unit time (F = B = W = 1 step), a rank runs a pending W, oldest first,
// whenever its next F or B cannot run, because its input has not arrived
// or because a forward would hold more than p microbatches not yet W'd
// (1F1B's memory). The W's so fill the steps 1F1B leaves idle, and the
// bubble falls from (p - 1) / (m + p - 1) to (p - 1) / (3m + p - 1) once
// m >= p.
Schedule zero_bubble_h1(int p, int m) {
  std::vector<std::vector<Action>> order(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) order[size_t(r)] = one_f_one_b_rank(r, p, m);
  // finish[type][stage][mb]: the step after the action ran, -1 before.
  std::vector<std::vector<int>> f_done(size_t(p), std::vector<int>(size_t(m), -1));
  std::vector<std::vector<int>> b_done = f_done;
  auto ready = [&](const Action& a, int t) {
    int when = 0;
    if (a.type == Type::kForward) {
      when = a.stage == 0 ? 0 : f_done[size_t(a.stage - 1)][size_t(a.microbatch)];
    } else {
      when = a.stage == p - 1 ? f_done[size_t(a.stage)][size_t(a.microbatch)]
                              : b_done[size_t(a.stage + 1)][size_t(a.microbatch)];
    }
    return when >= 0 && when <= t;
  };
  Schedule schedule(static_cast<size_t>(p));
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<std::deque<int>> pending(static_cast<size_t>(p));  // B done, W not yet
  std::vector<int> held(static_cast<size_t>(p), 0);             // forwarded, not yet W'd
  size_t left = size_t(3 * p * m);
  for (int t = 0; left > 0; ++t) {
    std::vector<std::pair<int, Action>> ran;
    for (int r = 0; r < p; ++r) {
      std::vector<Action>& list = order[size_t(r)];
      std::optional<Action> a;
      if (next[size_t(r)] < list.size()) {
        const Action& n = list[next[size_t(r)]];
        if (ready(n, t) && (n.type == Type::kBackward || held[size_t(r)] < p)) a = n;
      }
      if (a) {
        ++next[size_t(r)];
        if (a->type == Type::kForward) ++held[size_t(r)];
        if (a->type == Type::kBackward) pending[size_t(r)].push_back(a->microbatch);
      } else if (!pending[size_t(r)].empty()) {
        a = weight(r, pending[size_t(r)].front());
        pending[size_t(r)].pop_front();
        --held[size_t(r)];
      }
      if (a) ran.emplace_back(r, *a);
    }
    SPMD_CHECK(!ran.empty(), "zero_bubble_h1: no rank could move at step ", t);  // cannot happen
    for (const auto& [r, a] : ran) {  // seen by the others from step t + 1 on
      if (a.type == Type::kForward) f_done[size_t(a.stage)][size_t(a.microbatch)] = t + 1;
      if (a.type == Type::kBackward) b_done[size_t(a.stage)][size_t(a.microbatch)] = t + 1;
      schedule[size_t(r)].push_back(a);
      --left;
    }
  }
  return schedule;
}

}  // namespace

std::string Action::str() const {
  const char* letter = type == Type::kForward ? "F" : type == Type::kBackward ? "B" : "W";
  return str_cat(letter, microbatch, "s", stage);
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "interleaved") return ScheduleKind::kInterleaved1F1B;
  if (name == "zbh1") return ScheduleKind::kZeroBubbleH1;
  SPMD_THROW(InvalidArgument, "parse_schedule: unknown schedule \"", name,
             "\"; the known ones are gpipe, 1f1b, interleaved, zbh1");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kInterleaved1F1B: return "interleaved";
    case ScheduleKind::kZeroBubbleH1: return "zbh1";
  }
  return "?";
}

bool splits_backward(ScheduleKind kind) { return kind == ScheduleKind::kZeroBubbleH1; }

ActionCosts typical_costs(ScheduleKind kind) {
  return splits_backward(kind) ? ActionCosts{1, 1, 1} : ActionCosts{1, 2, 1};
}

Schedule make_schedule(ScheduleKind kind, int num_ranks, int num_microbatches,
                       int stages_per_rank) {
  const char* name = schedule_name(kind);
  const int p = num_ranks, m = num_microbatches, v = stages_per_rank;
  SPMD_CHECK(p >= 1, "make_schedule(", name, "): num_ranks must be >= 1, got ", p);
  SPMD_CHECK(m >= 1, "make_schedule(", name, "): num_microbatches must be >= 1, got ", m);
  if (kind == ScheduleKind::kInterleaved1F1B) {
    SPMD_CHECK(v >= 2, "make_schedule(interleaved): ", v, " stage(s) per rank; interleaving ",
               "needs at least 2 (with 1 it is 1f1b)");
    SPMD_CHECK(m % p == 0, "make_schedule(interleaved): ", m, " microbatches is not a multiple ",
               "of the ", p, " ranks; the interleaved schedule sends microbatches round the ranks ",
               "in groups of p (use ", p, ", ", 2 * p, ", ", 3 * p, ", ...)");
  } else {
    SPMD_CHECK(v == 1, "make_schedule(", name, "): runs one stage per rank, not ", v,
               " (interleaved runs several)");
  }
  if (kind == ScheduleKind::kZeroBubbleH1) return zero_bubble_h1(p, m);
  Schedule schedule(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    switch (kind) {
      case ScheduleKind::kGPipe: schedule[size_t(r)] = gpipe_rank(r, m); break;
      case ScheduleKind::k1F1B: schedule[size_t(r)] = one_f_one_b_rank(r, p, m); break;
      default: schedule[size_t(r)] = interleaved_rank(r, p, m, v); break;
    }
  }
  return schedule;
}

}  // namespace spmd::dist::pp
