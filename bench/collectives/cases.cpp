// The op table, the shapes nccl-tests gives each op, and all_to_allv's
// uneven blocks. The Case class (buffers, call, fill, check) is in case.cpp.
#include "bench/collectives/cases.h"

#include <algorithm>

namespace spmd::bench {

const std::vector<OpKind>& all_op_kinds() {
  static const std::vector<OpKind> kAll = {
      OpKind::kAllReduce,     OpKind::kBroadcast, OpKind::kReduce,  OpKind::kAllGather,
      OpKind::kReduceScatter, OpKind::kGather,    OpKind::kScatter, OpKind::kAllToAll,
      OpKind::kAllToAllv,     OpKind::kSendRecv};
  return kAll;
}

std::string_view op_kind_name(OpKind op) {
  switch (op) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kGather:
      return "gather";
    case OpKind::kScatter:
      return "scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kAllToAllv:
      return "all_to_allv";
    case OpKind::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

std::optional<OpKind> parse_op_kind(std::string_view name) {
  for (OpKind op : all_op_kinds()) {
    if (op_kind_name(op) == name) return op;
  }
  return std::nullopt;
}

bool reduces(OpKind op) {
  return op == OpKind::kAllReduce || op == OpKind::kReduce || op == OpKind::kReduceScatter;
}

bool rooted(OpKind op) {
  return op == OpKind::kBroadcast || op == OpKind::kReduce || op == OpKind::kGather ||
         op == OpKind::kScatter;
}

bool offers(OpKind op, Placement placement) {
  switch (op) {
    case OpKind::kAllToAll:
    case OpKind::kAllToAllv:
    case OpKind::kSendRecv:
      return placement == Placement::kOutOfPlace;  // an overlap is refused
    default:
      return true;
  }
}

double bus_factor(OpKind op, int p) {
  switch (op) {
    case OpKind::kAllReduce:
      return 2.0 * (p - 1) / p;
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kGather:
    case OpKind::kScatter:
    case OpKind::kAllToAll:
    case OpKind::kAllToAllv:
      return double(p - 1) / p;
    default:
      return 1;
  }
}

CaseShape case_shape(OpKind op, size_t bytes, DType dtype, int p) {
  const size_t elem = element_size(dtype);
  const size_t total = bytes / elem;
  CaseShape s;
  switch (op) {
    case OpKind::kAllGather:  // count: each rank's input
    case OpKind::kGather:
      s.count = total / size_t(p);
      s.in_count = s.count;
      s.out_count = s.count * size_t(p);
      break;
    case OpKind::kReduceScatter:  // count: each rank's output
    case OpKind::kScatter:
      s.count = total / size_t(p);
      s.in_count = s.count * size_t(p);
      s.out_count = s.count;
      break;
    case OpKind::kAllToAll:  // count: the block for each peer (all_to_allv: on average)
    case OpKind::kAllToAllv:
      s.count = total / size_t(p);
      s.in_count = s.out_count = s.count * size_t(p);
      break;
    case OpKind::kSendRecv:
      s.count = s.in_count = s.out_count = total;
      break;
    default:  // all_reduce, broadcast, reduce: the output (out of place) as large as the input
      s.count = s.in_count = s.out_count = total;
      break;
  }
  s.size_bytes = std::max(s.in_count, s.out_count) * elem;
  return s;
}

// --- all_to_allv's blocks ------------------------------------------------------------

namespace {
// Where part k starts when n is cut in proportion 1 : 2 : ... : p.
size_t weighted_part_begin(size_t n, int p, int k) {
  const size_t total_weight = size_t(p) * size_t(p + 1) / 2;
  return n * (size_t(k) * size_t(k + 1) / 2) / total_weight;
}
}  // namespace

size_t a2av_count(size_t n, int p, int from, int to) {
  const int k = ((to - from) % p + p) % p;
  return weighted_part_begin(n, p, k + 1) - weighted_part_begin(n, p, k);
}

std::vector<int64_t> a2av_send_offsets(size_t n, int p, int rank) {
  std::vector<int64_t> offsets(size_t(p), 0);
  for (int to = 1; to < p; ++to)
    offsets[to] = offsets[to - 1] + int64_t(a2av_count(n, p, rank, to - 1));
  return offsets;
}

std::vector<int64_t> a2av_recv_offsets(size_t n, int p, int rank) {
  std::vector<int64_t> offsets(size_t(p), 0);
  for (int from = p - 2; from >= 0; --from) {
    offsets[from] = offsets[from + 1] + int64_t(a2av_count(n, p, from + 1, rank));
  }
  return offsets;
}

}  // namespace spmd::bench
