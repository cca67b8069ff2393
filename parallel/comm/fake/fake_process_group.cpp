// FakeProcessGroup (fake_process_group.h): each operation logged, then
// completed at once; a tensor with bytes gets what it would hold if every
// peer held this rank's values, a meta tensor nothing.
#include "parallel/comm/fake/fake_process_group.h"

#include <numeric>

#include "parallel/comm/arg_checks.h"
#include "runtime/hash_store.h"
#include "tensor/ops.h"

namespace spmd::dist {
namespace {

// The payload of `op` as CommStats counts it: the buffer, the gathered
// output, the scattered input, the elements sent.
uint64_t payload_bytes(const CommOp& op, int size) {
  const Tensor& t = op.tensor.defined() ? op.tensor : op.input;
  const uint64_t elem = t.defined() ? element_size(t.dtype()) : 0;
  switch (op.type) {
    case OpType::kAllGather:
      return op.tensor.nbytes();
    case OpType::kReduceScatter:
    case OpType::kAllToAll:
      return op.input.nbytes();
    case OpType::kAllToAllv:
      return elem * std::accumulate(op.send_counts.begin(), op.send_counts.end(), uint64_t(0));
    case OpType::kGather:
      return uint64_t(size) * op.input.nbytes();
    case OpType::kScatter:
      return uint64_t(size) * op.tensor.nbytes();
    case OpType::kBarrier:
      return 0;
    default:
      return t.defined() ? t.nbytes() : 0;
  }
}

// `t` combined over `size` ranks that all hold it: a sum is size x t, a
// product t^size, an average, minimum or maximum t itself.
void combine_copies(const Tensor& t, ReduceOp reduce_op, int size) {
  if (reduce_op == ReduceOp::kSum) ops::copy_(t, ops::mul(t, double(size)));
  if (reduce_op == ReduceOp::kProd) ops::copy_(t, ops::pow(t, double(size)));
}

// Elements [start, start + n) of a contiguous tensor, flat.
Tensor flat_span(const Tensor& t, int64_t start, int64_t n) {
  return ops::narrow(ops::view(t, Shape{t.numel()}), 0, start, n);
}

// What op leaves in a tensor with bytes when every peer holds this rank's.
void mirror(const CommOp& op, int rank, int size) {
  const Tensor& out = op.tensor;
  if (!out.defined() || out.device().is_meta() || out.numel() == 0) return;
  switch (op.type) {
    case OpType::kAllReduce:
      combine_copies(out, op.reduce_op, size);
      break;
    case OpType::kReduce:
      if (rank == op.root) combine_copies(out, op.reduce_op, size);
      break;
    case OpType::kAllGather:
    case OpType::kGather:
      for (int r = 0; r < size; ++r) {
        const Tensor block = flat_span(out, r * op.input.numel(), op.input.numel());
        if (!detail::is_block(out, op.input, r))
          ops::copy_(block, ops::view(op.input, block.shape()));
      }
      break;
    case OpType::kReduceScatter: {
      const Tensor mine = flat_span(op.input, rank * out.numel(), out.numel());
      ops::copy_(out, ops::view(mine, out.shape()));
      combine_copies(out, op.reduce_op, size);
      break;
    }
    case OpType::kAllToAll: {  // equal blocks: each peer sends what this rank sends itself
      if (op.send_counts != op.recv_counts) break;
      const int64_t n = int64_t(op.recv_counts[size_t(rank)]);
      const Tensor own = flat_span(op.input, int64_t(op.send_offsets[size_t(rank)]), n);
      for (int r = 0; r < size; ++r)
        ops::copy_(flat_span(out, int64_t(op.recv_offsets[size_t(r)]), n), own);
      break;
    }
    default:  // broadcast, scatter, send, recv, all_to_allv, barrier: left as they are
      break;
  }
}

}  // namespace

// --- The log -------------------------------------------------------------------------

void FakeLog::add_call(FakeCall call) {
  std::lock_guard lock(mu_);
  calls_.push_back(std::move(call));
}

void FakeLog::add_group(FakeGroup group) {
  std::lock_guard lock(mu_);
  groups_.push_back(std::move(group));
}

std::vector<FakeCall> FakeLog::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

std::vector<FakeGroup> FakeLog::groups() const {
  std::lock_guard lock(mu_);
  return groups_;
}

void FakeLog::clear_calls() {
  std::lock_guard lock(mu_);
  calls_.clear();
}

// --- The group ---------------------------------------------------------------------------

std::shared_ptr<FakeProcessGroup> FakeProcessGroup::create(int rank, int size,
                                                           GroupOptions options) {
  SPMD_CHECK(size >= 1 && rank >= 0 && rank < size, "fake process group: rank ", rank,
             " is not in [0, ", size, ")");
  auto store = std::make_shared<HashStore>(options.timeout);
  return std::shared_ptr<FakeProcessGroup>(new FakeProcessGroup(
      std::move(store), rank, size, std::move(options), std::make_shared<FakeLog>()));
}

FakeProcessGroup::FakeProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   GroupOptions options, std::shared_ptr<FakeLog> log)
    : ProcessGroup(std::move(store), rank, size, std::move(options)), log_(std::move(log)) {
  FakeGroup g{name(), {}};
  for (int r = 0; r < size; ++r) g.global_ranks.push_back(global_rank(r));
  log_->add_group(std::move(g));
}

Work FakeProcessGroup::launch(CommOp op) {
  mirror(op, rank(), size());
  const bool p2p = op.type == OpType::kSend || op.type == OpType::kRecv;
  log_->add_call({name(), size(), op.type, payload_bytes(op, size()), p2p ? op.peer : -1});
  return Work::completed(std::move(op.description));
}

std::shared_ptr<ProcessGroup> FakeProcessGroup::make_group(std::shared_ptr<Store> store, int rank,
                                                           int size, GroupOptions options) {
  return std::shared_ptr<FakeProcessGroup>(
      new FakeProcessGroup(std::move(store), rank, size, std::move(options), log_));
}

}  // namespace spmd::dist
