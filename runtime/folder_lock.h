// FolderLock: one job at a time writes a folder. A job that writes into a
// folder (spmd-train's checkpoint.folder and metrics.run_folder) holds an
// exclusive flock(2) on <folder>/.spmd-lock for as long as it runs, and
// writes into the file who holds it: pid, host, since when, the command.
// A second job pointed at the folder finds the lock taken and is refused at
// start, naming the holder, before it writes anything there.
//
// The kernel drops the lock when the holder's process ends, however it ends
// (a crash, SIGKILL, a lost node's lease on NFS), so a lock left behind by a
// dead job is stale by construction: the next job takes it at once, and
// notes whose it was. The file itself stays, naming the last holder.
//
// flock locks an open file description: a second lock in the same process
// conflicts too (two trainings in one process into one folder). The
// descriptor is close-on-exec, so programs the job starts do not hold it.
#pragma once

#include <filesystem>
#include <string>

namespace spmd {

class FolderLock {
 public:
  static constexpr const char* kFileName = ".spmd-lock";

  // Takes the lock of `folder` (which must exist). `key` names the setting
  // the folder came from, for the message. Throws InvalidArgument naming the
  // key, the folder and the holder when a live process holds it.
  FolderLock(const std::filesystem::path& folder, const std::string& key);
  ~FolderLock();
  FolderLock(FolderLock&& other) noexcept;
  FolderLock& operator=(FolderLock&&) = delete;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  // What the file said when the lock was taken: the line of the job that
  // held it last (every job leaves its own), empty for a new folder.
  const std::string& previous_holder() const { return previous_; }

 private:
  int fd_ = -1;
  std::string previous_;
};

}  // namespace spmd
