// The per-thread grad-mode flag.
#include "autograd/grad_mode.h"

namespace spmd::autograd {
namespace {
thread_local bool grad_mode = true;
}  // namespace

bool grad_mode_enabled() { return grad_mode; }
void set_grad_mode(bool enabled) { grad_mode = enabled; }

}  // namespace spmd::autograd
