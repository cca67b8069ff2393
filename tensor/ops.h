// Every raw tensor op (no autograd): include this to use spmd::ops.
#pragma once

#include "tensor/copy.h"
#include "tensor/elementwise.h"
#include "tensor/factory.h"
#include "tensor/indexing.h"
#include "tensor/linalg.h"
#include "tensor/nn_ops.h"
#include "tensor/print.h"
#include "tensor/random.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"
#include "tensor/views.h"
