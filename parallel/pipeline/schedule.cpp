// Pipeline schedules as data: the checker (the generators are in
// generators.cpp). simulate() first reads the lists without running them
// (every action in range, on the rank that owns its stage, exactly once,
// each backward after its own forward and each W after its B), then runs
// them in time steps: at each step every rank that is not busy and whose
// next action's input was finished by then starts it, and is busy for the
// action's cost; a step in which no rank is busy or can start is a
// deadlock. to_table() draws that run, one row per rank.
#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "runtime/error.h"

namespace spmd::dist::pp {
namespace {

Action forward(int stage, int microbatch) { return {Action::Type::kForward, stage, microbatch}; }
Action backward(int stage, int microbatch) { return {Action::Type::kBackward, stage, microbatch}; }

}  // namespace

namespace {

// Every (type, stage, microbatch) of a step as one flat index, for tables that
// say where an action sits or when it ran.
class ActionIndex {
 public:
  ActionIndex(int num_stages, int num_microbatches) : S_(num_stages), M_(num_microbatches) {}
  int size() const { return 3 * S_ * M_; }
  int operator()(const Action& a) const {
    return int(a.type) * S_ * M_ + a.stage * M_ + a.microbatch;
  }
  Action at(int i) const {
    const auto type = Action::Type(i / (S_ * M_));
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
  const int n = index.size() / 3;  // actions of one type
  bool split = false;              // any W: then every B has one
  for (int i = 2 * n; i < 3 * n; ++i) split = split || position[i] >= 0;
  for (int i = 0; i < (split ? 3 : 2) * n; ++i) {
    const Action a = index.at(i);
    if (position[i] < 0) {
      return str_cat(a.str(), " is missing (it belongs on rank ", a.stage % num_ranks, ")");
    }
  }
  for (int i = n; i < index.size(); ++i) {  // each backward after its forward, W after its B
    const Action later = index.at(i);
    if (position[i] < 0) continue;
    Action before = forward(later.stage, later.microbatch);
    if (later.type == Action::Type::kWeight) before = backward(later.stage, later.microbatch);
    if (position[i] < position[index(before)]) {
      return str_cat("rank ", later.stage % num_ranks, " runs ", later.str(), " (position ",
                     position[i], ") before its ",
                     later.type == Action::Type::kWeight ? "backward " : "forward ", before.str(),
                     " (position ", position[index(before)], ")");
    }
  }
  return "";
}

// One run of a schedule. The constructor checks the lists; run() steps the
// clock until every list is done or no rank can move.
class Simulator {
 public:
  Simulator(const Schedule& schedule, int num_stages, int num_microbatches, ActionCosts costs)
      : schedule_(schedule),
        num_stages_(num_stages),
        costs_(costs),
        index_(num_stages, num_microbatches),
        finished_(std::max(0, index_.size()), -1),
        next_(schedule.size(), 0),
        busy_until_(schedule.size(), 0),
        in_flight_(schedule.size(), 0),
        last_(schedule.size(), nullptr),
        cells_(schedule.size()) {
    result_.peak_in_flight.assign(schedule.size(), 0);
    result_.error = check_lists(schedule, num_stages, num_microbatches);
    if (costs.forward < 1 || costs.backward < 1 || costs.weight < 1)
      result_.error = str_cat("simulate: action costs must be >= 1, got F ", costs.forward, " B ",
                              costs.backward, " W ", costs.weight);
    for (const auto& list : schedule)
      for (const Action& a : list) split_ = split_ || a.type == Action::Type::kWeight;
  }

  void run() {
    if (!result_.error.empty()) return;
    int remaining = 0;
    int64_t busy = 0;
    for (const auto& list : schedule_) {
      remaining += int(list.size());
      for (const Action& a : list) busy += cost(a);
    }
    int t = 0;
    for (; remaining > 0; ++t) {
      const int moved = step(t);
      if (moved < 0) {
        result_.steps = t;
        result_.error = deadlock_message();
        return;
      }
      remaining -= moved;
    }
    for (int until : busy_until_) t = std::max(t, until);
    result_.steps = t;
    for (size_t r = 0; r < cells_.size(); ++r) {  // the last actions still running
      while (int(cells_[r].size()) < t)
        cells_[r].push_back(busy_until_[r] > int(cells_[r].size()) ? last_[r] : nullptr);
    }
    const double rank_steps = double(schedule_.size()) * result_.steps;
    result_.bubble = rank_steps > 0 ? (rank_steps - double(busy)) / rank_steps : 0.0;
    result_.ok = true;
  }

  const SimulationResult& result() const { return result_; }
  // cells()[r][t]: what rank r did at step t, nullptr when it was idle.
  const std::vector<std::vector<const Action*>>& cells() const { return cells_; }

 private:
  int cost(const Action& a) const {
    switch (a.type) {
      case Action::Type::kForward: return costs_.forward;
      case Action::Type::kBackward: return costs_.backward;
      default: return costs_.weight;
    }
  }

  // Step t: each free rank starts its next action if that action's input
  // was finished by t. Returns how many started, or -1 when none started
  // and none is busy (a deadlock).
  int step(int t) {
    int started = 0;
    bool any_busy = false;
    for (size_t r = 0; r < schedule_.size(); ++r) {
      if (busy_until_[r] > t) {  // still running what it started earlier
        any_busy = true;
        cells_[r].push_back(cells_[r].back());
        continue;
      }
      const Action* a = next_[r] < schedule_[r].size() ? &schedule_[r][next_[r]] : nullptr;
      if (a == nullptr || !arrived(*a, t)) {
        cells_[r].push_back(nullptr);
        continue;
      }
      finished_[index_(*a)] = t + cost(*a);
      busy_until_[r] = t + cost(*a);
      ++next_[r];
      if (a->type == Action::Type::kForward) ++in_flight_[r];
      if (a->type == (split_ ? Action::Type::kWeight : Action::Type::kBackward)) --in_flight_[r];
      result_.peak_in_flight[r] = std::max(result_.peak_in_flight[r], in_flight_[r]);
      cells_[r].push_back(a);
      last_[r] = a;
      ++started;
      any_busy = true;
    }
    return started == 0 && !any_busy ? -1 : started;
  }

  // An action's input has arrived when the action producing it finished by
  // step t. (A backward's own forward, and a W's own B, are on the same rank
  // and earlier in its list, which check_lists() made sure of.)
  bool arrived(const Action& a, int t) const {
    const std::optional<Action> input = input_of(a, num_stages_);
    if (!input) return true;
    const int when = finished_[index_(*input)];
    return when >= 0 && when <= t;
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
  ActionCosts costs_;
  ActionIndex index_;
  bool split_ = false;
  std::vector<int> finished_;  // per action: the step it finished by, -1 before
  std::vector<size_t> next_;   // per rank: the position of its next action
  std::vector<int> busy_until_;
  std::vector<int> in_flight_;
  std::vector<const Action*> last_;  // per rank: the action it started last
  std::vector<std::vector<const Action*>> cells_;
  SimulationResult result_;
};

}  // namespace

SimulationResult simulate(const Schedule& schedule, int num_stages, int num_microbatches,
                          ActionCosts costs) {
  Simulator sim(schedule, num_stages, num_microbatches, costs);
  sim.run();
  return sim.result();
}

double predicted_bubble(int num_ranks, int num_microbatches) {
  const int p = num_ranks, m = num_microbatches;
  return double(p - 1) / double(m + p - 1);
}

double predicted_bubble(ScheduleKind kind, int num_ranks, int num_microbatches,
                        int stages_per_rank) {
  const Schedule schedule = make_schedule(kind, num_ranks, num_microbatches, stages_per_rank);
  return simulate(schedule, num_ranks * stages_per_rank, num_microbatches, typical_costs(kind))
      .bubble;
}

std::string to_table(const Schedule& schedule, int num_stages, int num_microbatches,
                     ActionCosts costs) {
  Simulator sim(schedule, num_stages, num_microbatches, costs);
  sim.run();
  SPMD_CHECK(sim.result().ok, "to_table: the schedule does not run: ", sim.result().error);
  // With one stage per rank the row names the stage; otherwise each cell does.
  const bool one_stage_per_rank = num_stages == int(schedule.size());
  auto label = [&](const Action* a) -> std::string {
    if (a == nullptr) return ".";
    if (!one_stage_per_rank) return a->str();
    return a->str().substr(0, a->str().find('s'));  // "F3"
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
// stage's forward. The last stage's backward starts from its own forward, a
// W from its own B.
std::optional<Action> input_of(const Action& a, int num_stages) {
  if (a.type == Action::Type::kWeight) return backward(a.stage, a.microbatch);
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
