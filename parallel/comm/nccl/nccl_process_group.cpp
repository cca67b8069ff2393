// The NCCL backend (see the header): communicator set-up through the store,
// and collectives on a communication stream ordered after the caller's. The
// watchdog, which completes the Works and turns a hang or an asynchronous
// NCCL error into a loud, bounded failure, is in nccl_watchdog.cpp.
#include "parallel/comm/nccl/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstring>

#include "parallel/comm/nccl/nccl_state.h"
#include "runtime/error.h"
#include "tensor/cuda_api.h"

namespace spmd::dist {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) SPMD_THROW(CommError, "nccl backend: ", what, ": ", cudaGetErrorString(e));
}

ncclDataType_t nccl_dtype(DType dt) {
  switch (dt) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    default:
      SPMD_THROW(InvalidArgument, "nccl backend: dtype ", dtype_name(dt), " not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// The stream the calling thread's work on `device` is queued on.
cudaStream_t caller_stream(int device) {
  return static_cast<cudaStream_t>(cuda::current_stream(device).handle());
}

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace

// --- Set-up and tear-down ------------------------------------------------------------

std::shared_ptr<NcclProcessGroup> NcclProcessGroup::create(std::shared_ptr<Store> store, int rank,
                                                           int size, GroupOptions options,
                                                           int device) {
  std::shared_ptr<NcclProcessGroup> group(
      new NcclProcessGroup(std::move(store), rank, size, std::move(options), device));
  group->init_communicator();
  group->watchdog_ = std::thread([g = group.get()] { g->watchdog_loop(); });
  return group;
}

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   GroupOptions options, int device)
    : ProcessGroup(std::move(store), rank, size, std::move(options)),
      device_(device),
      state_(std::make_unique<State>()) {
  SPMD_CHECK(device >= 0 && device < gpu_count(), "nccl backend: rank ", rank, " asked for GPU ",
             device, " but ", gpu_count(), " GPUs are present");
}

// Rank 0 draws the unique id and shares it through the store; every rank
// then joins the communicator, which completes once all have joined.
void NcclProcessGroup::init_communicator() {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  ncclUniqueId id;
  if (rank() == 0) {
    SPMD_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "nccl backend: ncclGetUniqueId failed");
    store().set(key("nccl_id"), Bytes(id.internal, id.internal + sizeof id.internal));
  } else {
    Bytes b = store().get(key("nccl_id"));
    SPMD_CHECK(b.size() == sizeof id.internal, "nccl backend: malformed unique id in the store");
    std::memcpy(id.internal, b.data(), b.size());
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so a rank that never joins ends in a timeout, not a hang
  ncclResult_t r = ncclCommInitRankConfig(&state_->comm, size(), id, rank(), &config);
  SPMD_CHECK(r == ncclSuccess || r == ncclInProgress,
             "nccl backend: ncclCommInitRankConfig: ", ncclGetErrorString(r));
  const auto deadline = Clock::now() + timeout();
  for (;;) {  // joining completes in the background; poll it against the deadline
    ncclResult_t state = ncclInProgress;
    ncclCommGetAsyncError(state_->comm, &state);
    if (state == ncclSuccess) break;
    if (state != ncclInProgress || Clock::now() > deadline) {
      ncclCommAbort(state_->comm);
      state_->comm = nullptr;
      SPMD_THROW(TimeoutError, "nccl backend: group ", name(), " (rank ", rank(), " of ", size(),
                 "): the communicator did not form within ", timeout().count(), " ms (",
                 ncclGetErrorString(state), "); did every rank create the group?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  check_cuda(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking), "stream");
  check_cuda(cudaMalloc(&state_->barrier_buf, sizeof(float)), "cudaMalloc");
}

NcclProcessGroup::~NcclProcessGroup() { shutdown(); }

void NcclProcessGroup::shutdown() {
  {
    std::unique_lock lock(mu_);
    if (stopping_ && !watchdog_.joinable()) return;
    // The queued collectives finish (or the watchdog fails them) first. After
    // an abort a wedged GPU may never run their host functions: give up on
    // those records (and leak them) after the timeout rather than hang.
    if (!cv_.wait_for(lock, timeout() * 2, [&] { return pending_.empty(); })) {
      for (auto& p : pending_) new std::shared_ptr<Pending>(p);  // leaked on purpose
    }
    stopping_ = true;
  }
  state_->doorbell->ring();
  if (watchdog_.joinable()) watchdog_.join();
  std::lock_guard lock(mu_);
  cudaSetDevice(device_);
  if (state_->comm) ncclCommDestroy(state_->comm);  // null after an abort
  state_->comm = nullptr;
  if (state_->stream) cudaStreamDestroy(state_->stream);
  if (state_->barrier_buf) cudaFree(state_->barrier_buf);
  state_->stream = nullptr;
  state_->barrier_buf = nullptr;
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::make_group(std::shared_ptr<Store> store, int rank,
                                                           int size, GroupOptions options) {
  return create(std::move(store), rank, size, std::move(options), device_);
}

// --- Issuing -------------------------------------------------------------------------

Work NcclProcessGroup::launch(CommOp op) {
  std::vector<CommOp> ops;
  std::string description = op.description;
  ops.push_back(std::move(op));
  return enqueue(ops, description);
}

Work NcclProcessGroup::launch_batch(std::vector<CommOp> ops) {
  return enqueue(ops, str_cat("batch of ", ops.size(), " sends/recvs in group ", name()));
}

// The ops go on the communication stream after what the caller's stream has
// queued so far; a host function behind them tells the watchdog, which
// completes the Work.
Work NcclProcessGroup::enqueue(std::vector<CommOp>& ops, const std::string& description) {
  for (const CommOp& op : ops) {
    for (const Tensor* t : {&op.tensor, &op.input}) {
      SPMD_CHECK(!t->defined() || t->device() == Device::cuda(device_), op.description,
                 ": the nccl backend of this rank works on cuda:", device_, ", got a tensor on ",
                 t->device());
    }
  }
  auto pending = std::make_shared<Pending>();
  pending->work = Work(description, Work::Duration::max());
  pending->description = description;
  pending->seq = ops.front().seq;
  pending->collective = ops.front().type != OpType::kSend && ops.front().type != OpType::kRecv;
  pending->start = Clock::now();
  pending->deadline = pending->start + timeout();
  pending->doorbell = state_->doorbell;
  std::lock_guard lock(mu_);
  if (!failure_.empty()) {  // aborted: the communicator is gone, nothing is issued
    pending->work.complete(std::make_exception_ptr(CommError(
        str_cat(description, ": the group was aborted by an earlier failure: ", failure_))));
    return pending->work;
  }
  SPMD_CHECK(!stopping_, description, ": the group has been shut down");
  follow_caller_stream();
  issue_all(ops, description);
  for (const CommOp& op : ops) {  // their memory stays allocated until the GPU is done
    for (const Tensor* t : {&op.tensor, &op.input}) {
      if (t->defined()) pending->tensors.push_back(*t);
    }
  }
  // pending_ owns the record until the host function has run. The host
  // function runs on CUDA's callback thread, where no CUDA call is allowed:
  // it only marks the record and rings the doorbell (it takes no lock that
  // is held around a CUDA or NCCL call).
  check_cuda(cudaLaunchHostFunc(
                 state_->stream,
                 [](void* p) {
                   auto* record = static_cast<Pending*>(p);
                   // Copied first: once `finished` is set the watchdog may free the record.
                   const std::shared_ptr<Doorbell> doorbell = record->doorbell;
                   record->finished = true;
                   doorbell->ring();
                 },
                 pending.get()),
             "cudaLaunchHostFunc");
  pending_.push_back(pending);
  return pending->work;
}

// Makes the communication stream wait for what the caller's current stream
// has queued so far (and nothing queued later).
void NcclProcessGroup::follow_caller_stream() {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  cudaEvent_t ready;
  check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "event");
  check_cuda(cudaEventRecord(ready, caller_stream(device_)), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(state_->stream, ready, 0), "cudaStreamWaitEvent");
  cudaEventDestroy(ready);  // released once the recorded point is reached
}

// Issues the ops, as one NCCL group when there are several, and waits until
// NCCL has queued them. REQUIRES: mu_ held and the group not aborted.
void NcclProcessGroup::issue_all(const std::vector<CommOp>& ops, const std::string& description) {
  const bool grouped = ops.size() > 1;
  if (grouped) ncclGroupStart();
  ncclResult_t r = ncclSuccess;
  for (const CommOp& op : ops) {
    if (r == ncclSuccess || r == ncclInProgress) r = ncclResult_t(issue(op));
  }
  if (grouped) {
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = end;
  }
  // A non-blocking communicator may still be queueing the calls: NCCL asks
  // that it be polled to completion before the next call.
  const auto deadline = Clock::now() + timeout();
  while (r == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    ncclCommGetAsyncError(state_->comm, &r);
  }
  if (r != ncclSuccess) {
    SPMD_THROW(CommError, description, ": NCCL refused the call: ", ncclGetErrorString(r), " (",
               ncclGetLastError(state_->comm), ")");
  }
}

// Queues one op's NCCL calls on the communication stream.
int NcclProcessGroup::issue(const CommOp& op) {
  ncclComm_t comm = state_->comm;
  cudaStream_t s = state_->stream;
  void* buf = op.tensor.defined() ? op.tensor.raw_data() : nullptr;
  void* in = op.input.defined() ? op.input.raw_data() : nullptr;
  const size_t n = op.tensor.defined() ? size_t(op.tensor.numel()) : 0;
  // The output, or the input where this rank has no output (gather's non-roots).
  const Tensor& held = op.tensor.defined() ? op.tensor : op.input;
  const ncclDataType_t dt = held.defined() ? nccl_dtype(held.dtype()) : ncclFloat32;
  ncclResult_t r = ncclSuccess;
  switch (op.type) {
    case OpType::kBroadcast:
      r = ncclBroadcast(buf, buf, n, dt, op.root, comm, s);
      break;
    case OpType::kAllReduce:
      r = ncclAllReduce(buf, buf, n, dt, nccl_op(op.reduce_op), comm, s);
      break;
    case OpType::kReduce:
      r = ncclReduce(buf, buf, n, dt, nccl_op(op.reduce_op), op.root, comm, s);  // root's buf only
      break;
    case OpType::kAllGather:
      r = ncclAllGather(in, buf, size_t(op.input.numel()), dt, comm, s);
      break;
    case OpType::kReduceScatter:
      r = ncclReduceScatter(in, buf, n, dt, nccl_op(op.reduce_op), comm, s);
      break;
    case OpType::kAllToAll:
    case OpType::kAllToAllv: {
      const size_t elem = element_size(op.tensor.dtype());
      ncclGroupStart();
      for (int peer = 0; peer < size(); ++peer) {
        ncclSend(static_cast<char*>(in) + op.send_offsets[peer] * elem, op.send_counts[peer], dt,
                 peer, comm, s);
        ncclRecv(static_cast<char*>(buf) + op.recv_offsets[peer] * elem, op.recv_counts[peer], dt,
                 peer, comm, s);
      }
      r = ncclGroupEnd();
      break;
    }
    case OpType::kGather:
      r = ncclResult_t(issue_gather(op, dt));
      break;
    case OpType::kScatter:
      r = ncclResult_t(issue_scatter(op, dt));
      break;
    case OpType::kBarrier:  // NCCL has none: an all_reduce of one float stands in
      r = ncclAllReduce(state_->barrier_buf, state_->barrier_buf, 1, ncclFloat32, ncclSum, comm, s);
      break;
    case OpType::kSend:
      r = ncclSend(buf, n, dt, op.peer, comm, s);
      break;
    case OpType::kRecv:
      r = ncclRecv(buf, n, dt, op.peer, comm, s);
      break;
  }
  return r;
}

// Gather as sends and receives in one NCCL group: every rank sends its block
// to the root, which receives each peer's into its slot. The root's own
// block is a device copy (none when it is already in place).
int NcclProcessGroup::issue_gather(const CommOp& op, int dtype) {
  const ncclDataType_t dt = ncclDataType_t(dtype);
  const size_t block = size_t(op.input.numel());
  const size_t bytes = op.input.nbytes();
  if (rank() == op.root) {
    char* out = static_cast<char*>(op.tensor.raw_data());
    char* mine = out + size_t(rank()) * bytes;
    if (mine != op.input.raw_data() && bytes > 0) {
      check_cuda(cudaMemcpyAsync(mine, op.input.raw_data(), bytes, cudaMemcpyDeviceToDevice,
                                 state_->stream),
                 "cudaMemcpyAsync");
    }
  }
  ncclGroupStart();
  if (rank() != op.root) {
    ncclSend(op.input.raw_data(), block, dt, op.root, state_->comm, state_->stream);
  } else {
    char* out = static_cast<char*>(op.tensor.raw_data());
    for (int peer = 0; peer < size(); ++peer) {
      if (peer != rank()) {
        ncclRecv(out + size_t(peer) * bytes, block, dt, peer, state_->comm, state_->stream);
      }
    }
  }
  return ncclGroupEnd();
}

// Scatter, the other way round: the root sends each peer its block, every
// other rank receives its own.
int NcclProcessGroup::issue_scatter(const CommOp& op, int dtype) {
  const ncclDataType_t dt = ncclDataType_t(dtype);
  const size_t block = size_t(op.tensor.numel());
  const size_t bytes = op.tensor.nbytes();
  if (rank() == op.root) {
    const char* mine = static_cast<const char*>(op.input.raw_data()) + size_t(rank()) * bytes;
    if (mine != op.tensor.raw_data() && bytes > 0) {
      check_cuda(cudaMemcpyAsync(op.tensor.raw_data(), mine, bytes, cudaMemcpyDeviceToDevice,
                                 state_->stream),
                 "cudaMemcpyAsync");
    }
  }
  ncclGroupStart();
  if (rank() != op.root) {
    ncclRecv(op.tensor.raw_data(), block, dt, op.root, state_->comm, state_->stream);
  } else {
    const char* in = static_cast<const char*>(op.input.raw_data());
    for (int peer = 0; peer < size(); ++peer) {
      if (peer != rank()) {
        ncclSend(in + size_t(peer) * bytes, block, dt, peer, state_->comm, state_->stream);
      }
    }
  }
  return ncclGroupEnd();
}

}  // namespace spmd::dist
