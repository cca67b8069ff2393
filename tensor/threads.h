// Intra-op parallelism: how many threads a large CPU op (and the BLAS under
// matmul) may use. The default is OpenMP's: OMP_NUM_THREADS when set, else
// one per core. torch.set_num_threads / torch.get_num_threads.
//
// Forking: GNU OpenMP cannot start threads in a process forked after its
// parent ran a multi-threaded region (the child inherits a thread pool whose
// threads did not survive the fork, and would wait for them forever). A
// process forked after that point therefore runs its CPU ops on one thread,
// which is also what each of several CPU ranks on one machine wants. Fork
// before the first multi-threaded op (spawn() early) to keep the threads.
#pragma once

namespace spmd {

// Sets the number of threads later CPU ops use on this thread.
// REQUIRES: n >= 1, and n == 1 in a process forked after its parent ran a
// multi-threaded op (throws otherwise, rather than hang).
void set_num_threads(int n);
// The number of threads a large CPU op started from this thread would use.
int num_threads();

// For the CPU kernels: call before starting an OpenMP team (a parallel loop,
// or a BLAS call that may thread), so that a later fork knows the pool exists.
void note_thread_team();

}  // namespace spmd
