// 09_device_mesh: two strategies at once on a grid of ranks (chapter 16.6).
// The chapter's 8 ranks as 2 replicas x 4 partitions: a dist::DeviceMesh
// reshapes the world's ranks into a {dp, tp} grid and gives each rank one
// group per axis, its row ("tp": the ranks that split one copy of the model)
// and its column ("dp": the ranks that hold the same slice of different
// copies). Each strategy takes the group of its axis, never the world:
//   - every rank prints its coordinate and the world ranks of its two groups;
//   - the Megatron MLP (column-parallel then row-parallel Linear) split over
//     each tp group, every replica on its own input at the same time,
//     checked against the unsplit MLP;
//   - training: 08's tensor-parallel transformer over mesh["tp"], wrapped in
//     05's DistributedDataParallel over the dp group, with a
//     DistributedSampler over the dp coordinate: each replica reads its own
//     shard and the ranks of one tp group read the same sequences.
// Not here: more axes (pipeline, FSDP), flatten() of several axes into one.
//
//   spmdrun --standalone --nproc-per-node 8 09_device_mesh --dp 2 --tp 4 --data
//   ../shared/data/tinyshakespeare.txt
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/nn/layers.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/lr_schedule.h"
#include "autograd/train_loop.h"
#include "examples/common/flags.h"
#include "parallel/comm/init.h"
#include "parallel/data_loader.h"
#include "parallel/ddp/ddp.h"
#include "parallel/device_mesh.h"
#include "parallel/placement.h"
#include "parallel/tensor_parallel/loss.h"
#include "parallel/tensor_parallel/plan.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;
namespace tp = dist::tp;

namespace {

constexpr double kTolerance = 1e-5;  // f32, a different summation order

struct Flags {
  std::string data, config = "tiny";
  int64_t dp = 2, tp = 4, steps = 600, batch = 8, warmup = 50, log_every = 50;
  double lr = 2e-3, grad_clip = 1.0;
  uint64_t seed = 1337;
  int threads = 1;
  bool sequence_parallel = false;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  examples::Cli cli("Train over a dp x tp mesh: DDP over dp, tensor parallel over tp (spmdrun).");
  cli.data(f.data).config(f.config).steps(f.steps);
  cli.batch(f.batch, "sequences per replica per step");
  cli.lr(f.lr).warmup(f.warmup).grad_clip(f.grad_clip);
  cli.seed(f.seed).threads(f.threads).log_every(f.log_every);
  CLI::App& app = cli.app();
  app.add_option("--dp", f.dp, "replicas (dp x tp = the world size)")->check(spmd::flags::count(1));
  app.add_option("--tp", f.tp, "ranks that split each replica")->check(spmd::flags::count(1));
  app.add_flag("--sequence-parallel", f.sequence_parallel, "norms and residuals on T/tp tokens");
  cli.parse(argc, argv);
  return f;
}

// The world ranks of a group's members: "[1, 5]".
std::string members(const dist::ProcessGroup& group) {
  std::string s = "[";
  for (int r = 0; r < group.size(); ++r) s += str_cat(r ? ", " : "", group.global_rank(r));
  return s + "]";
}

// Rank 0 draws the grid: row d is the tp line through the d-th rank of its dp line.
void print_grid(const dist::DeviceMesh& mesh) {
  std::printf("the world as a grid:\n     ");
  for (int64_t t = 0; t < mesh.size("tp"); ++t) std::printf(" tp=%lld", (long long)t);
  for (const int start : dist::mesh_line_ranks(mesh.shape(), 0, {0})) {
    std::printf("\n dp=%lld", (long long)dist::mesh_coordinate(mesh.shape(), start)[0]);
    for (const int r : dist::mesh_line_ranks(mesh.shape(), start, {1})) std::printf("%5d", r);
  }
  std::printf("\n");
}

double max_difference(const Tensor& a, const Tensor& b) {
  return ops::amax(ops::abs(ops::sub(a, b))).item<double>();
}

// Megatron's MLP, w2(gelu(w1(x))), on the input x (4, 8), with the input gradient.
struct Mlp {
  Generator gen{5};  // the same weights on every rank
  nn::Linear w1{8, 32, true, &gen}, w2{32, 8, true, &gen};
  std::pair<Tensor, Tensor> run(const Tensor& x0) {
    Tensor x = ops::clone(x0);
    x.requires_grad_();
    const Tensor y = w2(gelu(w1(x)));
    backward(sum(y));
    return {detach(y), x.grad()};
  }
};

// Each tp group splits the MLP (w1 column-wise, w2 row-wise: one all_reduce
// forward, one backward), while each dp replica feeds it a different x.
void check_mlp(const dist::DeviceMesh& mesh) {
  Generator data(100 + uint64_t(mesh.coordinate("dp")));
  const Tensor x = ops::randn({4, 8}, {}, &data);  // (B, C), replica d's own
  Mlp whole, split;
  const auto [y, dx] = whole.run(x);
  tp::ColwiseParallel().apply(split.w1, "w1", mesh["tp"]);  // (B, 32/tp) per rank, no gather
  tp::RowwiseParallel().apply(split.w2, "w2", mesh["tp"]);  // partial sums, all_reduced
  const auto [ys, dxs] = split.run(x);
  const double y_diff = max_difference(ys, y), dx_diff = max_difference(dxs, dx);
  std::printf("%s: MLP split over %s, max difference output %.2g input grad %.2g\n",
              mesh.describe().c_str(), members(mesh.group("tp")).c_str(), y_diff, dx_diff);
  SPMD_CHECK(y_diff <= kTolerance && dx_diff <= kTolerance,
             "the tensor-parallel MLP differs from the unsplit one");
}

// Whether every rank of `group` holds the same x: its maximum over the group is its minimum.
bool same_on_group(const Tensor& x, dist::ProcessGroup& group) {
  Tensor hi = ops::clone(x), lo = ops::clone(x);
  group.all_reduce(hi, dist::ReduceOp::kMax).wait();
  group.all_reduce(lo, dist::ReduceOp::kMin).wait();
  return ops::amax(ops::abs(ops::sub(hi, lo))).item<int64_t>() == 0;
}

// The data contract of the mesh: one batch per tp group (its ranks compute one
// model together), a different one per replica (else dp averages copies).
void check_batches(const data::Batch& b, const dist::DeviceMesh& mesh) {
  const bool tp_same = same_on_group(b.x, mesh.group("tp"));
  const bool dp_same = mesh.size("dp") > 1 && same_on_group(b.x, mesh.group("dp"));
  SPMD_CHECK(tp_same && !dp_same, "the batches break the mesh: ",
             tp_same ? "the replicas read the same batch" : "the ranks of a tp group differ");
  if (mesh.coordinate() == std::vector<int64_t>{0, 0})
    std::printf("step 0: each tp group read one batch, the %lld replicas different ones\n",
                (long long)mesh.size("dp"));
}

void train(const dist::DeviceMesh& mesh, const Flags& f) {
  dist::ProcessGroup &tp_group = mesh.group("tp"), &dp_group = mesh.group("dp");
  const bool lead = mesh.coordinate() == std::vector<int64_t>{0, 0};
  const data::TextDataset ds = data::TextDataset::from_file(f.data);
  auto model = std::make_shared<nn::Transformer>(nn::TransformerConfig::preset(f.config), f.seed);
  tp::parallelize_transformer(*model, mesh["tp"], f.sequence_parallel);  // first split ...
  dist::DistributedDataParallel ddp(model, mesh.group_ptr("dp"));        // ... then replicate
  const int64_t B = f.batch, T = model->config.max_seq_len;
  check_memory_fits(str_cat("training with --batch ", B, " per replica (config ", f.config, ")"),
                    nn::training_step_bytes_lower_bound(model->config, model->num_parameters(), B) /
                        uint64_t(mesh.size("tp")));
  if (lead)
    std::printf("dp %lld x tp %lld, config %s%s: %lld tokens per step\n", (long long)f.dp,
                (long long)f.tp, f.config.c_str(),
                f.sequence_parallel ? " + sequence parallel" : "", (long long)(f.dp * B * T));

  const std::vector<Tensor> params = ddp.parameters();  // this rank's slices
  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = 0.1});
  const optim::WarmupCosine schedule(f.lr, std::min(f.warmup, f.steps), f.steps, f.lr / 10);
  // This replica's batches: windows of T + 1 tokens dealt over the dp axis
  // only, so every rank of a tp group draws the same windows.
  dist::DataLoader batches(ds, T, mesh.size("dp") * B, mesh.group("dp"), f.seed);
  uint64_t tp_bytes = 0, dp_bytes = 0;
  LogWindow window(f.log_every, f.steps);  // autograd/train_loop.h, as in 01
  for (int64_t step = 0; step < f.steps; ++step) {
    const data::Batch b = batches.next();  // this replica's shard
    if (step == 0) check_batches(b, mesh);
    tp_group.reset_stats();
    dp_group.reset_stats();
    const Tensor loss = tp::vocab_parallel_cross_entropy(ddp(b.x), b.y, tp_group);  // (B, T, V/tp)
    opt.zero_grad();
    backward(loss);  // tp: activations inside each layer; dp: gradients averaged
    tp_bytes = tp_group.stats().total_bytes();
    dp_bytes = dp_group.stats().total_bytes();
    if (f.grad_clip > 0) dist::clip_grad_norm_(params, f.grad_clip);
    opt.set_lr(schedule(step));
    opt.step();

    if (window.end_step(step, f.dp * B * T)) {  // the same steps on every rank
      Tensor mean_loss = ops::clone(detach(loss));
      dp_group.all_reduce(mean_loss, dist::ReduceOp::kAvg).wait();  // over the replicas, to log
      const double tokens_per_s = window.tokens_per_second();
      if (lead)
        std::printf("step %lld loss %.4f tok/s %.0f\n", (long long)step, mean_loss.item<double>(),
                    tokens_per_s);
      std::fflush(stdout);
    }
  }
  int64_t shard_bytes = 0;
  for (const Tensor& p : params) shard_bytes += int64_t(p.nbytes());
  const uint64_t formula =
      tp::transformer_tp_comm_per_step(model->config, B, T, f.sequence_parallel).total_bytes();
  if (lead)
    std::printf(
        "per step: tp moved %llu bytes (%s %llu), dp %llu (gradients: this "
        "rank's %lld parameter bytes)\n",
        (unsigned long long)tp_bytes,
        tp_bytes == formula ? "as the formula says:" : "but the formula says",
        (unsigned long long)formula, (unsigned long long)dp_bytes, (long long)shard_bytes);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    set_num_threads(flags.threads);
    {
      const dist::DeviceMesh mesh(world, {flags.dp, flags.tp}, {"dp", "tp"});  // dp x tp = world
      if (world->rank() == 0) print_grid(mesh);
      std::printf("%s: dp group %s, tp group %s\n", mesh.describe().c_str(),
                  members(mesh.group("dp")).c_str(), members(mesh.group("tp")).c_str());
      check_mlp(mesh);
      train(mesh, flags);
    }
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "09_device_mesh: %s\n", e.what());
    return 1;
  }
  return 0;
}
