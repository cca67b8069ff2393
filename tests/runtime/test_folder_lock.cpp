// FolderLock (runtime/folder_lock.h) with real processes: a folder held by a
// live process is refused, naming the holder; the lock of a process killed
// with SIGKILL is free at once (the kernel drops it), and the next holder
// reads the dead one's line; a second lock in the same process is refused.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/folder_lock.h"

using namespace spmd;
namespace fs = std::filesystem;

namespace {

fs::path fresh_folder() {
  const fs::path p = fs::temp_directory_path() / ("spmd_lock_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

}  // namespace

TEST_CASE("FolderLock: a live holder in another process is named; a killed one frees it",
          "[folder_lock]") {
  const fs::path folder = fresh_folder();
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // holds the lock until killed
    ::close(ready[0]);
    FolderLock lock(folder, "checkpoint.folder");
    (void)!::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  try {
    FolderLock second(folder, "metrics.run_folder");
    FAIL("the lock held by pid " << child << " was taken again");
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("metrics.run_folder = \"" + folder.string() +
                                     "\" is in use by another job (pid " + std::to_string(child) +
                                     " on host "));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  FolderLock after(folder, "checkpoint.folder");  // free at once: no stale-lock wait
  CHECK_THAT(after.previous_holder(),
             Catch::StartsWith("pid " + std::to_string(child) + " on host "));
  fs::remove_all(folder);
}

TEST_CASE("FolderLock: a second lock in one process is refused; released at destruction",
          "[folder_lock]") {
  const fs::path folder = fresh_folder();
  {
    FolderLock first(folder, "checkpoint.folder");
    CHECK_THROWS_WITH(
        FolderLock(folder, "checkpoint.folder"),
        Catch::Contains("is in use by another job (pid " + std::to_string(::getpid())));
  }
  CHECK_NOTHROW(FolderLock(folder, "checkpoint.folder"));
  CHECK_THROWS_WITH(FolderLock(folder / "missing", "metrics.run_folder"),
                    Catch::Contains("metrics.run_folder = \"" + (folder / "missing").string() +
                                    "\": cannot open its lock file"));
  fs::remove_all(folder);
}
