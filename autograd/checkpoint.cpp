// checkpoint(): a custom Function whose backward reruns the forward, with
// the products' outputs kept and replayed under kSaveProducts.
#include "autograd/checkpoint.h"

#include <memory>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/selective_checkpoint.h"
#include "autograd/variable.h"
#include "tensor/random.h"

namespace spmd::autograd {
namespace {

using Fn = std::function<Tensor(const Tensor&)>;

struct CheckpointFn : Function<CheckpointFn> {
  static constexpr const char* kName = "checkpoint";

  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const Fn& fn, CheckpointPolicy policy) {
    ctx.save_for_backward({x});
    ctx.set("fn", fn);
    ctx.set("seed", default_generator().seed());
    ctx.set("offset", default_generator().offset());
    ctx.set("autocast", autocast_state());
    std::shared_ptr<SavedOutputs> kept;  // null under kRecomputeAll: every op runs again
    if (policy == CheckpointPolicy::kSaveProducts) kept = std::make_shared<SavedOutputs>();
    ctx.set("kept", kept);
    if (!kept) return fn(x);  // grad mode is off here: nothing inside is recorded
    SavedOutputsGuard record(*kept, SavedOutputs::Mode::kRecord);
    return fn(x);  // nothing recorded; the products' outputs kept
  }

  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    Tensor x = detach(ctx.saved_tensors()[0]);
    x.requires_grad_();
    Generator& gen = default_generator();
    const Generator now = gen;
    gen.manual_seed(ctx.get<uint64_t>("seed"));
    gen.set_offset(ctx.get<uint64_t>("offset"));
    Tensor y = recompute(ctx, x);
    gen = now;
    SPMD_CHECK(y.requires_grad(), "checkpoint: the recomputed output does not require grad");
    spmd::backward(y, grads[0]);
    return {x.grad()};
  }

  // fn(x) once more, recording: every op runs, or under kSaveProducts the
  // products hand back their kept outputs (which are then let go: the nodes
  // just recorded hold what backward needs).
  static Tensor recompute(FunctionCtx& ctx, const Tensor& x) {
    EnableGradGuard grad_on;
    AutocastStateGuard autocast(ctx.get<AutocastState>("autocast"));  // the forward's precision
    const Fn& fn = ctx.get<Fn>("fn");
    const auto kept = ctx.get<std::shared_ptr<SavedOutputs>>("kept");
    if (!kept) return fn(x);
    Tensor y;
    {
      SavedOutputsGuard replay(*kept, SavedOutputs::Mode::kReplay);
      y = fn(x);
    }
    kept->expect_all_replayed();
    ctx.set("kept", std::shared_ptr<SavedOutputs>());
    return y;
  }
};

}  // namespace

Tensor checkpoint(const Fn& fn, const Tensor& x, CheckpointPolicy policy) {
  if (!x.requires_grad() || !grad_mode_enabled()) return fn(x);
  return CheckpointFn::apply(x, fn, policy);
}

}  // namespace spmd::autograd
