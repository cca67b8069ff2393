// ProcessGroup, shared by every backend: the collectives' argument checks and
// sequence numbers, the accounting, the recording of each operation (flight
// recorder, desync ledger) and subgroups. Bad arguments throw here, at the
// call, naming the op and the values; what only the peers can know (their
// sizes) is checked on the wire by the backend. Sends and receives are in
// point_to_point.cpp, gather, scatter and all_to_allv in block_collectives.cpp.
#include "parallel/comm/process_group.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "parallel/comm/arg_checks.h"
#include "parallel/comm/comm_trace.h"
#include "parallel/comm/desync_check.h"
#include "parallel/comm/flight_recorder.h"
#include "runtime/error.h"

namespace spmd::dist {

using detail::check_pair;
using detail::check_reduce_op;
using detail::check_tensor;
using detail::mark_written;
using detail::overlap;

namespace {

// all_to_all split sizes (rows of dim 0) as element counts per rank.
std::vector<size_t> split_counts(const Tensor& t, const std::vector<int64_t>& splits, int size,
                                 const char* what) {
  SPMD_CHECK(t.ndim() >= 1, "all_to_all: the ", what, " tensor must have at least one dim");
  const int64_t rows = t.size(0);
  const int64_t row_elems = rows > 0 ? t.numel() / rows : 0;
  std::vector<size_t> counts(size);
  if (splits.empty()) {
    SPMD_CHECK(rows % size == 0, "all_to_all: the ", what, " tensor's dim 0 (", rows,
               ") is not divisible by the group size ", size, "; pass split sizes");
    for (auto& c : counts) c = size_t(rows / size * row_elems);
    return counts;
  }
  SPMD_CHECK(int(splits.size()) == size, "all_to_all: ", splits.size(), " ", what,
             " split sizes for a group of ", size);
  int64_t total = 0;
  for (int i = 0; i < size; ++i) {
    SPMD_CHECK(splits[i] >= 0, "all_to_all: negative ", what, " split size ", splits[i]);
    counts[i] = size_t(splits[i] * row_elems);
    total += splits[i];
  }
  SPMD_CHECK(total == rows, "all_to_all: the ", what, " split sizes add up to ", total,
             " but the tensor's dim 0 is ", rows);
  return counts;
}

// Ends an operation's flight-recorder entry and counts a successful
// collective in the ledger's progress (a failed one stays where it stood).
// The id is a collective's sequence number with kCollective set, else (a
// send or receive) the recorder's id.
class Recording final : public Work::Observer {
 public:
  static constexpr uint64_t kCollective = uint64_t(1) << 63;

  Recording(std::shared_ptr<FlightRecorder> recorder, std::shared_ptr<DesyncCheck> desync)
      : recorder_(std::move(recorder)), desync_(std::move(desync)) {}
  void ended(uint64_t id, bool ok) const noexcept override {
    if (!(id & kCollective)) {
      if (recorder_) recorder_->ended(id, ok);
      return;
    }
    if (recorder_) recorder_->ended_collective(id & ~kCollective, ok);
    if (desync_ && ok) desync_->completed(id & ~kCollective);
  }

 private:
  std::shared_ptr<FlightRecorder> recorder_;
  std::shared_ptr<DesyncCheck> desync_;
};

}  // namespace

ProcessGroup::ProcessGroup(std::shared_ptr<Store> store, int rank, int size, GroupOptions options)
    : store_(std::move(store)), rank_(rank), size_(size), options_(std::move(options)) {
  SPMD_CHECK(store_ != nullptr, "ProcessGroup: no store");
  SPMD_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "ProcessGroup: rank ", rank_,
             " is not in [0, ", size_, ")");
  SPMD_CHECK(options_.global_ranks.empty() || int(options_.global_ranks.size()) == size_,
             "ProcessGroup: ", options_.global_ranks.size(), " global ranks for ", size_, " ranks");
  SPMD_CHECK(options_.timeout.count() > 0, "ProcessGroup: the timeout must be positive");
  if (DesyncCheck::enabled_by_env()) {
    desync_ =
        std::make_shared<DesyncCheck>(store_, key(""), name(), rank_, size_, options_.global_ranks);
  }
  if (FlightRecorder::enabled_by_env()) {
    recorder_ = std::make_shared<FlightRecorder>(FlightRecorder::capacity_from_env());
    FlightRecorder::arm(global_rank(rank_));
  }
  if (recorder_ || desync_) recording_ = std::make_shared<Recording>(recorder_, desync_);
}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::global_rank(int r) const {
  return options_.global_ranks.empty() ? r : options_.global_ranks[r];
}

std::string ProcessGroup::rank_name(int r) const {
  return global_rank(r) == r ? str_cat("rank ", r)
                             : str_cat("rank ", r, " (global rank ", global_rank(r), ")");
}

// --- Accounting ---------------------------------------------------------------------

uint64_t CommStats::total_bytes() const {
  uint64_t total = 0;
  for (const Count& c : by_op) total += c.bytes;
  return total;
}

void ProcessGroup::count(OpType type, const Tensor& payload) {
  count(type, payload.defined() ? payload.nbytes() : 0);
}

void ProcessGroup::count(OpType type, uint64_t payload_bytes) {
  constexpr size_t kOpTypes = size_t(OpType::kAllToAllv) + 1;  // the largest in types.h, + 1
  static_assert(sizeof(counts_) / sizeof(counts_[0]) >= kOpTypes &&
                    sizeof(CommStats::by_op) / sizeof(CommStats::Count) >= kOpTypes,
                "a count per OpType");
  AtomicCount& c = counts_[size_t(type)];
  c.calls.fetch_add(1, std::memory_order_relaxed);
  c.bytes.fetch_add(payload_bytes, std::memory_order_relaxed);
}

CommStats ProcessGroup::stats() const {
  CommStats s;
  for (size_t i = 0; i < 16; ++i) {
    s.by_op[i].calls = counts_[i].calls.load(std::memory_order_relaxed);
    s.by_op[i].bytes = counts_[i].bytes.load(std::memory_order_relaxed);
    s.by_op[i].wait_ns = counts_[i].wait_ns.load(std::memory_order_relaxed);
  }
  return s;
}

void ProcessGroup::reset_stats() {
  for (AtomicCount& c : counts_) c.calls = 0, c.bytes = 0, c.wait_ns = 0;
}

void ProcessGroup::wait(const Work& work, OpType op) {
  const auto start = std::chrono::steady_clock::now();
  auto add = [&] {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - start);
    counts_[size_t(op)].wait_ns.fetch_add(uint64_t(ns.count()), std::memory_order_relaxed);
  };
  try {
    work.wait();
  } catch (...) {
    add();
    throw;
  }
  add();
}

// --- The collectives ---------------------------------------------------------------

CommOp ProcessGroup::collective(OpType type, std::string_view op_name) {
  CommOp op;
  op.type = type;
  op.seq = next_seq_++;
  // str_cat's stream would cost about a microsecond here, on every call.
  const std::string seq = std::to_string(op.seq);
  std::string& d = op.description;
  d.reserve(op_name.size() + seq.size() + name().size() + 12);
  d.append(op_name).append(" #").append(seq).append(" in group ").append(name());
  return op;
}

Work ProcessGroup::issue(CommOp op) {
  const bool p2p = op.type == OpType::kSend || op.type == OpType::kRecv;
  const bool ledger = desync_ && !p2p;
  if (ledger) desync_->record(op, call_site_);
  const CommSpan span(op, name());  // SPMD_TRACE: the op from issue to completion
  if (!recorder_ && !ledger) return span.end_with(launch(std::move(op)));
  if (recorder_) op.issued_at = std::chrono::steady_clock::now();
  const uint64_t recorder_id = recorder_ ? recorder_->issued(op) : 0;
  const uint64_t id = p2p ? recorder_id : op.seq | Recording::kCollective;  // Recording's ids
  Work work = launch(std::move(op));
  span.end_with(work);
  work.set_observer(recording_, id);
  return work;
}

Work ProcessGroup::broadcast(const Tensor& t, int root) {
  check_tensor(t, "broadcast", "");
  SPMD_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of group ",
             name(), " (size ", size_, ")");
  CommOp op = collective(OpType::kBroadcast, "broadcast");
  op.tensor = t;
  mark_written(t);
  op.root = root;
  count(OpType::kBroadcast, t);
  return issue(std::move(op));
}

Work ProcessGroup::all_reduce(const Tensor& t, ReduceOp reduce_op) {
  check_tensor(t, "all_reduce", "");
  check_reduce_op(reduce_op, t.dtype(), "all_reduce");
  CommOp op = collective(OpType::kAllReduce, "all_reduce");
  op.tensor = t;
  mark_written(t);
  op.reduce_op = reduce_op;
  count(OpType::kAllReduce, t);
  return issue(std::move(op));
}

Work ProcessGroup::reduce(const Tensor& t, int root, ReduceOp reduce_op) {
  check_tensor(t, "reduce", "");
  check_reduce_op(reduce_op, t.dtype(), "reduce");
  SPMD_CHECK(root >= 0 && root < size_, "reduce: root ", root, " is not a rank of group ", name(),
             " (size ", size_, ")");
  CommOp op = collective(OpType::kReduce, "reduce");
  op.tensor = t;
  mark_written(t);
  op.root = root;
  op.reduce_op = reduce_op;
  count(OpType::kReduce, t);
  return issue(std::move(op));
}

Work ProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  check_pair(output, input, "all_gather");
  SPMD_CHECK(output.numel() == size_ * input.numel(), "all_gather: output has ", output.numel(),
             " elements but the group of ", size_, " ranks gathers ", size_, " x ", input.numel());
  SPMD_CHECK(!overlap(output, input) || detail::is_block(output, input, rank_),
             "all_gather: the input overlaps the output other than as this rank's block");
  CommOp op = collective(OpType::kAllGather, "all_gather");
  op.tensor = output;
  mark_written(output);
  op.input = input;
  count(OpType::kAllGather, output);
  return issue(std::move(op));
}

Work ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp reduce_op) {
  check_pair(output, input, "reduce_scatter");
  check_reduce_op(reduce_op, input.dtype(), "reduce_scatter");
  SPMD_CHECK(input.numel() == size_ * output.numel(), "reduce_scatter: input has ", input.numel(),
             " elements, which is not the group size ", size_, " x output's ", output.numel());
  SPMD_CHECK(!overlap(output, input) || detail::is_block(input, output, rank_),
             "reduce_scatter: the output overlaps the input other than as this rank's segment");
  CommOp op = collective(OpType::kReduceScatter, "reduce_scatter");
  op.tensor = output;
  mark_written(output);
  op.input = input;
  op.reduce_op = reduce_op;
  count(OpType::kReduceScatter, input);
  return issue(std::move(op));
}

Work ProcessGroup::all_to_all(const Tensor& output, const Tensor& input,
                              const std::vector<int64_t>& output_split_sizes,
                              const std::vector<int64_t>& input_split_sizes) {
  check_pair(output, input, "all_to_all");
  SPMD_CHECK(!overlap(output, input), "all_to_all: the output overlaps the input");
  std::vector<size_t> send = split_counts(input, input_split_sizes, size_, "input");
  std::vector<size_t> recv = split_counts(output, output_split_sizes, size_, "output");
  SPMD_CHECK(send[rank_] == recv[rank_], "all_to_all: this rank keeps ", send[rank_],
             " of its own elements but expects ", recv[rank_], " from itself");
  CommOp op = collective(OpType::kAllToAll, "all_to_all");
  op.tensor = output;
  mark_written(output);
  op.input = input;
  op.send_offsets = detail::back_to_back(send);
  op.recv_offsets = detail::back_to_back(recv);
  op.send_counts = std::move(send);
  op.recv_counts = std::move(recv);
  count(OpType::kAllToAll, input);
  return issue(std::move(op));
}

Work ProcessGroup::barrier() {
  count(OpType::kBarrier, Tensor());
  return issue(collective(OpType::kBarrier, "barrier"));
}

// --- Diagnosis (desync_check.h) -----------------------------------------------------

std::string ProcessGroup::desync_report(uint64_t seq) {
  if (!desync_) return "";
  const auto grace =
      std::clamp(timeout() / 8, std::chrono::milliseconds(50), std::chrono::milliseconds(2000));
  const std::string line = desync_->diagnose(seq, grace);
  return line.empty() ? "" : "; " + line;
}

void ProcessGroup::note_failure() {
  if (desync_) desync_->publish_final();
}

void ProcessGroup::note_waiting(uint64_t seq, std::vector<PeerWait> waiting) {
  if (desync_) desync_->note_waiting(seq, std::move(waiting));
}

std::string ProcessGroup::dump_flight_record(int64_t failed_seq, const std::string& reason) {
  if (!recorder_) return "";
  return recorder_->dump(global_rank(rank_), name(), rank_, size_, reason, failed_seq);
}

// --- Subgroups -------------------------------------------------------------------

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  SPMD_CHECK(!ranks.empty(), "new_group: no ranks");
  SPMD_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(),
             "new_group: a rank is listed twice");
  SPMD_CHECK(ranks.front() >= 0 && ranks.back() < size_, "new_group: ranks must be in [0, ", size_,
             ") of group ", name());
  const uint64_t k = next_subgroup_++;  // counted on every rank, member or not
  if (!std::binary_search(ranks.begin(), ranks.end(), rank_)) return nullptr;
  return make_subgroup(ranks, str_cat("group", k));
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key) {
  // Every rank posts (color, key) in the store and reads everyone's.
  const uint64_t k = next_subgroup_++;
  const std::string prefix = this->key(str_cat("split", k, "/"));
  store().set(prefix + std::to_string(rank_), str_cat(color, " ", key));
  std::vector<std::tuple<int, int, int>> same;  // (key, rank, color)
  for (int r = 0; r < size_; ++r) {
    const Bytes entry = store().get(prefix + std::to_string(r), timeout());
    std::istringstream in(std::string(entry.begin(), entry.end()));
    int c = 0, kk = 0;
    in >> c >> kk;
    if (c == color) same.emplace_back(kk, r, c);
  }
  if (color < 0) return nullptr;
  std::sort(same.begin(), same.end());
  std::vector<int> members;
  for (auto& [kk, r, c] : same) members.push_back(r);
  return make_subgroup(members, str_cat("split", k, ".", color));
}

std::shared_ptr<ProcessGroup> ProcessGroup::split_known(int color,
                                                        const std::vector<int>& members) {
  const uint64_t k = next_subgroup_++;  // as split() counts it
  SPMD_CHECK(color >= 0, "split_known: color ", color, " must be at least 0");
  SPMD_CHECK(std::find(members.begin(), members.end(), rank_) != members.end(),
             "split_known: rank ", rank_, " of group ", name(), " is not among its members");
  for (int r : members)
    SPMD_CHECK(r >= 0 && r < size_, "split_known: member ", r, " is not a rank of group ", name(),
               " (size ", size_, ")");
  return make_subgroup(members, str_cat("split", k, ".", color));
}

std::shared_ptr<ProcessGroup> ProcessGroup::make_subgroup(const std::vector<int>& members,
                                                          const std::string& suffix) {
  GroupOptions opts;
  opts.name = name() + "/" + suffix;
  opts.timeout = options_.timeout;
  for (int r : members) opts.global_ranks.push_back(global_rank(r));
  const int new_rank = int(std::find(members.begin(), members.end(), rank_) - members.begin());
  return make_group(store_, new_rank, int(members.size()), std::move(opts));
}

}  // namespace spmd::dist
