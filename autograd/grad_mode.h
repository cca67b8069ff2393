// Grad mode: whether differentiable ops record the graph. On by default; a
// NoGradGuard turns it off for a scope (evaluation, optimizer steps, weight
// initialization), as torch.no_grad() does. The flag is per thread, so a
// communication thread never records into the training thread's graph.
#pragma once

namespace spmd {

namespace autograd {
// True when differentiable ops on this thread record nodes.
bool grad_mode_enabled();
void set_grad_mode(bool enabled);
}  // namespace autograd

// Turns recording off until the end of the scope, then restores the old mode.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(autograd::grad_mode_enabled()) { autograd::set_grad_mode(false); }
  ~NoGradGuard() { autograd::set_grad_mode(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Turns recording on until the end of the scope (inside a NoGradGuard, say,
// where activation checkpointing recomputes a forward).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(autograd::grad_mode_enabled()) { autograd::set_grad_mode(true); }
  ~EnableGradGuard() { autograd::set_grad_mode(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace spmd
