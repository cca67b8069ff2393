// Fault injection, for the crash tests: a process kills itself (or its
// launcher) with SIGKILL at an exact point of its work, so a test can cut a
// checkpoint save anywhere and check what a restart finds.
//
//   SPMD_FAULT_AT=<name>:<n>[:parent]   at the n-th fault point (from 1) whose
//                                       name starts with <name> ("*": any),
//                                       SIGKILL this process, or with :parent
//                                       its parent (spmdrun; the worker then
//                                       dies with it, PR_SET_PDEATHSIG)
//   SPMD_FAULT_RANK=<r>                 only in the process whose RANK is r
//   SPMD_FAULT_LIST=1                   print every point passed, numbered, to
//                                       stderr (to choose n)
//
// The points are calls of fault_point("checkpoint.shard"), placed in the
// code they cut: the checkpoint's steps (parallel/checkpoint,
// train/train_checkpoint.cpp) and every write, sync and rename of a durable
// file (runtime/durable_file.h: "file.write" after each span written, a
// header or a tensor's bytes; "file.sync"; "file.rename"). Unset, a
// point costs a branch. A malformed SPMD_FAULT_AT throws at the first point,
// naming it.
#pragma once

namespace spmd {

// A named point where SPMD_FAULT_AT may kill; see above.
void fault_point(const char* name);

}  // namespace spmd
