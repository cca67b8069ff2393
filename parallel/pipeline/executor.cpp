// The pipeline executor: one step is this rank's actions in schedule order;
// forward() and backward() below are an action each, transfers included.
#include "parallel/pipeline/executor.h"

#include <cmath>
#include <limits>

#include "autograd/autograd.h"
#include "autograd/nn_functional.h"
#include "autograd/tensor_ops.h"
#include "runtime/trace.h"
#include "tensor/ops.h"

namespace spmd::dist::pp {

PipelineExecutor::PipelineExecutor(TransformerStage& stage, ProcessGroup& group, ScheduleKind kind,
                                   int num_microbatches)
    : stage_(stage), group_(group), num_microbatches_(num_microbatches) {
  SPMD_CHECK(stage.num_stages() == group.size() && stage.index() == group.rank(),
             "PipelineExecutor: stage ", stage.index(), " of ", stage.num_stages(), " on rank ",
             group.rank(), " of a pp group of ", group.size(),
             "; rank r must own stage r of as many stages as ranks");
  SPMD_CHECK(num_microbatches >= 1, "PipelineExecutor: ", num_microbatches,
             " microbatches; at least 1 is needed");
  schedule_ = make_schedule(kind, group.size(), num_microbatches);
}

double PipelineExecutor::step(const Tensor& ids, const Tensor& targets) {
  SPMD_CHECK(ids.ndim() == 2 && targets.shape() == ids.shape(), "PipelineExecutor: expected ",
             "ids and targets (B, T), got ", ids.shape(), " and ", targets.shape());
  const int64_t B = ids.size(0), T = ids.size(1);
  SPMD_CHECK(B % num_microbatches_ == 0, "PipelineExecutor: a batch of ", B,
             " sequences does not divide into ", num_microbatches_, " microbatches");
  activation_shape_ = Shape{B / num_microbatches_, T, stage_.model().config.d_model};
  check_neighbours(ids.device());
  in_flight_.assign(size_t(num_microbatches_), {});
  loss_sum_ = 0;
  timeline_.clear();
  step_start_us_ = trace_now_us();
  for (const Action& a : schedule_[size_t(group_.rank())]) {
    if (a.type == Action::Type::kForward) {
      forward(a.microbatch, ids, targets);
    } else {
      backward(a.microbatch);
    }
  }
  for (const Work& w : sends_) group_.wait(w, OpType::kSend);
  sends_.clear();
  step_us_ = trace_now_us() - step_start_us_;
  return stage_.is_last() ? loss_sum_ : std::numeric_limits<double>::quiet_NaN();
}

void PipelineExecutor::forward(int mb, const Tensor& ids, const Tensor& targets) {
  const int64_t b = activation_shape_[0];
  InFlight& f = in_flight_[size_t(mb)];
  if (stage_.is_first()) {
    f.input = ops::narrow(ids, 0, mb * b, b);
  } else {  // the previous stage's output: a leaf whose gradient goes back to it
    f.input = ops::empty(activation_shape_, {DType::kF32, ids.device()});
    group_.wait(group_.recv(f.input, group_.rank() - 1, mb), OpType::kRecv);
    f.input.requires_grad_();
  }
  const int64_t start = trace_now_us();
  const Tensor out = stage_.forward(f.input);
  if (stage_.is_last()) {
    f.output = mul(cross_entropy(out, ops::narrow(targets, 0, mb * b, b)), 1.0 / num_microbatches_);
    loss_sum_ += f.output.item<double>();
  } else {
    f.output = out;
  }
  record({Action::Type::kForward, stage_.index(), mb}, start);
  if (!stage_.is_last())
    sends_.push_back(group_.send(ops::contiguous(detach(out)), group_.rank() + 1, mb));
}

void PipelineExecutor::backward(int mb) {
  InFlight& f = in_flight_[size_t(mb)];
  SPMD_CHECK(f.output.defined(), "PipelineExecutor: backward of microbatch ", mb, " on stage ",
             stage_.index(), " before its forward");
  Tensor grad;  // of the output: from the next stage, or none (the loss) on the last
  if (!stage_.is_last()) {
    grad = ops::empty(f.output.shape(), {f.output.dtype(), f.output.device()});
    group_.wait(group_.recv(grad, group_.rank() + 1, mb), OpType::kRecv);
  }
  const int64_t start = trace_now_us();
  spmd::backward(f.output, grad);
  record({Action::Type::kBackward, stage_.index(), mb}, start);
  if (!stage_.is_first())
    sends_.push_back(group_.send(ops::contiguous(f.input.grad()), group_.rank() - 1, mb));
  f = InFlight{};  // the microbatch's activations are freed here
}

// Each stage but the last tells the next the (dtype, b, T, C) of the
// activations it will send; each but the first compares them with what it
// expects. Both sides of a disagreement throw the same message.
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
  const int r = group_.rank();
  std::vector<P2POp> ops_;
  Tensor from_prev = ops::empty({4}, {DType::kI64, device});
  Tensor from_next = ops::empty({4}, {DType::kI64, device});
  if (!stage_.is_last()) {
    ops_.push_back({OpType::kSend, mine, r + 1, -1});
    ops_.push_back({OpType::kRecv, from_next, r + 1, -1});
  }
  if (!stage_.is_first()) {
    ops_.push_back({OpType::kSend, mine, r - 1, -1});
    ops_.push_back({OpType::kRecv, from_prev, r - 1, -1});
  }
  group_.wait(group_.batch_isend_irecv(ops_), OpType::kRecv);
  auto check = [&](const Tensor& theirs, int sender, int receiver) {
    SPMD_CHECK(ops::to_vector<int64_t>(theirs) == ops::to_vector<int64_t>(mine), "pipeline: stage ",
               sender, " sends activations ", describe(sender == r ? mine : theirs),
               " for each microbatch, but stage ", receiver, " expects ",
               describe(receiver == r ? mine : theirs),
               " (do both ranks build the same model and pass the same batch?)");
  };
  if (!stage_.is_first()) check(from_prev, r - 1, r);
  if (!stage_.is_last()) check(from_next, r, r + 1);
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
