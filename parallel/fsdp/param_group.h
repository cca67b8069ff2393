// ParamGroup: one FSDP unit's parameters and the two collectives that move
// them, as FSDP2's FSDPParamGroup.
//
// Each parameter is cut along dim 0 into one chunk per rank of the shard
// group, as torch.chunk cuts (chunks of ceil(rows / N) rows; the last ranks
// may hold fewer, or none). The chunk is this rank's `shard`: the tensor the
// module's slot holds between uses, the optimizer updates and a checkpoint
// saves. It is never padded; padding exists only inside the flat buffers.
//
// One rank's block of a flat buffer holds every parameter's chunk padded to
// the full chunk, one after another; the buffer is N such blocks, in rank
// order (so one all_gather or reduce_scatter moves the whole unit):
//
//   | rank 0: w0 chunk, pad | b0 chunk | w1 chunk | ... | rank 1: w0 chunk | ...
//
//   gather:  copy the shards into this rank's block (cast to param_dtype),
//            all_gather in place, copy each parameter's chunks out into its
//            `full` tensor, and point the module's slots at the full tensors.
//   reshard: point the slots back at the shards and release the full
//            tensors' bytes (their Storage stays, with any views autograd
//            saved of it; the next gather puts bytes back in place).
//   reduce:  copy each full gradient's chunks into a flat buffer (cast to
//            reduce_dtype, zeros for a parameter that got no gradient),
//            reduce_scatter (average) over the shard group into one block,
//            with HSDP all_reduce (average) that block over the replicate
//            group, and make the shards' gradients views of it.
//
// Not thread-safe: one thread (the training loop's, where forward hooks and
// backward run) drives a group.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"
#include "parallel/device_mesh.h"
#include "tensor/tensor.h"

namespace spmd::dist {

// FSDP2's MixedPrecisionPolicy: the dtype parameters are gathered and
// computed in, and the dtype gradients are reduced in. Unset: the shards'
// own dtype for parameters; the parameter dtype for gradients (as FSDP2).
struct MixedPrecision {
  std::optional<DType> param_dtype;
  std::optional<DType> reduce_dtype;
};

// When the collectives of one unit were issued and finished (microseconds,
// trace_now_us()), and how long the training thread waited on them.
struct CommTimes {
  int64_t issue_us = 0, done_us = 0, wait_us = 0;
};

class ParamGroup {
 public:
  struct Param {
    std::string name;               // its path below the unit's module
    Tensor* slot;                   // the module member forward reads
    Tensor shard;                   // this rank's rows (a leaf that requires grad)
    Tensor full;                    // the whole parameter; holds bytes only while gathered
    std::weak_ptr<Storage> origin;  // the parameter's bytes before sharding (to spot sharing)
    int64_t rows = 0;               // rows of dim 0 in the whole parameter
    int64_t chunk = 0;              // rows of a full chunk: ceil(rows / N)
    int64_t row_numel = 0;          // elements per row
    int64_t offset = 0;             // where its chunk starts in one rank's block (elements)
  };

  // Takes over the parameters at `slots` (the unit's own, not its children's):
  // each slot is set to its shard, with placements recorded on `mesh`
  // (Shard(0) along shard_axis, Replicate on the others; a parameter that
  // tensor parallelism already split keeps that layout as its parent).
  ParamGroup(std::vector<std::pair<std::string, Tensor*>> slots, const DeviceMesh& mesh,
             const std::string& shard_axis, const std::string& replicate_axis,
             MixedPrecision precision, std::string unit_name);

  const std::vector<Param>& params() const { return params_; }
  // The unit's name in the trace and in messages.
  void set_name(std::string name) { name_ = std::move(name); }
  bool is_gathered() const { return state_ == State::kGathered; }
  bool is_gathering() const { return state_ == State::kGathering; }
  // Elements of one rank's block (the padded shard of every parameter).
  int64_t block_numel() const { return block_numel_; }

  // Issues the all_gather (no-op unless sharded). Returns at once.
  void start_gather();
  // Waits for the all_gather (issuing it first if needed), copies the
  // parameters out and points the slots at them. No-op when gathered.
  void finish_gather();
  // Slots back to the shards; the full parameters' bytes released. Their
  // gradients are kept (gradient accumulation without sync) unless dropped.
  void reshard();
  // Copies the full gradients in, frees them and issues the reduce_scatter.
  // REQUIRES: no reduction of this group pending.
  void start_reduce();
  // Waits for it (and runs the replicate all_reduce of HSDP), then writes
  // the shards' gradients (added to existing ones). No-op when none pending.
  void finish_reduce();
  bool reduce_pending() const { return reduce_work_.has_value(); }

  // Bytes held now in full parameters, full gradients and flat buffers.
  size_t unsharded_bytes() const;
  // The step's collectives, for timelines and the trace.
  std::vector<CommTimes>& gather_times() { return gather_times_; }
  std::vector<CommTimes>& reduce_times() { return reduce_times_; }

 private:
  enum class State { kSharded, kGathering, kGathered };
  void follow_materialized_shards();

  std::vector<Param> params_;
  std::string name_;
  std::shared_ptr<ProcessGroup> shard_group_, replicate_group_;  // replicate: HSDP only
  int64_t block_numel_ = 0;
  DType param_dtype_, reduce_dtype_;
  Device device_;  // the shards' (meta until they are materialized)
  State state_ = State::kSharded;

  Tensor gather_buffer_;  // N blocks, while an all_gather is in flight
  std::optional<Work> gather_work_;
  Tensor reduce_input_, reduce_output_;  // N blocks in (freed once sent), one block out
  std::shared_ptr<std::atomic<size_t>> reduce_input_bytes_ =
      std::make_shared<std::atomic<size_t>>(0);
  std::optional<Work> reduce_work_;
  std::shared_ptr<std::atomic<int64_t>> gather_done_us_, reduce_done_us_;
  std::vector<CommTimes> gather_times_, reduce_times_;
};

}  // namespace spmd::dist
