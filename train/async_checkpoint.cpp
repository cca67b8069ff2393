// The asynchronous checkpoint (async_checkpoint.h).
#include "train/async_checkpoint.h"

#include <chrono>

#include "autograd/grad_mode.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

namespace spmd::train {

AsyncCheckpointer::~AsyncCheckpointer() {
  if (writer_.joinable()) writer_.join();
}

// Each tensor copied into its buffer (made at the first save, or when its
// shape changed), the buffer given the tensor's layout.
void AsyncCheckpointer::stage(const TensorMap& tensors) {
  NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) {
    auto it = staged_.find(name);
    if (it == staged_.end() || it->second.shape() != t.shape() || it->second.dtype() != t.dtype()) {
      staged_[name] = ops::empty(t.shape(), {t.dtype(), Device::cpu()});
      it = staged_.find(name);
    }
    ops::copy_(it->second, t);
    it->second.set_layout_meta(t.layout_meta());
  }
  for (auto it = staged_.begin(); it != staged_.end();)  // names no longer saved
    it = tensors.count(it->first) ? std::next(it) : staged_.erase(it);
}

double AsyncCheckpointer::start(const std::string& folder, const TrainState& state,
                                const TensorMap& tensors, dist::ProcessGroup& world, int64_t keep) {
  finish();  // at most one save in flight; its error, if any, is thrown here
  const auto begin = std::chrono::steady_clock::now();
  stage(tensors);
  const double stall =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  int64_t staged = 0;
  for (const auto& [name, t] : staged_) staged += int64_t(t.nbytes());
  done_ = {state.step, 0, 0, staged};
  writer_ = std::thread([this, folder, state, &world, keep] {
    set_num_threads(1);  // OpenMP's count is per thread: the training's cores stay its own
    try {
      const auto t0 = std::chrono::steady_clock::now();
      write_checkpoint(folder, state, staged_, world, keep);
      done_.write_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      done_.bytes = checkpoint_bytes_of_rank(folder, state.step, world.rank());
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  return stall;
}

std::optional<AsyncCheckpointer::Done> AsyncCheckpointer::finish() {
  if (!writer_.joinable()) return std::nullopt;
  writer_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return done_;
}

}  // namespace spmd::train
