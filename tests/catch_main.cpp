// Catch2's main, compiled once for every test binary. It counts the test
// cases that skipped (for lack of a GPU, or of root: tests/skip.h) and exits
// 77 when some did and none failed: ctest's SKIP_RETURN_CODE, so such a run
// shows as skipped rather than passed. A run whose filter matched no test
// case fails (Catch2 alone would exit 0): a ctest entry that names a tag no
// case carries, such as a [gpu] half with its cases renamed, ran nothing.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "tests/skip.h"

namespace {

constexpr int kSkippedExitCode = 77;
int g_started = 0;            // test cases that ran
int g_skipped = 0;            // test cases that skipped without a GPU
bool g_case_skipped = false;  // the running case already counted

struct CaseListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const&) override {
    g_case_skipped = false;
    ++g_started;
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(CaseListener)

void spmd::testing::mark_skipped() {
  if (g_case_skipped) return;
  g_case_skipped = true;
  ++g_skipped;
}

void spmd::testing::mark_skipped_without_gpu() { mark_skipped(); }

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int bad = session.applyCommandLine(argc, argv)) return bad;
  const Catch::ConfigData& config = session.configData();
  const bool listing = config.listTests || config.listTestNamesOnly || config.listTags ||
                       config.listReporters || config.showHelp;
  const int failed = session.run();
  if (failed != 0) return failed;
  if (!listing && g_started == 0) {
    std::fprintf(stderr, "no test case matched the filter: nothing ran\n");
    return 1;
  }
  if (g_skipped > 0) {
    std::printf("%d test case%s skipped (see the warnings above)\n", g_skipped,
                g_skipped == 1 ? "" : "s");
    return kSkippedExitCode;
  }
  return 0;
}
