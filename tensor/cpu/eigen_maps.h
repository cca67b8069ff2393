// Eigen's array view of n contiguous values: how the CPU backend hands a
// contiguous row to Eigen's vectorized expressions (exp, tanh, sums) without
// copying it.
#pragma once

#include <Eigen/Core>

namespace spmd::cpu {

template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

}  // namespace spmd::cpu
