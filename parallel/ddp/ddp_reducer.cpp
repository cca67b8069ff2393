// The reducer's story in the order it happens: buckets at construction, a
// hook per parameter during backward, launches in bucket order, and the
// wait and copy-back at the end of backward (see ddp_reducer.h).
#include "parallel/ddp/ddp_reducer.h"

#include <algorithm>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "runtime/error.h"
#include "tensor/ops.h"

namespace spmd::dist {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

Reducer::Reducer(std::vector<std::pair<std::string, Tensor>> parameters,
                 std::shared_ptr<ProcessGroup> group, ReducerOptions options)
    : params_(std::move(parameters)),
      group_(std::move(group)),
      find_unused_(options.find_unused_parameters),
      comm_hook_(allreduce_hook),
      ready_(params_.size(), false),
      used_since_sync_(params_.size(), false) {
  SPMD_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0,
             "DistributedDataParallel: bucket caps must be positive, got bucket_cap_mb ",
             options.bucket_cap_mb, " and first_bucket_cap_mb ", options.first_bucket_cap_mb);
  build_buckets(options);
}

// Walks the parameters from the last to the first, closing a bucket once it
// holds at least its cap (so a bucket may exceed the cap by its last
// parameter, and a parameter larger than the cap gets a bucket of its own),
// or when the dtype or device changes (a buffer has one of each).
void Reducer::build_buckets(const ReducerOptions& options) {
  slots_.resize(params_.size());
  std::vector<int64_t> sizes;  // elements per bucket
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k].second;
    const bool fits =
        !buckets_.empty() && buckets_.back().grad_bucket.buffer.dtype() == p.dtype() &&
        buckets_.back().grad_bucket.buffer.device() == p.device() &&
        double(sizes.back()) * double(element_size(p.dtype())) <
            (buckets_.size() == 1 ? options.first_bucket_cap_mb : options.bucket_cap_mb) * kMiB;
    if (!fits) {
      buckets_.emplace_back();
      buckets_.back().grad_bucket.index = buckets_.size() - 1;
      // A placeholder with the dtype and device; the real buffer comes below.
      buckets_.back().grad_bucket.buffer = ops::empty({0}, {p.dtype(), p.device()});
      sizes.push_back(0);
    }
    Bucket& b = buckets_.back();
    slots_[k] = {buckets_.size() - 1, sizes.back()};
    b.params.push_back(k);
    b.grad_bucket.parameter_names.push_back(params_[k].first);
    sizes.back() += p.numel();
  }
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    b.grad_bucket.buffer =
        ops::zeros({sizes[i]}, {b.grad_bucket.buffer.dtype(), b.grad_bucket.buffer.device()});
    b.pending = b.params.size();
  }
}

void Reducer::attach() {
  std::weak_ptr<Reducer> weak = weak_from_this();
  for (size_t k = 0; k < params_.size(); ++k) {
    register_post_accumulate_grad_hook(params_[k].second, [weak, k](const Tensor&) {
      if (std::shared_ptr<Reducer> self = weak.lock()) self->on_gradient_ready(k);
    });
  }
}

void Reducer::prepare_for_backward(bool sync) {
  if (in_backward_) wait_launched_and_reset();  // a backward failed half-way
  expect_hooks_ = sync;
}

// --- During backward ----------------------------------------------------------

// The hook of parameter k: its .grad is final for this backward.
void Reducer::on_gradient_ready(size_t k) {
  used_since_sync_[k] = true;  // counts no_sync() backwards too
  if (!expect_hooks_) return;  // inside no_sync(), or no forward through DDP
  if (!in_backward_) {
    in_backward_ = true;
    if (observer_) observer_->backward_started();
    std::weak_ptr<Reducer> weak = weak_from_this();
    autograd::queue_callback([weak] {
      if (std::shared_ptr<Reducer> self = weak.lock()) self->finalize_backward();
    });
  }
  SPMD_CHECK(!ready_[k], "DistributedDataParallel: parameter '", params_[k].first,
             "' received its gradient twice in one backward (is it used both inside and outside "
             "a reentrant activation-checkpointed block?)");
  ready_[k] = true;
  ops::copy_(slot_view(k), params_[k].second.grad());
  Bucket& b = buckets_[slots_[k].bucket];
  if (--b.pending == 0) launch_ready_buckets();
}

// Launches every full bucket from next_bucket_ on, stopping at the first
// that is not full: the same order on every rank, whatever the arrival order.
void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    const size_t i = next_bucket_++;
    Bucket& b = buckets_[i];
    b.work = comm_hook_(*group_, b.grad_bucket);
    if (observer_) observer_->bucket_launched(i, b.work, b.grad_bucket.buffer.nbytes());
  }
}

// --- At the end of backward --------------------------------------------------

void Reducer::finalize_backward() {
  if (observer_) observer_->waiting_started();
  std::vector<size_t> missing;
  std::vector<int32_t> used_here(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    used_here[k] = used_since_sync_[k] ? 1 : 0;
    if (!ready_[k]) missing.push_back(k);
  }
  if (!missing.empty()) handle_unused_parameters(missing);

  // With find_unused_parameters, which parameters did any rank use? (After
  // the buckets, so the collectives stay in the same order on every rank.)
  Tensor used;
  Work used_work;
  if (find_unused_) {
    used = ops::from_vector(used_here, {int64_t(used_here.size())});
    used_work = group_->all_reduce(used, ReduceOp::kMax);
  }
  for (Bucket& b : buckets_) b.work.wait();  // each bounded by the group's timeout
  std::vector<bool> globally_used(params_.size(), true);
  if (find_unused_) {
    used_work.wait();
    const std::vector<int32_t> flags = ops::to_vector<int32_t>(used);
    for (size_t k = 0; k < params_.size(); ++k) globally_used[k] = flags[k] != 0;
  }
  write_back(globally_used);
  if (observer_) observer_->backward_finished();
  wait_launched_and_reset();
}

// Parameters that got no gradient: an error naming them, or (with
// find_unused_parameters) their slots filled so their buckets can go: with
// the gradient accumulated under no_sync(), if any, else zeros.
void Reducer::handle_unused_parameters(const std::vector<size_t>& missing) {
  if (!find_unused_) {
    std::string names;
    for (size_t i = 0; i < missing.size() && i < 8; ++i)
      names += (i ? ", '" : "'") + params_[missing[i]].first + "'";
    if (missing.size() > 8) names += str_cat(" and ", missing.size() - 8, " more");
    wait_launched_and_reset();  // leave no collective half-issued
    SPMD_THROW(InvalidArgument, "DistributedDataParallel: ", missing.size(),
               " parameter(s) received no gradient in this backward: ", names,
               ". Every parameter must take part in the loss on every rank, or its bucket is "
               "never reduced; if some are unused by design, construct DDP with "
               "find_unused_parameters = true");
  }
  for (size_t k : missing) {
    const Tensor slot = slot_view(k);
    const Tensor grad = params_[k].second.grad();
    ops::copy_(slot, grad.defined() ? grad : ops::zeros_like(slot));
    ready_[k] = true;
    --buckets_[slots_[k].bucket].pending;
  }
  launch_ready_buckets();
}

// Copies each averaged slot into its parameter's .grad (creating the .grad
// of a parameter this rank did not use but another did).
void Reducer::write_back(const std::vector<bool>& globally_used) {
  for (size_t k = 0; k < params_.size(); ++k) {
    if (!globally_used[k]) continue;  // no rank used it: its .grad stays as it was
    const Tensor& p = params_[k].second;
    const Tensor averaged = slot_view(k);
    if (p.grad().defined()) {
      ops::copy_(p.grad(), averaged);
    } else {
      Tensor(p).set_grad(ops::clone(averaged));
    }
  }
}

// Waits for whatever was launched (ignoring failures: the caller is already
// reporting one, or has just waited successfully) and clears the state of
// this backward.
void Reducer::wait_launched_and_reset() {
  for (size_t i = 0; i < next_bucket_; ++i) {
    try {
      buckets_[i].work.wait();
    } catch (const std::exception&) {
    }
  }
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work = Work();
  }
  std::fill(ready_.begin(), ready_.end(), false);
  std::fill(used_since_sync_.begin(), used_since_sync_.end(), false);
  next_bucket_ = 0;
  in_backward_ = false;
  expect_hooks_ = false;
}

// Parameter k's slot in its bucket's flat buffer, shaped as the parameter.
Tensor Reducer::slot_view(size_t k) const {
  const Tensor& buffer = buckets_[slots_[k].bucket].grad_bucket.buffer;
  const Tensor& p = params_[k].second;
  return ops::view(ops::narrow(buffer, 0, slots_[k].offset, p.numel()), p.shape());
}

std::vector<std::vector<std::string>> Reducer::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> names;
  for (const Bucket& b : buckets_) names.push_back(b.grad_bucket.parameter_names);
  return names;
}

}  // namespace spmd::dist
