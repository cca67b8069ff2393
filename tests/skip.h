// Skipping a test case that needs a GPU (or another thing the machine may
// lack: root, a writable cgroup), so that the run says so.
//
// Catch2 v2 has no skip of its own. A case that finds no GPU calls
// SPMD_SKIP_WITHOUT_GPU(): it warns, returns, and marks the binary's run as
// one that skipped GPU cases; the shared main (tests/catch_main.cpp) then
// exits 77 instead of 0 when nothing failed, and ctest, told that 77 means
// skipped (SKIP_RETURN_CODE), reports the test as skipped, not passed.
// Binaries that mix CPU and GPU cases run as two ctest entries (the CPU cases
// and the [gpu] ones: tests/CMakeLists.txt), so a skipped GPU half never
// hides a CPU half that ran.
#pragma once

#include <catch2/catch.hpp>

namespace spmd::testing {

// Records that the running test case skipped for lack of a GPU.
void mark_skipped_without_gpu();
// Records that the running test case skipped, for the reason it warned of.
void mark_skipped();

}  // namespace spmd::testing

#define SPMD_SKIP_WITHOUT_GPU(reason)            \
  do {                                           \
    WARN(reason);                                \
    ::spmd::testing::mark_skipped_without_gpu(); \
    return;                                      \
  } while (0)

// For a case that needs something other than a GPU: run it as a ctest entry
// of its own (as [gpu] cases are), so its skip hides no other case.
#define SPMD_SKIP(reason)            \
  do {                               \
    WARN(reason);                    \
    ::spmd::testing::mark_skipped(); \
    return;                          \
  } while (0)
