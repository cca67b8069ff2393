// The core property of data parallelism: DDP on N ranks, each with a batch
// of b sequences, ends with the same parameters after k steps as one
// process that trains on all N * b sequences at once (to 1e-5 relative in
// f32, the difference of summation orders), for N = 1, 2, 4; with buckets
// whose boundaries fall unevenly between parameters; and with the batch
// split into micro-batches whose gradients accumulate under no_sync(). The
// ranks start from different seeds, so equal results also prove that
// construction broadcast rank 0's parameters.
#include <catch2/catch.hpp>
#include <set>

#include "autograd/nn/transformer.h"
#include "autograd/optim/sgd.h"
#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/ddp/ddp.h"
#include "tests/skip.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kPerRank = 4;  // b: sequences per rank per step
constexpr uint64_t kSeed = 7;

nn::TransformerConfig small_config() {
  return nn::TransformerConfig::gpt2(/*V=*/32, /*T=*/8, /*layers=*/2, /*heads=*/2, /*C=*/16);
}

// The global batch of a step: N * b sequences, the same on every rank.
struct Batch {
  Tensor x, y;  // (N b, T)
};
Batch global_batch(int step, int64_t rows, const nn::TransformerConfig& c,
                   Device device = Device::cpu()) {
  Generator gen(1000 + uint64_t(step));
  return {
      ops::to(ops::randint(0, c.vocab_size, {rows, c.max_seq_len}, {DType::kI64}, &gen), device),
      ops::to(ops::randint(0, c.vocab_size, {rows, c.max_seq_len}, {DType::kI64}, &gen), device)};
}

optim::SGDOptions sgd() { return {.lr = 0.2, .momentum = 0.9}; }

// One process, batch N * b.
std::shared_ptr<nn::Transformer> train_reference(int world, Device device = Device::cpu()) {
  auto model = std::make_shared<nn::Transformer>(small_config(), kSeed);
  model->to(device);
  optim::SGD opt(model->parameters(), sgd());
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = global_batch(step, world * kPerRank, model->config, device);
    const Tensor loss = cross_entropy((*model)(b.x), b.y);
    opt.zero_grad();
    backward(loss);
    opt.step();
  }
  return model;
}

// N ranks, batch b each (rows rank*b .. rank*b + b of the global batch), in
// `micro` micro-batches whose gradients accumulate under no_sync().
std::shared_ptr<nn::Transformer> train_ddp(ProcessGroup& world, const DdpOptions& options,
                                           int micro, Device device = Device::cpu()) {
  const int rank = world.rank();
  // Rank 0 starts as the reference does; the others from other seeds.
  auto model = std::make_shared<nn::Transformer>(small_config(), rank == 0 ? kSeed : 100 + rank);
  model->to(device);
  auto ddp = std::make_shared<DistributedDataParallel>(model, borrow(world), options);
  optim::SGD opt(ddp->parameters(), sgd());
  const int64_t rows = kPerRank / micro;
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = global_batch(step, world.size() * kPerRank, model->config, device);
    opt.zero_grad();
    for (int j = 0; j < micro; ++j) {
      const int64_t start = rank * kPerRank + j * rows;
      auto micro_loss = [&] {
        const Tensor x = ops::narrow(b.x, 0, start, rows), y = ops::narrow(b.y, 0, start, rows);
        return mul(cross_entropy((*ddp)(x), y), 1.0 / micro);
      };
      if (j + 1 < micro) {
        auto local_only = ddp->no_sync();  // accumulate; the last micro-batch averages the sums
        backward(micro_loss());
      } else {
        backward(micro_loss());
      }
    }
    opt.step();
  }
  return model;
}

void check_same_parameters(const nn::Module& got, const nn::Module& want, const std::string& what) {
  const auto a = got.named_parameters(), b = want.named_parameters();
  expect(a.size() == b.size(), what, ": parameter counts differ");
  for (size_t i = 0; i < a.size(); ++i) {
    const double rel = relative_difference(a[i].second, b[i].second);
    expect(rel <= 1e-5, what, ": parameter ", a[i].first,
           " differs from the single-process run by ", rel, " (relative)");
  }
}

void run_equivalence(int world_size) {
  run_world(world_size, [](ProcessGroup& world) {
    const auto reference = train_reference(world.size());
    struct Case {
      const char* name;
      DdpOptions options;
      int micro;
    };
    const Case cases[] = {
        {"one default bucket", {}, 1},
        {"1 KiB buckets", {.bucket_cap_mb = 1.0 / 1024, .first_bucket_cap_mb = 0.5 / 1024}, 1},
        {"1 KiB buckets, 2 micro-batches under no_sync",
         {.bucket_cap_mb = 1.0 / 1024, .first_bucket_cap_mb = 1.0 / 1024},
         2},
        {"default bucket, 4 micro-batches under no_sync", {}, 4},
    };
    for (const Case& c : cases) {
      const auto model = train_ddp(world, c.options, c.micro);
      check_same_parameters(
          *model, *reference,
          str_cat(c.name, " on ", world.size(), " ranks (rank ", world.rank(), ")"));
    }
  });
}

}  // namespace

TEST_CASE("DDP on 1 rank equals one process", "[ddp][equivalence]") { run_equivalence(1); }
TEST_CASE("DDP on 2 ranks equals one process with twice the batch", "[ddp][equivalence]") {
  run_equivalence(2);
}
TEST_CASE("DDP on 4 ranks equals one process with 4x the batch", "[ddp][equivalence]") {
  run_equivalence(4);
}

// On a GPU: two ranks share it over the TCP backend (the CUDA tensors
// staged through host buffers; NCCL refuses two ranks on one device), the
// reference runs on the same GPU.
TEST_CASE("DDP on 2 ranks sharing one GPU equals one process on it", "[ddp][gpu][equivalence]") {
  if (!have_gpu()) SPMD_SKIP_WITHOUT_GPU("no GPU: skipping");
  run_world(2, [](ProcessGroup& world) {
    const auto reference = train_reference(world.size(), Device::cuda(0));
    const auto model = train_ddp(world, {.bucket_cap_mb = 1.0 / 1024}, 2, Device::cuda(0));
    check_same_parameters(*model, *reference, str_cat("DDP on cuda (rank ", world.rank(), ")"));
  });
}

// A 1-rank NCCL group on the GPU: the reducer's all_reduces go through
// NCCL's stream, event ordering and watchdog completion.
TEST_CASE("DDP on a 1-rank NCCL group equals one process on the GPU", "[ddp][gpu][nccl]") {
  if (!have_gpu()) SPMD_SKIP_WITHOUT_GPU("no GPU: skipping");
  run_world(
      1,
      [](ProcessGroup& world) {
        const auto reference = train_reference(1, Device::cuda(0));
        const auto model = train_ddp(world, {.bucket_cap_mb = 1.0 / 1024}, 2, Device::cuda(0));
        check_same_parameters(*model, *reference, "DDP over NCCL on cuda");
      },
      std::chrono::seconds(60), CommBackend::kNccl);
}

TEST_CASE("small caps split the model into uneven buckets, last parameters first", "[ddp]") {
  run_world(1, [](ProcessGroup& world) {
    auto model = std::make_shared<nn::Transformer>(small_config(), kSeed);
    DistributedDataParallel ddp(model, borrow(world),
                                {.bucket_cap_mb = 1.0 / 1024, .first_bucket_cap_mb = 1.0 / 1024});
    const auto buckets = ddp.bucket_parameter_names();
    const auto params = model->named_parameters();
    // Reverse registration order, every parameter once.
    std::vector<std::string> order;
    for (const auto& b : buckets) order.insert(order.end(), b.begin(), b.end());
    expect(order.size() == params.size(), "buckets hold ", order.size(), " of ", params.size(),
           " parameters");
    for (size_t i = 0; i < order.size(); ++i)
      expect(order[i] == params[params.size() - 1 - i].first, "bucket order at ", i, ": ",
             order[i]);
    // Uneven: the buckets hold different numbers of parameters (a weight
    // closes a bucket that its bias and the norms before it had started).
    std::set<size_t> counts;
    for (const auto& b : buckets) counts.insert(b.size());
    expect(buckets.size() > 4 && counts.size() > 1, "expected uneven buckets, got ", buckets.size(),
           " buckets of ", counts.size(), " distinct sizes");
    // With the default 25 MiB cap (first bucket 1 MiB) this small model is one bucket.
    DistributedDataParallel one(model, borrow(world));
    expect(one.bucket_parameter_names().size() == 1, "default caps gave ",
           one.bucket_parameter_names().size(), " buckets");
  });
}
