// Test support: ranks as threads of one process (as Gloo's unit tests run
// them), each with a Mesh of real loopback TCP connections to the others, so
// the algorithms can be checked quickly for many sizes and world sizes
// without a store or extra processes. The process-level tests (real ranks,
// the store, failures) are test_collectives.cpp, test_p2p_and_groups.cpp and
// test_failures.cpp.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "parallel/comm/tcp/algorithm.h"

namespace spmd::dist::tcp::testing {

// Runs fn(ctx) on p threads; ctx is rank r's Context over a fresh mesh with
// `header` begun and a deadline of `timeout`. Rethrows the first exception
// any rank threw.
void run_on_threads(int p, const Tuning& tuning, const Header& header,
                    const std::function<void(Context&)>& fn,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20));

}  // namespace spmd::dist::tcp::testing
