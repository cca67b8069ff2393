// dry_run(): build the rank's layout on meta over a fake world, run one step,
// then sort the counted bytes and the logged calls (dry_run.h).
#include "train/dry_run.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <unordered_set>

#include "autograd/nn/transformer.h"
#include "parallel/comm/fake/fake_process_group.h"
#include "parallel/device_mesh.h"
#include "runtime/flag_checks.h"
#include "runtime/profiler.h"
#include "tensor/meta_memory.h"
#include "tensor/ops.h"
#include "train/parallelize.h"
#include "train/planner.h"

namespace spmd::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Bytes of the distinct storages behind `tensors` (an FSDP gradient is a
// view into its unit's padded block: the block is what is held); their
// meta blocks go into `held`.
uint64_t storage_bytes(const std::vector<Tensor>& tensors, std::unordered_set<uint64_t>& held) {
  std::set<const Storage*> seen;
  uint64_t bytes = 0;
  for (const Tensor& t : tensors) {
    if (!t.defined() || !seen.insert(t.storage().get()).second) continue;
    bytes += t.storage()->nbytes();
    held.insert(meta_block_id(*t.storage()));
  }
  return bytes;
}

// The mesh axes (of size > 1) whose line through `rank` holds exactly
// `members`, joined by "×"; else "<n> ranks of <the smallest line holding
// them>" (an expert-parallel group within the data axes); else the group's name.
std::string axis_of(const std::vector<int>& members, const std::string& group,
                    const std::vector<int64_t>& shape, const std::vector<std::string>& names,
                    int rank) {
  std::vector<int> used;
  for (int a = 0; a < int(shape.size()); ++a)
    if (shape[size_t(a)] > 1) used.push_back(a);
  const std::set<int> want(members.begin(), members.end());
  std::string within;
  size_t within_size = SIZE_MAX;
  for (uint32_t mask = 1; mask < (1u << used.size()); ++mask) {
    std::vector<int> axes;
    std::string label;
    for (size_t i = 0; i < used.size(); ++i) {
      if (!(mask >> i & 1)) continue;
      axes.push_back(used[i]);
      label += (label.empty() ? "" : "×") + names[size_t(used[i])];
    }
    const std::vector<int> line = dist::mesh_line_ranks(shape, rank, axes);
    const std::set<int> have(line.begin(), line.end());
    if (have == want) return label;
    if (line.size() < within_size &&
        std::includes(have.begin(), have.end(), want.begin(), want.end()))
      within = label, within_size = line.size();
  }
  if (want.size() == 1) return "(this rank alone)";
  if (!within.empty()) return str_cat(want.size(), " ranks of ", within);
  return group;
}

// The step's calls, summed per mesh axis (largest volume first).
std::vector<AxisTraffic> traffic_by_axis(const dist::FakeLog& log, const ParallelConfig& p,
                                         int rank) {
  const std::vector<int64_t> shape = {p.pp, p.dp_replicate, p.dp_shard, p.cp, p.tp};
  const std::vector<std::string> names = {"pp", "dp_replicate", "dp_shard", "cp", "tp"};
  std::map<std::string, std::string> axis;  // group name -> axis
  for (const dist::FakeGroup& g : log.groups())
    axis[g.name] = axis_of(g.global_ranks, g.name, shape, names, rank);
  std::map<std::string, AxisTraffic> by_axis;
  std::map<std::string, std::map<std::string, std::pair<uint64_t, uint64_t>>> by_op;
  for (const dist::FakeCall& c : log.calls()) {
    AxisTraffic& t = by_axis[axis[c.group]];
    t.axis = axis[c.group];
    t.ranks = c.group_size;
    t.calls += 1;
    t.bytes += c.bytes;
    auto& [calls, bytes] = by_op[t.axis][std::string(dist::op_name(c.op))];
    calls += 1, bytes += c.bytes;
  }
  std::vector<AxisTraffic> out;
  for (auto& [name, t] : by_axis) {
    for (const auto& [op, cb] : by_op[name])
      t.ops.push_back(str_cat(op, " ×", cb.first, " = ", format_gb(cb.second)));
    out.push_back(std::move(t));
  }
  std::sort(out.begin(), out.end(),
            [](const AxisTraffic& a, const AxisTraffic& b) { return a.bytes > b.bytes; });
  return out;
}

// "12,345,678"
std::string grouped(uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

// The products' bytes are the GEMMs' and attention's, timed by FLOPs; the
// rest is memory traffic. Returns their total and the rows per op name.
double traffic_of(const std::vector<profiler::OpStats>& rows,
                  std::vector<std::pair<std::string, double>>& ops) {
  static const std::set<std::string> kProducts = {"matmul", "attention", "attention_backward"};
  std::map<std::string, double> by_name;
  double total = 0;
  for (const profiler::OpStats& r : rows) {
    if (kProducts.count(r.name) || r.bytes == 0) continue;
    by_name[r.name] += r.bytes;
    total += r.bytes;
  }
  ops.assign(by_name.begin(), by_name.end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  return total;
}

}  // namespace

void train_one_step(Parallelized& par, const TrainConfig& config, const Tensor& x, const Tensor& y,
                    const std::function<void()>& after_backward) {
  par.zero_grad();
  const double loss = par.forward_backward(x, y);
  if (after_backward) after_backward();
  par.sync_gradients();
  par.clip_grad_norm(config.training.grad_clip);
  par.batch_loss(loss);
  par.optimizer_step(config.optimizer.lr);
}

void check_dry_run(const TrainConfig& config, int64_t world, int64_t rank) {
  const int64_t kMaxWorld = std::numeric_limits<int32_t>::max();
  std::string e = flags::count_error(std::to_string(world), 1, kMaxWorld);
  SPMD_CHECK(e.empty(), "--world: ", e);
  e = flags::count_error(std::to_string(rank), 0, world - 1);
  SPMD_CHECK(e.empty(), "--rank: ", e, " (the ranks of --world ", world, " are 0 .. ", world - 1,
             ")");
  check_layout(config, int(world));
}

DryRun dry_run(const TrainConfig& config, int64_t world_size, int64_t rank) {
  check_dry_run(config, world_size, rank);
  DryRun r;
  r.rank = rank, r.world = world_size;
  const Clock::time_point start = Clock::now();
  MetaReadsAsZeros stand_in;  // the loss and the norm read as zeros
  const auto world = dist::FakeProcessGroup::create(int(rank), int(world_size));
  dist::DeviceMesh mesh = build_mesh(world, config.parallel);
  std::shared_ptr<nn::Transformer> model;
  {
    DefaultDeviceGuard meta(Device::meta());  // as spmd-train builds it
    model =
        std::make_shared<nn::Transformer>(transformer_config(config.model), config.training.seed);
  }
  Parallelized par = parallelize(std::move(model), mesh, config, Device::meta());
  r.build_seconds = seconds_since(start);

  const Clock::time_point step_start = Clock::now();
  world->log()->clear_calls();  // the layout's own set-up (DDP's broadcast) is not the step's
  MetaAllocationLog allocations;
  const Shape rows{config.training.global_batch / par.dp_size(), config.model.seq_len};
  const Tensor x = ops::empty(rows, {DType::kI64, Device::meta()});
  size_t backward_end = 0;  // this rank's rows, as meta tensors
  // The profiler counts the ops' bytes (the meta backend's ops run through
  // its wrapper as a real backend's do), the passes apart from the update.
  std::vector<profiler::OpStats> passes;
  profiler::reset();
  profiler::start();
  train_one_step(par, config, x, x, [&] {
    backward_end = allocations.size();
    profiler::stop();
    passes = profiler::key_averages();
    profiler::reset();
    profiler::start();
  });
  profiler::stop();
  r.pass_bytes = traffic_of(passes, r.pass_ops);
  r.update_bytes = traffic_of(profiler::key_averages(), r.update_ops);
  profiler::reset();
  r.step_seconds = seconds_since(step_start);

  std::vector<Tensor> params, grads, state;
  for (const auto& [name, p] : par.named_parameters())
    params.push_back(p), grads.push_back(p.grad());
  for (const auto& [key, t] : par.optimizer().state_dict())
    if (!key.ends_with(".step")) state.push_back(t);
  std::unordered_set<uint64_t> held;
  r.parameters = storage_bytes(params, held);
  r.gradients = storage_bytes(grads, held);
  r.optimizer = storage_bytes(state, held);
  r.activation_peak = allocations.peak_excluding(held, 0, backward_end);
  r.update_peak = allocations.peak_excluding(held, backward_end);
  r.traffic = traffic_by_axis(*world->log(), config.parallel, int(rank));
  r.calls = world->log()->calls();
  return r;
}

std::string dry_run_report(const DryRun& run, const MemoryPlan& plan, const StepTraffic& planned) {
  std::string out = str_cat("dry run: rank ", run.rank, " of ", run.world, ", one step on meta ",
                            "tensors through a fake process group (built in ",
                            str_cat(int64_t(run.build_seconds * 1000)), " ms, step ",
                            int64_t(run.step_seconds * 1000), " ms)\n");
  const auto row = [&](const std::string& what, uint64_t counted, uint64_t planned) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-28s %22s  %10s   plan %10s\n", what.c_str(),
                  grouped(counted).c_str(), format_gb(counted).c_str(), format_gb(planned).c_str());
    out += line;
  };
  out += "memory of this rank (counted bytes)\n";
  row("parameters", run.parameters, plan.parameters);
  row("gradients", run.gradients, plan.gradients);
  row("optimizer state", run.optimizer, plan.optimizer);
  row("activations (peak, + gathered)", run.activation_peak,
      plan.activations + plan.logits + plan.gathered);
  out += str_cat("  after the backwards (sync, clip, AdamW): a peak of ",
                 format_gb(run.update_peak), " beside the three, which the plan does not count\n");
  out += str_cat("  (the plan's: activations ", format_gb(plan.activations), " for ",
                 plan.in_flight, " microbatches in flight, logits ", format_gb(plan.logits),
                 ", gathered ", format_gb(plan.gathered), ")\n");
  out +=
      "memory traffic of this rank per step: bytes the ops other than the products read and "
      "write\n";
  const auto traffic = [&](const char* when, double total, double plan_bytes,
                           const std::vector<std::pair<std::string, double>>& ops) {
    out += str_cat("  ", when, ": ", format_gb(uint64_t(total)), ", plan ",
                   format_gb(uint64_t(plan_bytes)), " (");
    for (size_t i = 0; i < ops.size() && i < 4; ++i)
      out += str_cat(i ? ", " : "", ops[i].first, " ", format_gb(uint64_t(ops[i].second)));
    out += ops.size() > 4 ? ", ...)\n" : ")\n";
  };
  traffic("forwards and backwards", run.pass_bytes, planned.passes, run.pass_ops);
  traffic("after them (sync, clip, AdamW)", run.update_bytes, planned.update, run.update_ops);
  out += str_cat("  (a first step: AdamW's moments are made, ", format_gb(run.optimizer),
                 " of zeros, which later steps do not write; the norm reads as zero on meta, ",
                 "so the clip's ", format_gb(uint64_t(planned.clip)), " is not run)\n");
  out += "communication of this rank per step (payload bytes, as CommStats counts them)\n";
  if (run.traffic.empty()) out += "  none\n";
  for (const AxisTraffic& t : run.traffic) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-22s %6lld ranks %8llu calls %12s:", t.axis.c_str(),
                  (long long)t.ranks, (unsigned long long)t.calls, format_gb(t.bytes).c_str());
    out += line;
    for (size_t i = 0; i < t.ops.size(); ++i) out += (i ? ", " : " ") + t.ops[i];
    out += "\n";
  }
  return out;
}

}  // namespace spmd::train
