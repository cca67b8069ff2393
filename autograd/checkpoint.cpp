// checkpoint(): a custom Function whose backward reruns the forward.
#include "autograd/checkpoint.h"

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/variable.h"
#include "tensor/random.h"

namespace spmd::autograd {
namespace {

using Fn = std::function<Tensor(const Tensor&)>;

struct CheckpointFn : Function<CheckpointFn> {
  static constexpr const char* kName = "checkpoint";

  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const Fn& fn) {
    ctx.save_for_backward({x});
    ctx.set("fn", fn);
    ctx.set("seed", default_generator().seed());
    ctx.set("offset", default_generator().offset());
    ctx.set("autocast", autocast_state());
    return fn(x);  // grad mode is off here: nothing inside is recorded
  }

  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    Tensor x = detach(ctx.saved_tensors()[0]);
    x.requires_grad_();
    Generator& gen = default_generator();
    const Generator now = gen;
    gen.manual_seed(ctx.get<uint64_t>("seed"));
    gen.set_offset(ctx.get<uint64_t>("offset"));
    Tensor y;
    {
      EnableGradGuard grad_on;
      AutocastStateGuard autocast(ctx.get<AutocastState>("autocast"));  // the forward's precision
      y = ctx.get<Fn>("fn")(x);
    }
    gen = now;
    SPMD_CHECK(y.requires_grad(), "checkpoint: the recomputed output does not require grad");
    spmd::backward(y, grads[0]);
    return {x.grad()};
  }
};

}  // namespace

Tensor checkpoint(const Fn& fn, const Tensor& x) {
  if (!x.requires_grad() || !grad_mode_enabled()) return fn(x);
  return CheckpointFn::apply(x, fn);
}

}  // namespace spmd::autograd
