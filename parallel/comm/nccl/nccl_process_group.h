// NcclProcessGroup: the process group of the NCCL backend, for CUDA tensors
// (compiled only in CUDA builds). NCCL moves the data over NVLink, PCIe,
// InfiniBand or sockets with its own kernels; this class is the glue that
// PyTorch's ProcessGroupNCCL is:
//
//   - one ncclComm_t per group, created from a unique id that rank 0 draws and
//     shares through the store (subgroups get their own);
//   - its own communication stream: each collective first makes that stream
//     wait (with an event) for the work the caller's current stream has queued
//     so far, so it sees the caller's finished tensors but does not block the
//     caller's later compute; the group holds the tensors until the
//     collective has run, so the caching allocator cannot hand their memory
//     out too early;
//   - ncclGroupStart/ncclGroupEnd around the sends and receives of
//     all_to_all(v), gather, scatter and batch_isend_irecv;
//   - a watchdog thread that completes the Works: a host function queued on
//     the stream behind each collective only marks it finished and wakes the
//     watchdog (a host function may not call CUDA, and a Work's callbacks
//     may: the bf16 DDP hook copies its result back), which then completes
//     the Works in issue order, running their callbacks on its own thread;
//   - the same thread checks every pending collective against its deadline
//     and the communicator's asynchronous error: on either, it aborts the
//     communicator (ncclCommAbort), which unblocks the GPU, and fails every
//     pending and later collective with an error naming the op, its sequence
//     number and the group.
//
// Work::wait() blocks the calling thread until the collective has run on
// the GPU (then later work on any stream sees the result) and its callbacks
// have run. Callbacks run on the watchdog thread, so they must not wait on
// another Work of the same group.
//
// Thread-safety: any thread may issue collectives. mu_ is held around every
// use of the communicator (issuing, polling its error, aborting,
// destroying), so no NCCL call races with the abort, and none follows it:
// enqueue checks failure_ under mu_ before issuing.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "parallel/comm/process_group.h"

namespace spmd::dist {

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Creates the group's communicator on GPU `device` (every rank calls it).
  static std::shared_ptr<NcclProcessGroup> create(std::shared_ptr<Store> store, int rank, int size,
                                                  GroupOptions options, int device);
  ~NcclProcessGroup() override;

  CommBackend backend() const override { return CommBackend::kNccl; }
  void shutdown() override;
  int device() const { return device_; }

 protected:
  Work launch(CommOp op) override;
  Work launch_batch(std::vector<CommOp> ops) override;
  std::shared_ptr<ProcessGroup> make_group(std::shared_ptr<Store> store, int rank, int size,
                                           GroupOptions options) override;

 private:
  struct State;    // the NCCL and CUDA handles (nccl_state.h)
  struct Pending;  // a collective queued on the GPU, until it completes

  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, GroupOptions options,
                   int device);
  void init_communicator();
  Work enqueue(std::vector<CommOp>& ops, const std::string& description);
  void follow_caller_stream();
  void issue_all(const std::vector<CommOp>& ops, const std::string& description);
  int issue(const CommOp& op);  // an ncclResult_t (nccl.h stays out of this header)
  int issue_gather(const CommOp& op, int dtype);  // dtype: an ncclDataType_t
  int issue_scatter(const CommOp& op, int dtype);
  void watchdog_loop();
  void complete_finished();
  void abort_all(const std::string& why, bool timed_out);
  std::string never_arrived(uint64_t seq);

  int device_;
  std::unique_ptr<State> state_;
  std::mutex mu_;  // guards pending_, stopping_, failure_ and every use of state_->comm
  std::condition_variable cv_;  // notified as records leave pending_ (shutdown() waits)
  std::deque<std::shared_ptr<Pending>> pending_;
  bool stopping_ = false;
  std::string failure_;  // why the communicator was aborted; later ops fail with it
  std::thread watchdog_;
};

}  // namespace spmd::dist
