// An asynchronous checkpoint (checkpoint.async = true), as TorchTitan's
// async_mode: the step copies what it saves into staging buffers and goes
// on training while a thread of its own writes them.
//
//   step s:   wait for the save in flight (at most one) | copy the tensors
//             into the staging buffers (the stall) | start the writer
//   writer:   write_checkpoint: the step folder through the world's store
//             (no collective, so it runs beside the training's), then on
//             rank 0 train_state.json, `latest` and pruning
//   the end:  wait for the save in flight: a run returns only once its last
//             checkpoint is complete (or has failed, which it then throws)
//
// The staging buffers are host tensors of the saved shapes, allocated at
// the first save and reused: after it, a save's stall is one copy of the
// rank's parameters and moments, with no page to fault in. They hold that
// much memory for the whole run, which the memory plan counts
// ("checkpoint staging"). A
// save's crash consistency is a synchronous save's: `latest` moves only
// once the step folder is whole. A writer's error is thrown by the next
// start() or by finish(), on the training thread.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "train/train_checkpoint.h"

namespace spmd::train {

class AsyncCheckpointer {
 public:
  // What a finished save took.
  struct Done {
    int64_t step = 0;          // the state's step (steps completed)
    double write_ms = 0;       // the writer's time
    int64_t bytes = 0;         // this rank's shard file
    int64_t staged_bytes = 0;  // the staging buffers it was copied into
  };

  AsyncCheckpointer() = default;
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;
  // Waits for the save in flight (errors are dropped here: finish() is
  // where they are reported).
  ~AsyncCheckpointer();

  // Waits for the save in flight (throwing its error), stages `tensors`
  // (checkpoint_state's views) and starts writing them. `world` must
  // outlive the save. Returns the staging time in ms: the step's stall.
  double start(const std::string& folder, const TrainState& state, const TensorMap& tensors,
               dist::ProcessGroup& world, int64_t keep);

  // Waits for the save in flight; throws its error. nullopt when none was.
  std::optional<Done> finish();

 private:
  void stage(const TensorMap& tensors);

  TensorMap staged_;  // by name: host buffers, with the tensors' layouts
  std::thread writer_;
  std::exception_ptr error_;
  Done done_;
};

}  // namespace spmd::train
