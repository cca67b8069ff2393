// Pipeline schedules as data: the two generators (GPipe, 1F1B), then the
// checker. simulate() first reads the lists without running them (every action
// in range, on the rank that owns its stage, exactly once, each backward after
// its own forward), then runs them in unit time: at each step every rank whose
// next action's input arrived in an earlier step executes it; a step in which
// no rank can move is a deadlock. to_table() draws that run, one row per rank.
// Not here: interleaved (virtual-stage) generators, zero-bubble splits of the
// backward, and unequal forward and backward costs.
#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "runtime/error.h"

namespace spmd::dist::pp {
namespace {

Action forward(int stage, int microbatch) { return {Action::Type::kForward, stage, microbatch}; }
Action backward(int stage, int microbatch) { return {Action::Type::kBackward, stage, microbatch}; }

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

}  // namespace

std::string Action::str() const {
  return str_cat(type == Type::kForward ? "F" : "B", microbatch, "s", stage);
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  SPMD_THROW(InvalidArgument, "parse_schedule: unknown schedule \"", name,
             "\"; the known ones are gpipe, 1f1b");
}

const char* schedule_name(ScheduleKind kind) {
  return kind == ScheduleKind::kGPipe ? "gpipe" : "1f1b";
}

Schedule make_schedule(ScheduleKind kind, int num_ranks, int num_microbatches) {
  SPMD_CHECK(num_ranks >= 1, "make_schedule(", schedule_name(kind),
             "): num_ranks must be >= 1, got ", num_ranks);
  SPMD_CHECK(num_microbatches >= 1, "make_schedule(", schedule_name(kind),
             "): num_microbatches must be >= 1, got ", num_microbatches);
  Schedule schedule(num_ranks);
  for (int r = 0; r < num_ranks; ++r) {
    schedule[r] = kind == ScheduleKind::kGPipe ? gpipe_rank(r, num_microbatches)
                                               : one_f_one_b_rank(r, num_ranks, num_microbatches);
  }
  return schedule;
}

namespace {

// Every (type, stage, microbatch) of a step as one flat index, for tables that
// say where an action sits or when it ran.
class ActionIndex {
 public:
  ActionIndex(int num_stages, int num_microbatches) : S_(num_stages), M_(num_microbatches) {}
  int size() const { return 2 * S_ * M_; }
  int operator()(const Action& a) const {
    return (a.type == Action::Type::kForward ? 0 : S_ * M_) + a.stage * M_ + a.microbatch;
  }
  Action at(int i) const {
    const Action::Type type = i < S_ * M_ ? Action::Type::kForward : Action::Type::kBackward;
    i %= S_ * M_;
    return {type, i / M_, i % M_};
  }

 private:
  int S_, M_;
};

std::optional<Action> input_of(const Action& a, int num_stages);
std::string rank_label(int rank, int num_ranks);

// The static rules, in order: arguments, each action in range, on its
// owner's rank and not repeated; none missing; each backward after its
// forward. Returns the first one broken, or "" when all hold.
std::string check_lists(const Schedule& schedule, int num_stages, int m) {
  const int num_ranks = int(schedule.size());
  if (num_ranks < 1) return "simulate: the schedule has no ranks";
  if (num_stages < 1) return str_cat("simulate: num_stages must be >= 1, got ", num_stages);
  if (m < 1) return str_cat("simulate: num_microbatches must be >= 1, got ", m);
  const ActionIndex index(num_stages, m);
  std::vector<int> position(index.size(), -1);  // per action: where it sits in its rank's list
  for (int r = 0; r < num_ranks; ++r) {
    for (int k = 0; k < int(schedule[r].size()); ++k) {
      const Action& a = schedule[r][k];
      if (a.stage < 0 || a.stage >= num_stages || a.microbatch < 0 || a.microbatch >= m) {
        return str_cat("rank ", r, " holds ", a.str(), ", out of range: stages are 0..",
                       num_stages - 1, ", microbatches 0..", m - 1);
      }
      if (a.stage % num_ranks != r) {
        return str_cat("rank ", r, " holds ", a.str(), ", but stage ", a.stage, " lives on rank ",
                       a.stage % num_ranks);
      }
      if (position[index(a)] >= 0) return str_cat("rank ", r, " holds ", a.str(), " twice");
      position[index(a)] = k;
    }
  }
  for (int i = 0; i < index.size(); ++i) {
    const Action a = index.at(i);
    if (position[i] < 0) {
      return str_cat(a.str(), " is missing (it belongs on rank ", a.stage % num_ranks, ")");
    }
  }
  for (int i = index.size() / 2; i < index.size(); ++i) {  // the backwards
    const Action b = index.at(i), f = forward(b.stage, b.microbatch);
    if (position[i] < position[index(f)]) {
      return str_cat("rank ", b.stage % num_ranks, " runs ", b.str(), " (position ", position[i],
                     ") before its forward ", f.str(), " (position ", position[index(f)], ")");
    }
  }
  return "";
}

// One run of a schedule in unit time. The constructor checks the lists; run()
// steps the clock until every list is done or no rank can move.
class Simulator {
 public:
  Simulator(const Schedule& schedule, int num_stages, int num_microbatches)
      : schedule_(schedule),
        num_stages_(num_stages),
        index_(num_stages, num_microbatches),
        finished_(std::max(0, index_.size()), -1),
        next_(schedule.size(), 0),
        in_flight_(schedule.size(), 0),
        cells_(schedule.size()) {
    result_.peak_in_flight.assign(schedule.size(), 0);
    result_.error = check_lists(schedule, num_stages, num_microbatches);
  }

  void run() {
    if (!result_.error.empty()) return;
    int remaining = 0;
    for (const auto& list : schedule_) remaining += int(list.size());
    for (int t = 0; remaining > 0; ++t) {
      const int moved = step(t);
      if (moved == 0) {
        result_.steps = t;
        result_.error = deadlock_message();
        return;
      }
      remaining -= moved;
      result_.steps = t + 1;
    }
    const int ranks = int(schedule_.size()), busy = index_.size();
    const double rank_steps = double(ranks) * result_.steps;
    result_.bubble = rank_steps > 0 ? (rank_steps - busy) / rank_steps : 0.0;
    result_.ok = true;
  }

  const SimulationResult& result() const { return result_; }
  // cells()[r][t]: what rank r did at step t, nullptr when it was idle.
  const std::vector<std::vector<const Action*>>& cells() const { return cells_; }

 private:
  // Step t: each rank runs its next action if that action's input arrived
  // before t. Returns how many ranks moved.
  int step(int t) {
    int moved = 0;
    for (size_t r = 0; r < schedule_.size(); ++r) {
      const Action* a = next_[r] < schedule_[r].size() ? &schedule_[r][next_[r]] : nullptr;
      if (a == nullptr || !arrived(*a, t)) {
        cells_[r].push_back(nullptr);
        continue;
      }
      finished_[index_(*a)] = t;
      ++next_[r];
      in_flight_[r] += a->type == Action::Type::kForward ? 1 : -1;
      result_.peak_in_flight[r] = std::max(result_.peak_in_flight[r], in_flight_[r]);
      cells_[r].push_back(a);
      ++moved;
    }
    return moved;
  }

  // An action's input has arrived when the action producing it ran before
  // step t. (A backward's own forward is on the same rank and earlier in its
  // list, which check_lists() made sure of.)
  bool arrived(const Action& a, int t) const {
    const std::optional<Action> input = input_of(a, num_stages_);
    if (!input) return true;
    const int when = finished_[index_(*input)];
    return when >= 0 && when < t;
  }

  std::string deadlock_message() const {
    const int num_ranks = int(schedule_.size());
    std::ostringstream os;
    os << "deadlock:";
    const char* sep = " ";
    for (int r = 0; r < num_ranks; ++r) {
      if (next_[r] == schedule_[r].size()) continue;
      const Action& a = schedule_[r][next_[r]];
      const Action input = *input_of(a, num_stages_);  // a rank that waits waits for an input
      os << sep << "rank " << r << " waits at " << a.str() << " for " << input.str()
         << " from rank " << input.stage % num_ranks;
      sep = "; ";
    }
    return os.str();
  }

  const Schedule& schedule_;
  int num_stages_;
  ActionIndex index_;
  std::vector<int> finished_;  // per action: the step it ran in, -1 before
  std::vector<size_t> next_;   // per rank: the position of its next action
  std::vector<int> in_flight_;
  std::vector<std::vector<const Action*>> cells_;
  SimulationResult result_;
};

}  // namespace

SimulationResult simulate(const Schedule& schedule, int num_stages, int num_microbatches) {
  Simulator sim(schedule, num_stages, num_microbatches);
  sim.run();
  return sim.result();
}

double predicted_bubble(int num_ranks, int num_microbatches) {
  const int p = num_ranks, m = num_microbatches;
  return double(p - 1) / double(m + p - 1);
}

std::string to_table(const Schedule& schedule, int num_stages, int num_microbatches) {
  Simulator sim(schedule, num_stages, num_microbatches);
  sim.run();
  SPMD_CHECK(sim.result().ok, "to_table: the schedule does not run: ", sim.result().error);
  // With one stage per rank the row names the stage; otherwise each cell does.
  const bool one_stage_per_rank = num_stages == int(schedule.size());
  auto label = [&](const Action* a) -> std::string {
    if (a == nullptr) return ".";
    if (!one_stage_per_rank) return a->str();
    return str_cat(a->type == Action::Type::kForward ? "F" : "B", a->microbatch);
  };
  size_t width = 1;
  for (const auto& row : sim.cells()) {
    for (const Action* a : row) width = std::max(width, label(a).size());
  }
  std::string table;
  for (size_t r = 0; r < schedule.size(); ++r) {
    std::string line = rank_label(int(r), int(schedule.size()));
    for (const Action* a : sim.cells()[r]) {
      const std::string cell = label(a);
      line += " " + cell + std::string(width - cell.size(), ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);  // no padding after the last cell
    table += line + "\n";
  }
  return table;
}

namespace {

// The action whose output `a` receives: the previous stage's forward for a
// forward, the next stage's backward for a backward; none for the first
// stage's forward. The last stage's backward starts from its own forward.
std::optional<Action> input_of(const Action& a, int num_stages) {
  if (a.type == Action::Type::kForward) {
    if (a.stage == 0) return std::nullopt;
    return forward(a.stage - 1, a.microbatch);
  }
  if (a.stage == num_stages - 1) return forward(a.stage, a.microbatch);
  return backward(a.stage + 1, a.microbatch);
}

// "rank 3:", padded so that every row's cells start in the same column.
std::string rank_label(int rank, int num_ranks) {
  const std::string last = std::to_string(num_ranks - 1), own = std::to_string(rank);
  return "rank " + std::string(last.size() - own.size(), ' ') + own + ":";
}

}  // namespace
}  // namespace spmd::dist::pp
