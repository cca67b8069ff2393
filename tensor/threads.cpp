// Intra-op thread count: OpenMP's, which OpenBLAS's OpenMP build shares, so
// one setting governs our loops and the GEMMs under them.
#include "tensor/threads.h"

#include <omp.h>

#include "runtime/error.h"

namespace spmd {

void set_num_threads(int n) {
  SPMD_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace spmd
