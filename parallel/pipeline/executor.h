// The pipeline executor: runs one rank's list of a schedule (schedule.h)
// for one training step, with its stage's forward and backward and the
// point-to-point transfers between neighbouring stages (16.5.1).
//
// Every rank of the pp group calls step() with the same batch; the batch is
// cut into microbatches of B/m sequences. A forward of microbatch i receives
// its input from the previous stage (the first stage cuts the ids), runs the
// stage, and sends the output to the next stage without waiting (the last
// stage computes the loss instead, divided by m so that the step's loss is
// the mean over microbatches); a backward receives the output's gradient
// from the next stage (the last starts from its loss), runs autograd back to
// the stage's input and sends that gradient to the previous stage. The
// stage's parameter gradients accumulate over the microbatches, so after
// step() they are the whole batch's, as one process would have them; the
// optimizer step is the caller's.
//
// With several stages per rank (the interleaved schedule) a rank runs each
// action on the stage it names; stage s + 1 of stage s lives on rank
// (s + 1) % p, so the last rank's stages send round to rank 0's next ones.
// Under ZB-H1 a backward is split: B runs autograd back to the stage's input
// alone (autograd::WeightBackward keeps what the weights need) and sends
// the gradient at once; W, later, accumulates the stage's parameter
// gradients. On the first stage, which has no input, B computes nothing and
// W the whole backward.
//
// Every message carries a tag naming its stage and microbatch (activations
// into stage s: (s - 1) m + mb; gradients out of stage s: (S + s) m + mb),
// and the TCP backend matches by tag. One stage per rank, the messages
// between two ranks also come in the same order on both sides, as NCCL
// (which ignores tags) requires; with several stages per rank they need not,
// so several stages per rank are refused on any other backend.
#pragma once

#include <functional>
#include <unordered_map>
#include <vector>

#include "autograd/engine.h"
#include "parallel/comm/process_group.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage.h"

namespace spmd::dist::pp {

class PipelineExecutor {
 public:
  // REQUIRES: group rank r owns stage r (stage.index() == group.rank(),
  // stage.num_stages() == group.size()). Throws InvalidArgument otherwise,
  // or for num_microbatches < 1, or for the interleaved schedule (which
  // needs several stages per rank).
  PipelineExecutor(TransformerStage& stage, ProcessGroup& group, ScheduleKind kind,
                   int num_microbatches);
  // Several stages per rank: stages[i] is stage rank + i p of p v, v =
  // stages.size() (split_model_interleaved gives them). Throws
  // InvalidArgument when they are not, or for a schedule make_schedule
  // refuses (interleaved with m not a multiple of p, say), or for several
  // stages per rank on a group that is not the TCP backend's.
  PipelineExecutor(std::vector<TransformerStage*> stages, ProcessGroup& group, ScheduleKind kind,
                   int num_microbatches);

  // One step's forwards and backwards over ids and targets (B, T), the same
  // on every rank. Returns the mean loss over the microbatches on the last
  // stage, NaN on the others. Throws InvalidArgument, before any
  // communication, when B does not divide into the microbatches. Before
  // the first action neighbouring stages compare what one will send with
  // what the other expects (4 integers each way), and both throw
  // InvalidArgument naming the two stages, the shapes and dtypes if they
  // differ (ranks given different models or batches): never a hang or a
  // wrong result.
  double step(const Tensor& ids, const Tensor& targets);

  const Schedule& schedule() const { return schedule_; }

  // The activations between stages hold T / activation_sequence_split of
  // a microbatch's T tokens: 1, or the tp size under sequence parallelism,
  // whose residual stream between blocks is each rank's share of the
  // sequence. step() throws InvalidArgument, before any communication, when
  // it does not divide T.
  int64_t activation_sequence_split = 1;

  // The loss of one microbatch's logits against its targets (the mean over
  // its tokens) on the last stage. Unset: cross_entropy. A head whose
  // vocabulary is split over tensor-parallel ranks gives its own
  // (tp::vocab_parallel_cross_entropy).
  std::function<Tensor(const Tensor& logits, const Tensor& targets)> loss_fn;

  // A term of the objective that a stage adds itself (a scalar, or
  // undefined for none), taken right after each of its forwards: the MoE
  // blocks' load-balancing loss, which depends on that microbatch's routing.
  // Divided by the microbatches as the loss is, and backpropagated with the
  // stage's output; the step's returned loss leaves it out. Unset: none.
  std::function<Tensor(TransformerStage& stage)> stage_objective;

  // The last step's timeline on this rank: each action's compute (from
  // after its receive to before its send) in microseconds since the step
  // began, and the step's length. The measured bubble is the share of the
  // step not spent computing. With SPMD_TRACE set, each action is also a
  // span of the Chrome trace (runtime/trace.h).
  struct Timed {
    Action action;
    int64_t start_us = 0, end_us = 0;
  };
  const std::vector<Timed>& timeline() const { return timeline_; }
  int64_t step_us() const { return step_us_; }
  double measured_bubble() const;

 private:
  struct InFlight {
    Tensor input;   // what the stage received (a leaf that requires grad), or the ids
    Tensor output;  // the stage's output; on the last stage the microbatch's loss
    Tensor extra;   // stage_objective's term, / m (undefined without one)
    autograd::WeightBackward weights;  // after a split backward's B, its W
  };
  void forward(const Action& a, const Tensor& ids, const Tensor& targets);
  void backward(const Action& a);
  void weight(const Action& a);
  TransformerStage& stage(int s) const { return *stages_[size_t(s / group_.size())]; }
  InFlight& in_flight(const Action& a) {
    return in_flight_[size_t(a.stage / group_.size())][size_t(a.microbatch)];
  }
  int rank_of(int s) const { return s % group_.size(); }
  // Point-to-point to the rank of stage s, or through mailbox_ when that
  // is this rank (one rank holding every stage).
  void send_to(int s, const Tensor& t, int tag);
  void recv_from(int s, Tensor& t, int tag);
  void record(const Action& action, int64_t start_us);
  void check_neighbours(const Device& device);

  std::vector<TransformerStage*> stages_;
  ProcessGroup& group_;
  int num_stages_, num_microbatches_;
  bool split_backward_;
  Schedule schedule_;
  std::vector<std::vector<InFlight>> in_flight_;  // [local stage][microbatch]
  std::vector<Work> sends_;
  std::unordered_map<int, Tensor> mailbox_;  // by tag
  Shape activation_shape_;                   // (b, T / split, C) between stages
  std::vector<Timed> timeline_;
  int64_t step_start_us_ = 0, step_us_ = 0;
  double loss_sum_ = 0;
};

}  // namespace spmd::dist::pp
