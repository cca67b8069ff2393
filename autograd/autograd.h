// Everything of autograd/ a training program needs from the engine: include
// this to use the differentiable ops (spmd::matmul, spmd::cross_entropy...),
// backward(), the hooks, NoGradGuard and custom Functions. Modules and
// optimizers have their own headers under nn/ and optim/.
#pragma once

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/nn_functional.h"
#include "autograd/tensor_ops.h"
#include "autograd/variable.h"
