// spawn(): the C++ torch.multiprocessing.spawn. It starts nprocs processes
// that each run fn(rank), sets in each the variables a launcher would
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
// and waits for them: the SPMD picture of the chapter's 16.1.3 in one call.
//
//   spawn(4, [](int rank) {
//     Rendezvous rv = rendezvous("env://");  // the ranks find each other
//     ...
//   });
//
// Processes are made with fork(), so fn runs on a copy of the caller's memory
// (no serialization, unlike Python's spawn start method). MASTER_PORT is a
// port the parent has already bound; rank 0's env:// rendezvous serves on that
// very socket (see kStoreListenFdVar), so no other process can take it first.
//
// The first child to fail (fn throws, the process exits non-zero or dies by a
// signal) ends the job: the others get SIGTERM, then SIGKILL after a grace
// period, and spawn() throws naming the rank and how it died.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "runtime/error.h"

namespace spmd {

struct SpawnOptions {
  std::string master_addr = "127.0.0.1";
  // The whole job's limit; past it every child is stopped and spawn throws.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // Between SIGTERM and SIGKILL when the others are stopped.
  std::chrono::milliseconds grace = std::chrono::seconds(5);
};

// A child failed; what() says which rank and how, and the error message it
// threw when there was one.
class ProcessFailedError : public Error {
 public:
  ProcessFailedError(const std::string& what, int rank, int wait_status)
      : Error(what), rank_(rank), wait_status_(wait_status) {}
  int rank() const { return rank_; }
  // The waitpid() status (decode with WIFEXITED, WTERMSIG...).
  int wait_status() const { return wait_status_; }

 private:
  int rank_;
  int wait_status_;
};

// Runs fn(rank) for rank 0..nprocs-1 in child processes and waits for all.
// A child whose fn returns exits with 0; one whose fn throws prints the error
// with its rank and exits with 1.
// REQUIRES: nprocs >= 1; the calling process has one thread (fork copies only
// the calling thread: a lock another thread held would stay locked forever in
// the child), so call it before starting threads, stores or CUDA.
// Throws ProcessFailedError for the first child that failed, TimeoutError
// naming the ranks still running when options.timeout passed.
void spawn(int nprocs, const std::function<void(int rank)>& fn, const SpawnOptions& options = {});

}  // namespace spmd
