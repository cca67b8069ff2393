// Intra-op parallelism: how many threads a large CPU op (and the BLAS under
// matmul) may use. The default is OpenMP's: OMP_NUM_THREADS when set, else
// one per core. torch.set_num_threads / torch.get_num_threads.
#pragma once

namespace spmd {

// Sets the number of threads later CPU ops use on this thread. REQUIRES: n >= 1.
void set_num_threads(int n);
// The number of threads a large CPU op started from this thread would use.
int num_threads();

}  // namespace spmd
