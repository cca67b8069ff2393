// The sweep: every (op, dtype, reduction, size) in turn, each placement
// measured and checked by every rank, the ranks' figures combined by the
// group itself.
#include "bench/collectives/sweep.h"

#include <chrono>
#include <cstdio>

#include "tensor/copy.h"
#include "tensor/factory.h"

namespace spmd::bench {
namespace {

using Clock = std::chrono::steady_clock;

Tensor on_device(const std::vector<double>& v, Device device) {
  Tensor t = ops::from_vector(v, {int64_t(v.size())});
  return device.is_cuda() ? ops::to(t, device) : t;
}

std::vector<double> to_host(const Tensor& t) {
  return ops::to_vector<double>(t.is_cpu() ? t : ops::to(t, Device::cpu()));
}

// Reduces v over the ranks (a tiny all_reduce of f64 on the group's device).
std::vector<double> reduce_over_ranks(dist::ProcessGroup& group, Device device,
                                      const std::vector<double>& v, dist::ReduceOp op) {
  Tensor t = on_device(v, device);
  group.all_reduce(t, op).wait();
  return to_host(t);
}

// Every rank's v, on rank 0 (empty elsewhere): a gather of f64.
std::vector<std::vector<double>> gather_to_rank0(dist::ProcessGroup& group, Device device,
                                                 const std::vector<double>& v) {
  const int p = group.size();
  Tensor all =
      group.rank() == 0 ? on_device(std::vector<double>(v.size() * size_t(p)), device) : Tensor();
  group.gather(all, on_device(v, device), 0).wait();
  std::vector<std::vector<double>> rows;
  if (group.rank() != 0) return rows;
  const std::vector<double> flat = to_host(all);
  for (int r = 0; r < p; ++r) {
    rows.emplace_back(flat.begin() + ptrdiff_t(size_t(r) * v.size()),
                      flat.begin() + ptrdiff_t(size_t(r + 1) * v.size()));
  }
  return rows;
}

// A cell's seconds per call from each rank's (nccl-tests' -a).
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

// Issues n calls as -z says: all at once and then waited together (0), or
// each waited, with a barrier after it (1) or without (2). With `done`, each
// call's completion time is recorded in done[i].
void issue_calls(Case& c, dist::ProcessGroup& group, int n, int blocking,
                 std::vector<Clock::time_point>* done) {
  std::vector<dist::Work> pending;
  for (int i = 0; i < n; ++i) {
    dist::Work w = c.launch();
    if (done) w.on_complete([slot = &(*done)[size_t(i)]] { *slot = Clock::now(); });
    if (blocking == 0) {
      pending.push_back(w);
      continue;
    }
    w.wait();
    if (blocking == 1) group.barrier().wait();
  }
  for (const dist::Work& w : pending) w.wait();
}

// The timed calls: seconds per call, and with -I each call's seconds.
double time_calls(Case& c, dist::ProcessGroup& group, const BenchOptions& o,
                  std::vector<double>* each) {
  issue_calls(c, group, o.warmup, o.blocking, nullptr);
  group.barrier().wait();
  std::vector<Clock::time_point> done(size_t(o.iters));
  const auto start = Clock::now();
  issue_calls(c, group, o.iters, o.blocking, o.per_iter ? &done : nullptr);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (each) {
    for (size_t i = 0; i < done.size(); ++i) {
      each->push_back(std::chrono::duration<double>(done[i] - (i ? done[i - 1] : start)).count());
    }
  }
  return seconds / o.iters;
}

// Up to o.checks checked calls: this rank's wrong elements in the first
// check that found any (0 if none did).
int64_t check_calls(Case& c, const BenchOptions& o) {
  for (int i = 0; i < o.checks; ++i) {
    c.fill();
    c.launch().wait();
    if (const int64_t wrong = c.count_wrong(); wrong > 0) return wrong;
  }
  return 0;
}

// The collective a case runs; none for sendrecv (sends and receives).
std::optional<dist::OpType> collective_of(OpKind op) {
  switch (op) {
    case OpKind::kAllReduce:
      return dist::OpType::kAllReduce;
    case OpKind::kBroadcast:
      return dist::OpType::kBroadcast;
    case OpKind::kReduce:
      return dist::OpType::kReduce;
    case OpKind::kAllGather:
      return dist::OpType::kAllGather;
    case OpKind::kReduceScatter:
      return dist::OpType::kReduceScatter;
    case OpKind::kGather:
      return dist::OpType::kGather;
    case OpKind::kScatter:
      return dist::OpType::kScatter;
    case OpKind::kAllToAll:
      return dist::OpType::kAllToAll;
    case OpKind::kAllToAllv:
      return dist::OpType::kAllToAllv;
    case OpKind::kSendRecv:
      return std::nullopt;
  }
  return std::nullopt;
}

Cell measure_cell(Case& c, OpKind op, dist::ProcessGroup& group, const BenchOptions& o,
                  Device device) {
  std::vector<double> each;
  const double mine = time_calls(c, group, o, o.per_iter ? &each : nullptr);
  Cell cell;
  // Read now: the checks and the figures below run small collectives of their own.
  if (const auto type = collective_of(op)) cell.algorithm = group.last_algorithm(*type);
  const int64_t wrong = check_calls(c, o);
  const double s = combine_times(group, device, mine, o.average);
  cell.time_us = s * 1e6;
  cell.algbw = double(c.shape().size_bytes) / s / 1e9;
  cell.busbw = cell.algbw * bus_factor(op, group.size());
  // The wrong elements and the ranks that found any, summed over ranks.
  const std::vector<double> sums = reduce_over_ranks(
      group, device, {double(wrong), wrong > 0 ? 1.0 : 0.0}, dist::ReduceOp::kSum);
  if (o.checks > 0) cell.wrong = int64_t(sums[0]);
  cell.failed_checks = int(sums[1]);
  if (o.per_iter) {
    for (double& t : each) t *= 1e6;
    cell.rank_iter_us = gather_to_rank0(group, device, each);
    cell.iter_us = reduce_over_ranks(group, device, each, dist::ReduceOp::kMax);
    cell.iter = iter_stats(cell.iter_us);
  }
  return cell;
}

struct Item {
  OpKind op;
  DType dtype;
  dist::ReduceOp redop;
  size_t bytes;
};

Row measure(const Item& it, dist::ProcessGroup& group, const BenchOptions& o, Device device) {
  Row row;
  row.op = it.op;
  const CaseShape shape = case_shape(it.op, it.bytes, it.dtype, group.size());
  row.size_bytes = shape.size_bytes;
  row.count = shape.count;
  row.dtype = it.dtype;
  if (reduces(it.op)) row.redop = it.redop;
  row.root = rooted(it.op) ? o.root : -1;
  for (Placement pl : {Placement::kOutOfPlace, Placement::kInPlace}) {
    if (!offers(it.op, pl)) continue;
    Case c(it.op, pl, it.dtype, it.redop, o.root, it.bytes, group, device);
    (pl == Placement::kOutOfPlace ? row.out_of_place : row.in_place) =
        measure_cell(c, it.op, group, o, device);
  }
  row.algorithm = row.out_of_place ? row.out_of_place->algorithm
                  : row.in_place   ? row.in_place->algorithm
                                   : "";
  return row;
}

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
    const Row row = measure(it, group, o, device);
    progress.step(row);
    on_row(row);
  }
}

}  // namespace spmd::bench
