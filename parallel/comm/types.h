// The vocabulary of the communicator: which collective an operation is, how
// it combines values, which backend carries it, and the checked operation
// (CommOp) a backend receives. Shared by the process group, both backends,
// their wire formats and the observers of every call (ledger, flight
// recorder, trace), so that none of them includes the process group. Each
// enum's values are fixed: they travel in message headers.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace spmd::dist {

// How all_reduce, reduce and reduce_scatter combine the ranks' values.
// kAvg is the sum divided by the group size (floating dtypes only).
enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1, kProd = 2, kMin = 3, kMax = 4 };

// Every operation a process group runs. The value is the `op` of the header
// each message carries, so two ranks that disagree on the call are caught.
enum class OpType : uint8_t {
  kBroadcast = 1,
  kAllReduce = 2,
  kReduce = 3,
  kAllGather = 4,
  kReduceScatter = 5,
  kAllToAll = 6,
  kBarrier = 7,
  kSend = 8,  // send and recv share one wire op: a point-to-point message
  kRecv = 9,
  kGather = 10,
  kScatter = 11,
  kAllToAllv = 12,
};

// The transports a process group can run over; kFake moves nothing and
// records what would have moved (fake/fake_process_group.h).
enum class CommBackend : uint8_t { kTcp, kNccl, kFake };

// "sum", "all_reduce", "tcp": for messages.
std::string_view reduce_op_name(ReduceOp op);
std::string_view op_name(OpType op);
std::string_view backend_name(CommBackend backend);
// Parses "tcp" / "gloo" (its PyTorch equivalent), "nccl" and "fake"; throws
// InvalidArgument naming the accepted values otherwise.
CommBackend parse_backend(std::string_view name);

// One operation with checked arguments, as a backend receives it.
struct CommOp {
  OpType type = OpType::kBarrier;
  uint64_t seq = 0;  // collectives: the group's count; send/recv: this rank's own count
  Tensor tensor;     // the in-place buffer, or the output (undefined on gather's non-roots)
  Tensor input;      // all_gather, reduce_scatter, all_to_all(v), gather, scatter (undefined
                     // on scatter's non-roots)
  ReduceOp reduce_op = ReduceOp::kSum;
  int root = -1;  // broadcast, reduce, gather, scatter (-1 for the others)
  int peer = -1;  // send: the destination; recv: the source (-1 for collectives)
  int tag = 0;    // send / recv
  // all_to_all(v): elements to / from each rank, and where each block starts
  // (in elements) in input / output.
  std::vector<size_t> send_counts, recv_counts;
  std::vector<size_t> send_offsets, recv_offsets;
  std::string description;  // "all_reduce #5 in group world"
  // When issue() read the clock for the flight recorder (the epoch when the
  // recorder is off): a backend that starts the op at once counts from it
  // instead of reading the clock again.
  std::chrono::steady_clock::time_point issued_at{};
};

// Whether the communicator can carry this dtype (f32, f64, bf16, f16, i32, i64).
bool is_comm_dtype(DType dtype);

}  // namespace spmd::dist
