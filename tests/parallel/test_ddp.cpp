// DDP's behaviour beyond equivalence (test_ddp_equivalence.cpp): the
// all_reduce of the first buckets runs while backward is still computing;
// the reducer tells its observer (the timing's only source) each step in
// order; ranks whose models differ get a clear error at construction; a parameter
// without a gradient is an error naming it, or is handled with
// find_unused_parameters; the bf16 hook averages to bf16 precision.
// Real processes over loopback; every wait is bounded by the group timeout.
#include <catch2/catch.hpp>

#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/ddp/ddp.h"
#include "runtime/error.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

// The gradients of `model` for the whole batch `x` (one process).
std::vector<Tensor> full_batch_gradients(Mlp& model, const Tensor& x) {
  model.zero_grad();
  backward(mean(square(model(x))));
  std::vector<Tensor> grads;
  for (const Tensor& p : model.parameters())  // an unused parameter's gradient is zero
    grads.push_back(p.grad().defined() ? ops::clone(p.grad()) : ops::zeros_like(p));
  model.zero_grad();
  return grads;
}

Tensor batch(int64_t rows, int64_t width, uint64_t seed) {
  Generator gen(seed);
  return ops::randn({rows, width}, {}, &gen);
}

}  // namespace

TEST_CASE("overlap: the first buckets are reduced while backward still runs", "[ddp][overlap]") {
  run_world(2, [](ProcessGroup& world) {
    // 8 layers of 384 x 384: each weight (576 KiB) is a bucket of its own,
    // so the last layer's bucket launches while 7 layers' backward remain.
    auto model = std::make_shared<Mlp>(384, 8, 3);
    DistributedDataParallel ddp(model, borrow(world),
                                {.bucket_cap_mb = 0.5, .first_bucket_cap_mb = 0.5});
    expect(ddp.bucket_parameter_names().size() >= 8, "expected a bucket per layer");
    const Tensor x = batch(256, 384, 10 + uint64_t(world.rank()));
    int completed_early = 0;
    for (int step = 0; step < 3; ++step) {
      ddp.zero_grad();
      backward(mean(square(ddp(x))));
      const SyncTimeline& t = ddp.last_sync();
      expect(t.buckets.size() == ddp.bucket_parameter_names().size(), "every bucket was reduced");
      // Launched from the hooks, long before the last node of backward ran...
      expect(t.buckets[0].launch_us < t.compute_end_us && t.buckets[1].launch_us < t.compute_end_us,
             "the first buckets launched only after backward ended");
      // ...and (on a machine not starved of cores) finished before it, too.
      if (t.buckets[0].done_us < t.compute_end_us) ++completed_early;
      expect(t.hidden_us() <= t.comm_us() && t.end_us >= t.compute_end_us, "timeline out of order");
    }
    expect(completed_early > 0, "the first bucket's all_reduce never finished during backward");
  });
}

TEST_CASE("the reducer tells its observer each step in order; a local backward tells nothing",
          "[ddp][observer]") {
  run_world(2, [](ProcessGroup& world) {
    struct Log : ReducerObserver {
      std::string calls;
      void backward_started() override { calls += "start "; }
      void bucket_launched(size_t i, const Work&, size_t bytes) override {
        calls += str_cat("bucket", i, ":", bytes, " ");
      }
      void waiting_started() override { calls += "wait "; }
      void backward_finished() override { calls += "done"; }
    };
    auto model = std::make_shared<Mlp>(4, 2, 1);  // fc0, fc1: weights 4 x 4, biases 4
    std::vector<std::pair<std::string, Tensor>> params = model->named_parameters();
    auto reducer = std::make_shared<Reducer>(
        params, borrow(world), ReducerOptions{.bucket_cap_mb = 1e-6, .first_bucket_cap_mb = 1e-6});
    auto log = std::make_shared<Log>();
    reducer->set_observer(log);
    reducer->attach();
    const Tensor x = batch(3, 4, 2);
    reducer->prepare_for_backward(false);  // as under no_sync(): no reduction, no calls
    backward(mean(square((*model)(x))));
    expect(log->calls.empty(), "a local backward told the observer: ", log->calls);
    reducer->prepare_for_backward(true);
    backward(mean(square((*model)(x))));
    // A bucket per parameter (caps of 1 byte), the last parameter first: fc1.bias (16 B),
    // fc1.weight (64 B), fc0.bias, fc0.weight.
    expect(log->calls == "start bucket0:16 bucket1:64 bucket2:16 bucket3:64 wait done",
           "the observer heard: ", log->calls);
  });
}

TEST_CASE("different parameter shapes across ranks: a clear error at construction, on every rank",
          "[ddp][errors]") {
  for (int world_size : {2, 3}) {
    run_world(world_size, [](ProcessGroup& world) {
      // The last rank's second layer is 4 -> 5 instead of 4 -> 3.
      const bool odd_one = world.rank() == world.size() - 1;
      auto model = std::make_shared<Mlp>(4, 1, 0, /*spare_out=*/odd_one ? 5 : 3);
      try {
        DistributedDataParallel ddp(model, borrow(world));
      } catch (const InvalidArgument& e) {
        const std::string msg = e.what();
        const std::string last = std::to_string(world.size() - 1);
        expect(msg.find("parameter 'spare.weight' with shape [3, 4] f32 on rank 0") !=
                       std::string::npos &&
                   msg.find("but [5, 4] f32 on rank " + last) != std::string::npos,
               "unclear message: ", msg);
        return;
      }
      expect(false, "no error for parameters of different shapes");
    });
  }
}

TEST_CASE("a different number of layers across ranks: the first extra entry is named",
          "[ddp][errors]") {
  run_world(2, [](ProcessGroup& world) {
    // Rank 1 has one more hidden layer: its list is longer by a weight and a bias.
    auto model = std::make_shared<Mlp>(4, world.rank() == 0 ? 1 : 2, 0);
    try {
      DistributedDataParallel ddp(model, borrow(world));
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      expect(msg.find("rank 0 has 2 entries and rank 1 has 4; the first extra one is parameter "
                      "'fc1.weight' with shape [4, 4] f32 on rank 1") != std::string::npos,
             "unclear message: ", msg);
      return;
    }
    expect(false, "no error for models of different depths");
  });
}

TEST_CASE("a parameter without a gradient: an error naming it, not a hang", "[ddp][errors]") {
  run_world(2, [](ProcessGroup& world) {
    auto model = std::make_shared<Mlp>(8, 2, 1, /*spare_out=*/8);  // spare never used
    DistributedDataParallel ddp(model, borrow(world), {.bucket_cap_mb = 1e-4});
    const Tensor x = batch(4, 8, 5);
    try {
      backward(mean(square(ddp(x))));
      expect(false, "no error for the unused parameters");
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      expect(msg.find("2 parameter(s) received no gradient") != std::string::npos &&
                 msg.find("'spare.weight'") != std::string::npos &&
                 msg.find("find_unused_parameters") != std::string::npos,
             "unclear message: ", msg);
    }
    // The DDP is usable again after the error: the next backward synchronizes.
    model->use_spare = true;
    ddp.zero_grad();
    backward(mean(square(ddp(x))));
    expect(ddp.last_sync().buckets.size() == ddp.bucket_parameter_names().size(),
           "the next backward did not reduce every bucket");
  });
}

TEST_CASE("find_unused_parameters: zeros for ranks that skip a parameter, none if all do",
          "[ddp][unused]") {
  run_world(2, [](ProcessGroup& world) {
    auto model = std::make_shared<Mlp>(6, 2, 4, /*spare_out=*/6);
    auto reference = std::make_shared<Mlp>(6, 2, 4, 6);  // the same weights (same seed)
    DistributedDataParallel ddp(model, borrow(world),
                                {.bucket_cap_mb = 1e-4, .find_unused_parameters = true});
    const Tensor x0 = batch(4, 6, 20), x1 = batch(4, 6, 21);
    // Rank 0 uses the spare layer, rank 1 does not.
    model->use_spare = world.rank() == 0;
    backward(mean(square(ddp(world.rank() == 0 ? x0 : x1))));
    // Expected: the mean of rank 0's gradient (spare used) and rank 1's
    // (spare unused: zero for the spare, its own for the rest).
    reference->use_spare = true;
    const auto g0 = full_batch_gradients(*reference, x0);
    reference->use_spare = false;
    const auto g1 = full_batch_gradients(*reference, x1);
    const auto params = model->named_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const bool spare = params[i].first.rfind("spare", 0) == 0;
      const Tensor want = spare ? ops::mul(g0[i], 0.5) : ops::mul(ops::add(g0[i], g1[i]), 0.5);
      const double rel = relative_difference(params[i].second.grad(), want);
      expect(rel < 1e-6, params[i].first, " gradient off by ", rel);
    }
    // No rank uses the spare: its .grad stays untouched (undefined after zero_grad).
    model->use_spare = false;
    ddp.zero_grad();
    backward(mean(square(ddp(x0))));
    expect(!model->spare->weight.grad().defined() && model->fc[0]->weight.grad().defined(),
           "a parameter no rank used got a gradient");
  });
}

TEST_CASE("bf16 compression hook: gradients averaged to bf16 precision", "[ddp][hook]") {
  run_world(2, [](ProcessGroup& world) {
    auto model = std::make_shared<Mlp>(32, 3, 2);
    auto reference = std::make_shared<Mlp>(32, 3, 2);
    DistributedDataParallel ddp(model, borrow(world), {.bucket_cap_mb = 2e-3});
    ddp.register_comm_hook(bf16_compress_hook);
    const Tensor x = batch(8, 32, 30);
    backward(mean(square(ddp(ops::narrow(x, 0, 4 * world.rank(), 4)))));
    const auto want = full_batch_gradients(*reference, x);
    const auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const double rel = relative_difference(params[i].grad(), want[i]);
      // bf16 keeps 8 significant bits (relative rounding error <= 2^-9 per rounding).
      expect(rel < 1e-2, "parameter ", i, " off by ", rel);
      expect(rel > 1e-7, "parameter ", i, " matches f32 exactly: was the hook used?");
    }
  });
}
