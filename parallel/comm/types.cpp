// Names of the communicator's enums, for messages and command lines.
#include "parallel/comm/types.h"

#include "runtime/error.h"

namespace spmd::dist {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

std::string_view op_name(OpType op) {
  switch (op) {
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAllReduce:
      return "all_reduce";
    case OpType::kReduce:
      return "reduce";
    case OpType::kAllGather:
      return "all_gather";
    case OpType::kReduceScatter:
      return "reduce_scatter";
    case OpType::kAllToAll:
      return "all_to_all";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kSend:
      return "send";
    case OpType::kRecv:
      return "recv";
    case OpType::kGather:
      return "gather";
    case OpType::kScatter:
      return "scatter";
    case OpType::kAllToAllv:
      return "all_to_allv";
  }
  return "?";
}

std::string_view backend_name(CommBackend backend) {
  switch (backend) {
    case CommBackend::kTcp:
      return "tcp";
    case CommBackend::kNccl:
      return "nccl";
    case CommBackend::kFake:
      return "fake";
  }
  return "?";
}

CommBackend parse_backend(std::string_view name) {
  if (name == "tcp" || name == "gloo") return CommBackend::kTcp;
  if (name == "nccl") return CommBackend::kNccl;
  if (name == "fake") return CommBackend::kFake;
  SPMD_THROW(InvalidArgument, "init_process_group: unknown backend '", name,
             "'; expected 'tcp' (or its PyTorch name 'gloo'), 'nccl' or 'fake'");
}

bool is_comm_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF64:
    case DType::kBF16:
    case DType::kF16:
    case DType::kI32:
    case DType::kI64:
      return true;
    default:
      return false;
  }
}

}  // namespace spmd::dist
