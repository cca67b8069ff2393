// The sweep: every (op, dtype, reduction, size) in turn, each measured and
// checked by every rank, the ranks' figures combined by the group itself.
#include "bench/collectives/sweep.h"

#include <chrono>
#include <cstdio>

#include "tensor/copy.h"
#include "tensor/factory.h"

namespace spmd::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Reduces v over the ranks (a tiny all_reduce of f64 on the group's device).
std::vector<double> reduce_over_ranks(dist::ProcessGroup& group, Device device,
                                      const std::vector<double>& v, dist::ReduceOp op) {
  Tensor t = ops::from_vector(v, {int64_t(v.size())});
  if (device.is_cuda()) t = ops::to(t, device);
  group.all_reduce(t, op).wait();
  return ops::to_vector<double>(t.is_cpu() ? t : ops::to(t, Device::cpu()));
}

// A row's seconds per call from each rank's (nccl-tests' -a).
double combine_times(dist::ProcessGroup& group, Device device, double mine, int average) {
  if (average == 1) return reduce_over_ranks(group, device, {mine}, dist::ReduceOp::kAvg)[0];
  if (average == 0)
    return reduce_over_ranks(group, device, {group.rank() == 0 ? mine : 0.0},
                             dist::ReduceOp::kSum)[0];
  const double sign = average == 2 ? -1 : 1;  // the fastest rank's: the max of -t
  return sign * reduce_over_ranks(group, device, {sign * mine}, dist::ReduceOp::kMax)[0];
}

// Prints where a long sweep is, on stderr, at most every two seconds.
class Progress {
 public:
  Progress(bool enabled, size_t total) : enabled_(enabled), total_(total) {}
  void step(const Row& last) {
    ++done_;
    if (!enabled_ || Clock::now() - last_ < std::chrono::seconds(2)) return;
    last_ = Clock::now();
    std::fprintf(stderr, "spmd-bench: %zu/%zu rows done (last: %s of %zu B)\n", done_, total_,
                 std::string(op_kind_name(last.op)).c_str(), last.size_bytes);
  }

 private:
  bool enabled_;
  size_t total_, done_ = 0;
  Clock::time_point last_ = Clock::now();
};

// Times `iters` calls (each waited) after `warmup` of them; seconds per call.
double time_calls(Case& c, dist::ProcessGroup& group, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) c.launch().wait();
  group.barrier().wait();
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) c.launch().wait();
  return std::chrono::duration<double>(Clock::now() - start).count() / std::max(iters, 1);
}

Row measure(OpKind op, DType dtype, dist::ReduceOp redop, size_t bytes, dist::ProcessGroup& group,
            const BenchOptions& o, Device device) {
  Case c(op, dtype, redop, o.root, bytes, group, device);
  Row row;
  row.op = op;
  row.size_bytes = c.shape().size_bytes;
  row.count = c.shape().count;
  row.dtype = dtype;
  if (reduces(op)) row.redop = redop;
  row.root = rooted(op) ? o.root : -1;
  const double seconds = time_calls(c, group, o.warmup, o.iters);
  int64_t wrong = 0;
  for (int i = 0; i < o.checks; ++i) {
    c.fill();
    c.launch().wait();
    wrong += c.count_wrong();
  }
  const double s = combine_times(group, device, seconds, o.average);
  row.time_us = s * 1e6;
  row.algbw = double(row.size_bytes) / s / 1e9;
  row.busbw = row.algbw * bus_factor(op, group.size());
  row.wrong = int64_t(reduce_over_ranks(group, device, {double(wrong)}, dist::ReduceOp::kSum)[0]);
  return row;
}

struct Item {
  OpKind op;
  DType dtype;
  dist::ReduceOp redop;
  size_t bytes;
};

// Every row of the sweep, in order: op, dtype, reduction, size. Sizes that
// round to nothing (fewer elements than ranks) or to the row before are left out.
std::vector<Item> plan(const BenchOptions& o, int world_size) {
  const std::vector<size_t> sizes = sweep_sizes(o);
  std::vector<Item> items;
  for (OpKind op : o.ops) {
    for (DType dt : o.dtypes) {
      for (dist::ReduceOp rop : reduces(op) ? o.redops : std::vector{dist::ReduceOp::kSum}) {
        if (rop == dist::ReduceOp::kAvg && !is_floating(dt)) continue;  // avg needs a float
        size_t last_size = 0;
        for (size_t bytes : sizes) {
          const CaseShape s = case_shape(op, bytes, dt, world_size);
          if (s.count == 0 || s.size_bytes == last_size) continue;  // rounds to nothing new
          last_size = s.size_bytes;
          items.push_back({op, dt, rop, bytes});
        }
      }
    }
  }
  return items;
}

}  // namespace

size_t count_rows(const BenchOptions& o, int world_size) { return plan(o, world_size).size(); }

void run_sweep(dist::ProcessGroup& group, const BenchOptions& o, Device device,
               const std::function<void(const Row&)>& on_row) {
  const std::vector<Item> items = plan(o, group.size());
  Progress progress(group.rank() == 0, items.size());
  for (const Item& it : items) {
    const Row row = measure(it.op, it.dtype, it.redop, it.bytes, group, o, device);
    progress.step(row);
    on_row(row);
  }
}

}  // namespace spmd::bench
