// FileStore: a Store kept in one file that every rank opens: a path on a
// shared filesystem when ranks are on several machines, or under /tmp on one.
// It needs no server and no free port, which is why `file://` is the init
// method of last resort when TCP ports are hard to come by.
//
// The file is an append-only log of records (set, delete, leave) written
// under an exclusive flock(); every process replays the records it has not
// seen yet into its own table before it answers. Waiting is polling: get()
// and wait() re-read the file with a growing pause (1 ms up to 50 ms), so
// FileStore is for rendezvous, not for heavy traffic.
//
// Not here: compaction of the log (a job writes a few thousand records).
#pragma once

#include <mutex>
#include <string>

#include "runtime/kv_table.h"
#include "runtime/store.h"

namespace spmd {

// Thread-safe and safe across processes (through flock on the file).
class FileStore : public Store {
 public:
  // Opens path, creating it when absent. With num_workers > 0 the last of
  // num_workers FileStores on the file to be destroyed deletes it, so the
  // next job starts from an empty store.
  // REQUIRES: the file is absent, or holds the log of this very job (a file
  // left by an earlier job still holds its keys; delete it first).
  // Throws Error when the file cannot be opened.
  explicit FileStore(std::string path, int num_workers = -1, Duration timeout = kDefaultTimeout);
  ~FileStore() override;

  using Store::get;
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Duration timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  const std::string& path() const { return path_; }

 private:
  enum class Record : uint8_t { kSet = 1, kDelete = 2, kLeave = 3 };
  class FileLock;  // mu_ + flock for the life of one operation

  // Reads the records appended since the last call into table_.
  // REQUIRES: the file is locked.
  void replay();
  // Appends one record and replays it. REQUIRES: the file is locked exclusively.
  void append(Record type, const std::string& key = {}, const Bytes& value = {});
  // Polls until every key exists; throws TimeoutError naming the missing ones.
  void poll_until_present(const std::vector<std::string>& keys, Duration timeout, const char* op);

  std::string path_;
  int num_workers_;
  int fd_ = -1;
  std::mutex mu_;
  KeyValueTable table_;  // guarded by mu_
  uint64_t offset_ = 0;  // bytes of the file replayed so far; guarded by mu_
  int leaves_ = 0;       // kLeave records seen; guarded by mu_
};

}  // namespace spmd
