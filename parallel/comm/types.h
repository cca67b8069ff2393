// The vocabulary of the communicator: which collective an operation is, how
// it combines values, and which backend carries it. Shared by the process
// group, both backends and their wire formats, so each enum's values are
// fixed (they travel in message headers).
#pragma once

#include <cstdint>
#include <string_view>

#include "tensor/dtype.h"

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

// The transports a process group can run over.
enum class CommBackend : uint8_t { kTcp, kNccl };

// "sum", "all_reduce", "tcp": for messages.
std::string_view reduce_op_name(ReduceOp op);
std::string_view op_name(OpType op);
std::string_view backend_name(CommBackend backend);
// Parses "tcp" / "gloo" (its PyTorch equivalent) and "nccl"; throws
// InvalidArgument naming the accepted values otherwise.
CommBackend parse_backend(std::string_view name);

// Whether the communicator can carry this dtype (f32, f64, bf16, f16, i32, i64).
bool is_comm_dtype(DType dtype);

}  // namespace spmd::dist
