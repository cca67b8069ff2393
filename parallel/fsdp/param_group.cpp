// ParamGroup: sharding a unit's parameters, then the three moves of
// param_group.h (gather, reshard, reduce) in the order a step runs them.
#include "parallel/fsdp/param_group.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "parallel/placement.h"
#include "runtime/trace.h"
#include "tensor/autograd_meta.h"
#include "tensor/deferred.h"
#include "tensor/meta_memory.h"
#include "tensor/ops.h"

namespace spmd::dist {
namespace {

Tensor flat(const Tensor& t) { return ops::view(t, Shape{t.numel()}); }

// Elements [offset, offset + n) of a 1-D tensor.
Tensor span(const Tensor& flat_buffer, int64_t offset, int64_t n) {
  return ops::narrow(flat_buffer, 0, offset, n);
}

// Records the completion time of `work` (on the thread that completes it).
std::shared_ptr<std::atomic<int64_t>> completion_time(const Work& work) {
  auto done = std::make_shared<std::atomic<int64_t>>(0);
  work.on_complete([done] { done->store(trace_now_us()); });
  return done;
}

}  // namespace

ParamGroup::ParamGroup(std::vector<std::pair<std::string, Tensor*>> slots, const DeviceMesh& mesh,
                       const std::string& shard_axis, const std::string& replicate_axis,
                       MixedPrecision precision, std::string unit_name)
    : name_(std::move(unit_name)), shard_group_(mesh.group_ptr(shard_axis)) {
  if (!replicate_axis.empty()) replicate_group_ = mesh.group_ptr(replicate_axis);
  SPMD_CHECK(!slots.empty(), "fully_shard(", name_, "): the unit has no parameters of its own");
  const Tensor& first = *slots[0].second;
  device_ = first.device();
  for (const auto& [name, slot] : slots) {
    SPMD_CHECK(slot->dtype() == first.dtype() || precision.param_dtype.has_value(), "fully_shard(",
               name_, "): ", name, " is ", dtype_name(slot->dtype()), " but ", slots[0].first,
               " is ", dtype_name(first.dtype()),
               "; one unit gathers one dtype (set param_dtype to cast them all)");
    SPMD_CHECK(slot->device() == device_, "fully_shard(", name_, "): ", name, " is on ",
               slot->device().str(), " but ", slots[0].first, " on ", device_.str());
    SPMD_CHECK(slot->ndim() >= 1, "fully_shard(", name_, "): ", name,
               " is a 0-dim tensor, which has no dim 0 to shard");
  }
  param_dtype_ = precision.param_dtype.value_or(first.dtype());
  reduce_dtype_ = precision.reduce_dtype.value_or(param_dtype_);

  // A flattened axis (dp_shard x cp) is not a dim of the mesh: the shards
  // are placed on its own 1-D mesh.
  const std::vector<std::string>& dims = mesh.axis_names();
  const bool flattened = std::find(dims.begin(), dims.end(), shard_axis) == dims.end();
  const DeviceMesh placed = flattened ? mesh[shard_axis] : mesh;
  SPMD_CHECK(!flattened || replicate_axis.empty(), "fully_shard(", name_, "): shard axis '",
             shard_axis, "' is a flattened axis, which cannot be combined with a replicate axis");
  std::vector<Placement> placements;
  for (const std::string& axis : placed.axis_names())
    placements.push_back(axis == shard_axis ? Placement::shard(0) : Placement::replicate());

  NoGradGuard no_grad;
  const int64_t n = shard_group_->size(), r = shard_group_->rank();
  for (const auto& [name, slot] : slots) {
    const Tensor whole = *slot;
    Param p;
    p.name = name;
    p.slot = slot;
    p.rows = whole.size(0);
    p.chunk = (p.rows + n - 1) / n;
    p.row_numel = p.rows > 0 ? whole.numel() / p.rows : 0;
    p.offset = block_numel_;
    p.origin = whole.storage();
    block_numel_ += p.chunk * p.row_numel;

    const Chunk mine = chunk_bounds(p.rows, n, r);
    // A copy: a view would keep the whole parameter's bytes alive.
    p.shard = ops::clone(ops::narrow(whole, 0, mine.offset, mine.length));
    p.shard.requires_grad_(whole.requires_grad());
    set_placements(p.shard, placed, placements, whole.shape(), whole.layout_meta());

    p.full = ops::empty(whole.shape(), {param_dtype_, device_});
    p.full.storage()->release_data();  // bytes only while gathered
    p.full.requires_grad_(whole.requires_grad());
    // Gradient hooks on the parameter (sequence parallelism's sum over tp)
    // now belong to the tensor whose gradient backward computes.
    if (whole.autograd_meta() != nullptr)
      p.full.ensure_autograd_meta().grad_hooks = whole.autograd_meta()->grad_hooks;
    *slot = p.shard;
    params_.push_back(std::move(p));
  }
}

// --- Gather --------------------------------------------------------------------------

// A unit sharded on the meta device follows its shards once they have bytes
// (parallel/materialize.h): its buffers are made on their device, and the
// full parameters, still without bytes, take it too. Shards still on meta
// keep the unit there only in a dry run's step (train/dry_run.h: shapes
// only, under MetaReadsAsZeros); anywhere else they were forgotten.
void ParamGroup::follow_materialized_shards() {
  if (!device_.is_meta()) return;
  device_ = params_[0].shard.device();
  if (device_.is_meta() && MetaReadsAsZeros::active()) return;
  SPMD_CHECK(!device_.is_meta(), "fully_shard(", name_, "): ", params_[0].name,
             " is still on the meta device: materialize the shards before the first forward");
  for (Param& p : params_) ops::materialize_(p.full, device_);
}

void ParamGroup::start_gather() {
  if (state_ != State::kSharded) return;
  follow_materialized_shards();
  NoGradGuard no_grad;
  const int64_t n = shard_group_->size(), r = shard_group_->rank();
  gather_buffer_ = ops::empty(Shape{n * block_numel_}, {param_dtype_, device_});
  const Tensor mine = span(gather_buffer_, r * block_numel_, block_numel_);
  for (const Param& p : params_) {
    if (p.shard.numel() > 0) ops::copy_(span(mine, p.offset, p.shard.numel()), flat(p.shard));
  }
  CommTimes times;
  times.issue_us = trace_now_us();
  gather_work_ = shard_group_->all_gather(gather_buffer_, mine);  // in place
  gather_done_us_ = completion_time(*gather_work_);
  gather_times_.push_back(times);
  state_ = State::kGathering;
}

void ParamGroup::finish_gather() {
  if (state_ == State::kGathered) return;
  start_gather();
  const int64_t t0 = trace_now_us();
  shard_group_->wait(*gather_work_, OpType::kAllGather);
  CommTimes& times = gather_times_.back();
  times.wait_us = trace_now_us() - t0;
  times.done_us = gather_done_us_->load();
  if (trace_enabled())
    trace_record("fsdp all_gather " + name_, "comm", times.issue_us,
                 times.done_us - times.issue_us);

  // Each parameter's chunks, from every rank's block, into fresh bytes that
  // then become the full tensor's (its Storage and version stay as they
  // were: autograd may hold views of it from this step's forward).
  NoGradGuard no_grad;
  const int64_t n = shard_group_->size();
  for (Param& p : params_) {
    Tensor bytes = ops::empty(p.full.shape(), {param_dtype_, device_});
    const Tensor out = flat(bytes);
    for (int64_t r = 0; r < n; ++r) {
      const Chunk c = chunk_bounds(p.rows, n, r);
      if (c.length == 0) continue;
      ops::copy_(span(out, c.offset * p.row_numel, c.length * p.row_numel),
                 span(gather_buffer_, r * block_numel_ + p.offset, c.length * p.row_numel));
    }
    p.full.storage()->adopt_data(bytes.storage()->release_data());
    *p.slot = p.full;
  }
  gather_buffer_ = Tensor();
  gather_work_.reset();
  state_ = State::kGathered;
}

void ParamGroup::reshard() {
  if (state_ == State::kGathering) {  // prefetched, never used: let it land, drop it
    shard_group_->wait(*gather_work_, OpType::kAllGather);
    gather_buffer_ = Tensor();
    gather_work_.reset();
  }
  for (Param& p : params_) {
    if (state_ == State::kGathered) p.full.storage()->release_data();
    *p.slot = p.shard;
  }
  state_ = State::kSharded;
}

// --- Reduce ----------------------------------------------------------------------------

void ParamGroup::start_reduce() {
  SPMD_CHECK(!reduce_work_.has_value(), "fsdp ", name_,
             ": a gradient reduction is already pending");
  NoGradGuard no_grad;
  const int64_t n = shard_group_->size();
  reduce_input_ = ops::empty(Shape{n * block_numel_}, {reduce_dtype_, device_});
  for (Param& p : params_) {
    const Tensor grad = p.full.grad();
    for (int64_t k = 0; k < n; ++k) {
      const Chunk c = chunk_bounds(p.rows, n, k);
      Tensor dst = span(reduce_input_, k * block_numel_ + p.offset, c.length * p.row_numel);
      if (grad.defined()) {
        ops::copy_(dst, span(flat(grad), c.offset * p.row_numel, c.length * p.row_numel));
      } else {
        ops::zero_(dst);  // no gradient reached it: it counts as zero
      }
      Tensor pad = span(reduce_input_, k * block_numel_ + p.offset + c.length * p.row_numel,
                        (p.chunk - c.length) * p.row_numel);
      ops::zero_(pad);
    }
    p.full.set_grad(Tensor());  // its chunks are in the buffer now
  }
  reduce_output_ = ops::empty(Shape{block_numel_}, {reduce_dtype_, device_});
  CommTimes times;
  times.issue_us = trace_now_us();
  reduce_work_ = shard_group_->reduce_scatter(reduce_output_, reduce_input_, ReduceOp::kAvg);
  reduce_done_us_ = completion_time(*reduce_work_);
  // The input is freed the moment the collective is done with it (on the
  // thread that completes it), not when this thread next looks: so the next
  // unit's backward does not hold this one's full gradients too.
  reduce_input_bytes_->store(reduce_input_.nbytes());
  reduce_work_->on_complete(
      [input = std::move(reduce_input_), bytes = reduce_input_bytes_]() mutable {
        input = Tensor();
        bytes->store(0);
      });
  reduce_input_ = Tensor();
  reduce_times_.push_back(times);
}

void ParamGroup::finish_reduce() {
  if (!reduce_work_.has_value()) return;
  const int64_t t0 = trace_now_us();
  shard_group_->wait(*reduce_work_, OpType::kReduceScatter);
  CommTimes& times = reduce_times_.back();
  times.done_us = reduce_done_us_->load();
  if (replicate_group_ != nullptr && replicate_group_->size() > 1) {
    // HSDP: the rows' shards are averaged within each replica; the replicas
    // then average theirs, so the result is the mean over every dp rank.
    replicate_group_->wait(replicate_group_->all_reduce(reduce_output_, ReduceOp::kAvg),
                           OpType::kAllReduce);
    times.done_us = trace_now_us();
  }
  times.wait_us = trace_now_us() - t0;
  if (trace_enabled())
    trace_record("fsdp reduce_scatter " + name_, "comm", times.issue_us,
                 times.done_us - times.issue_us);
  reduce_work_.reset();

  NoGradGuard no_grad;
  for (Param& p : params_) {
    if (!p.shard.requires_grad()) continue;
    Tensor g = ops::view(span(reduce_output_, p.offset, p.shard.numel()), p.shard.shape());
    if (g.dtype() != p.shard.dtype()) g = ops::to(g, p.shard.dtype());
    Tensor existing = p.shard.grad();
    if (existing.defined()) {
      ops::add_(existing, g);
    } else {
      p.shard.set_grad(g);
    }
  }
  reduce_output_ = Tensor();
}

size_t ParamGroup::unsharded_bytes() const {
  size_t bytes = gather_buffer_.defined() ? gather_buffer_.nbytes() : 0;
  bytes += reduce_input_bytes_->load();
  for (const Param& p : params_) {
    if (state_ == State::kGathered) bytes += p.full.nbytes();
    if (p.full.grad().defined()) bytes += p.full.grad().nbytes();
  }
  return bytes;
}

}  // namespace spmd::dist
