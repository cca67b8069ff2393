// The pipeline executor: one step is this rank's actions in schedule order;
// forward() and backward() below are an action each, transfers included.
#include "parallel/pipeline/executor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/autograd.h"
#include "autograd/nn_functional.h"
#include "autograd/tensor_ops.h"
#include "runtime/trace.h"
#include "tensor/ops.h"

namespace spmd::dist::pp {

namespace {

// The tags of the messages into and out of stage s (executor.h).
int activation_tag(int s, int mb, int m) { return (s - 1) * m + mb; }
int gradient_tag(int s, int mb, int m, int num_stages) { return (num_stages + s) * m + mb; }

}  // namespace

PipelineExecutor::PipelineExecutor(TransformerStage& stage, ProcessGroup& group, ScheduleKind kind,
                                   int num_microbatches)
    : PipelineExecutor(std::vector<TransformerStage*>{&stage}, group, kind, num_microbatches) {}

PipelineExecutor::PipelineExecutor(std::vector<TransformerStage*> stages, ProcessGroup& group,
                                   ScheduleKind kind, int num_microbatches)
    : stages_(std::move(stages)),
      group_(group),
      num_stages_(int(stages_.size()) * group.size()),
      num_microbatches_(num_microbatches),
      split_backward_(splits_backward(kind)) {
  const int p = group.size(), v = int(stages_.size());
  SPMD_CHECK(v >= 1, "PipelineExecutor: no stages");
  for (int i = 0; i < v; ++i) {
    const TransformerStage& st = *stages_[size_t(i)];
    SPMD_CHECK(st.num_stages() == num_stages_ && st.index() == group.rank() + i * p,
               "PipelineExecutor: stage ", st.index(), " of ", st.num_stages(), " given as the ", i,
               "th of ", v, " on rank ", group.rank(), " of a pp group of ", group.size(),
               "; rank r must own stages r, r + p, ... of p x ", v);
  }
  SPMD_CHECK(num_microbatches >= 1, "PipelineExecutor: ", num_microbatches,
             " microbatches; at least 1 is needed");
  SPMD_CHECK(v == 1 || p == 1 || group.backend() != CommBackend::kNccl, "PipelineExecutor: ", v,
             " stages per rank need the TCP backend: their messages between two ranks need not "
             "come in the same order on both sides, and NCCL matches them by order");
  schedule_ = make_schedule(kind, p, num_microbatches, v);
}

double PipelineExecutor::step(const Tensor& ids, const Tensor& targets) {
  SPMD_CHECK(ids.ndim() == 2 && targets.shape() == ids.shape(), "PipelineExecutor: expected ",
             "ids and targets (B, T), got ", ids.shape(), " and ", targets.shape());
  const int64_t B = ids.size(0), T = ids.size(1);
  SPMD_CHECK(B % num_microbatches_ == 0, "PipelineExecutor: a batch of ", B,
             " sequences does not divide into ", num_microbatches_, " microbatches");
  const int64_t split = activation_sequence_split;
  SPMD_CHECK(split >= 1 && T % split == 0, "PipelineExecutor: a sequence of ", T,
             " tokens does not divide into activation_sequence_split ", split);
  activation_shape_ = Shape{B / num_microbatches_, T / split, stages_[0]->model().config.d_model};
  check_neighbours(ids.device());
  in_flight_.clear();
  in_flight_.resize(stages_.size());
  for (auto& per_stage : in_flight_) per_stage.resize(size_t(num_microbatches_));
  mailbox_.clear();
  loss_sum_ = 0;
  timeline_.clear();
  step_start_us_ = trace_now_us();
  for (const Action& a : schedule_[size_t(group_.rank())]) {
    switch (a.type) {
      case Action::Type::kForward:
        forward(a, ids, targets);
        break;
      case Action::Type::kBackward:
        backward(a);
        break;
      case Action::Type::kWeight:
        weight(a);
        break;
    }
  }
  for (const Work& w : sends_) group_.wait(w, OpType::kSend);
  sends_.clear();
  step_us_ = trace_now_us() - step_start_us_;
  return stages_.back()->is_last() ? loss_sum_ : std::numeric_limits<double>::quiet_NaN();
}

void PipelineExecutor::forward(const Action& a, const Tensor& ids, const Tensor& targets) {
  const int64_t b = activation_shape_[0];
  const int mb = a.microbatch, m = num_microbatches_;
  TransformerStage& st = stage(a.stage);
  InFlight& f = in_flight(a);
  if (st.is_first()) {
    f.input = ops::narrow(ids, 0, mb * b, b);
  } else {  // the previous stage's output: a leaf whose gradient goes back to it
    f.input = ops::empty(activation_shape_, {DType::kF32, ids.device()});
    recv_from(a.stage - 1, f.input, activation_tag(a.stage, mb, m));
    f.input.requires_grad_();
  }
  const int64_t start = trace_now_us();
  const Tensor out = st.forward(f.input);
  if (st.is_last()) {
    const Tensor y = ops::narrow(targets, 0, mb * b, b);
    f.output = mul(loss_fn ? loss_fn(out, y) : cross_entropy(out, y), 1.0 / m);
    loss_sum_ += f.output.item<double>();
  } else {
    f.output = out;
  }
  if (stage_objective) {
    const Tensor extra = stage_objective(st);
    if (extra.defined() && extra.requires_grad()) f.extra = mul(extra, 1.0 / m);
  }
  record(a, start);
  if (!st.is_last())
    send_to(a.stage + 1, ops::contiguous(detach(out)), activation_tag(a.stage + 1, mb, m));
}

void PipelineExecutor::backward(const Action& a) {
  const int mb = a.microbatch;
  TransformerStage& st = stage(a.stage);
  InFlight& f = in_flight(a);
  SPMD_CHECK(f.output.defined(), "PipelineExecutor: backward of microbatch ", mb, " on stage ",
             a.stage, " before its forward");
  Tensor grad;  // of the output: from the next stage, or none (the loss) on the last
  if (!st.is_last()) {
    grad = ops::empty(f.output.shape(), {f.output.dtype(), f.output.device()});
    recv_from(a.stage + 1, grad, gradient_tag(a.stage + 1, mb, num_microbatches_, num_stages_));
  }
  const int64_t start = trace_now_us();
  autograd::TensorList roots{f.output}, seeds{grad};
  if (f.extra.defined()) roots.push_back(f.extra), seeds.push_back(Tensor());  // seeded with 1
  if (split_backward_) {  // B: to the input alone; the weights' part waits for W
    f.weights = autograd::run_backward_input(
        roots, seeds, st.is_first() ? autograd::TensorList{} : autograd::TensorList{f.input});
  } else {
    autograd::run_backward(roots, seeds, /*retain_graph=*/false);
  }
  record(a, start);
  if (!st.is_first())
    send_to(a.stage - 1, ops::contiguous(f.input.grad()),
            gradient_tag(a.stage, mb, num_microbatches_, num_stages_));
  f.input = Tensor();  // the microbatch's activations are freed here (but what W needs)
  f.output = Tensor();
  f.extra = Tensor();
}

void PipelineExecutor::weight(const Action& a) {
  InFlight& f = in_flight(a);
  const int64_t start = trace_now_us();
  backward_weight(f.weights);
  record(a, start);
  f = InFlight{};
}

void PipelineExecutor::send_to(int s, const Tensor& t, int tag) {
  if (rank_of(s) == group_.rank()) {
    mailbox_[tag] = t;
    return;
  }
  sends_.push_back(group_.send(t, rank_of(s), tag));
}

void PipelineExecutor::recv_from(int s, Tensor& t, int tag) {
  if (rank_of(s) == group_.rank()) {
    const auto it = mailbox_.find(tag);
    SPMD_CHECK(it != mailbox_.end(), "PipelineExecutor: stage ", s, "'s message ", tag,
               " is not there yet (the schedule runs a receive before its send)");
    t = it->second;
    mailbox_.erase(it);
    return;
  }
  group_.wait(group_.recv(t, rank_of(s), tag), OpType::kRecv);
}

// At each cut between stages s and s + 1 on different ranks, the sender
// tells the receiver the (dtype, b, T, C) of the activations it will send
// and the receiver tells the sender what it expects; both compare. Both
// sides of a disagreement throw the same message. (Stages on one rank share
// this rank's model and batch: nothing to compare.)
void PipelineExecutor::check_neighbours(const Device& device) {
  auto describe = [](const Tensor& d) {
    const std::vector<int64_t> v = ops::to_vector<int64_t>(d);
    return str_cat(dtype_name(DType(v[0])), " (", v[1], ", ", v[2], ", ", v[3], ")");
  };
  const Tensor mine =
      ops::to(ops::from_vector(std::vector<int64_t>{int64_t(DType::kF32), activation_shape_[0],
                                                    activation_shape_[1], activation_shape_[2]},
                               {4}),
              device);
  constexpr int kTag = 1 << 30;  // above every microbatch's tag
  struct Cut {
    int sender, receiver;  // the stages
    Tensor theirs;
  };
  std::vector<Cut> cuts;
  std::vector<P2POp> ops_;
  for (const TransformerStage* st : stages_) {
    const int s = st->index();
    if (!st->is_last() && rank_of(s + 1) != group_.rank()) cuts.push_back({s, s + 1, Tensor()});
    if (!st->is_first() && rank_of(s - 1) != group_.rank()) cuts.push_back({s - 1, s, Tensor()});
  }
  std::sort(cuts.begin(), cuts.end(),
            [](const Cut& x, const Cut& y) { return x.sender < y.sender; });
  for (Cut& c : cuts) {  // in the order of the cuts, the same on both sides
    const bool sending = rank_of(c.sender) == group_.rank();
    const int peer = rank_of(sending ? c.receiver : c.sender);
    c.theirs = ops::empty({4}, {DType::kI64, device});
    ops_.push_back({OpType::kSend, mine, peer, kTag + 2 * c.sender + (sending ? 0 : 1)});
    ops_.push_back({OpType::kRecv, c.theirs, peer, kTag + 2 * c.sender + (sending ? 1 : 0)});
  }
  if (!ops_.empty()) group_.wait(group_.batch_isend_irecv(ops_), OpType::kRecv);
  for (const Cut& c : cuts) {
    const bool sending = rank_of(c.sender) == group_.rank();
    SPMD_CHECK(ops::to_vector<int64_t>(c.theirs) == ops::to_vector<int64_t>(mine),
               "pipeline: stage ", c.sender, " sends activations ",
               describe(sending ? mine : c.theirs), " for each microbatch, but stage ", c.receiver,
               " expects ", describe(sending ? c.theirs : mine),
               " (do both ranks build the same model and pass the same batch?)");
  }
}

void PipelineExecutor::record(const Action& action, int64_t start_us) {
  const int64_t end = trace_now_us();
  timeline_.push_back({action, start_us - step_start_us_, end - step_start_us_});
  if (trace_enabled()) trace_record(action.str(), "pipeline", start_us, end - start_us);
}

double PipelineExecutor::measured_bubble() const {
  if (step_us_ <= 0) return 0;
  int64_t busy = 0;
  for (const Timed& t : timeline_) busy += t.end_us - t.start_us;
  return 1.0 - double(busy) / double(step_us_);
}

}  // namespace spmd::dist::pp
