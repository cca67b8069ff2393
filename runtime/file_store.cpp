// FileStore: every operation takes the file lock, replays what other
// processes appended, then reads the table or appends one record.
//
//   record = u8 type, u32 key_length, key, u32 value_length, value
//            (kDelete has no value; kLeave has neither key nor value)
//
// A record is written with one write() while the lock is held exclusively,
// so a reader holding the lock never sees half of one; if it does, the file
// is corrupt (a writer died mid-write or the disk filled) and we say so.
#include "runtime/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace spmd {

namespace {
void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
}  // namespace

// Holds mu_ (threads of this process) and the flock (other processes).
class FileStore::FileLock {
 public:
  FileLock(FileStore& store, bool exclusive) : guard_(store.mu_), fd_(store.fd_) {
    while (::flock(fd_, exclusive ? LOCK_EX : LOCK_SH) != 0) {
      if (errno != EINTR)
        SPMD_THROW(Error, "FileStore ", store.path_, ": flock: ", std::strerror(errno));
    }
  }
  ~FileLock() { ::flock(fd_, LOCK_UN); }

 private:
  std::lock_guard<std::mutex> guard_;
  int fd_;
};

// ---- set-up and tear-down ----

FileStore::FileStore(std::string path, int num_workers, Duration timeout)
    : Store(timeout), path_(std::move(path)), num_workers_(num_workers) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) SPMD_THROW(Error, "FileStore: cannot open '", path_, "': ", std::strerror(errno));
}

FileStore::~FileStore() {
  try {
    if (num_workers_ > 0) {
      FileLock lock(*this, true);
      replay();
      append(Record::kLeave);
      if (leaves_ >= num_workers_) ::unlink(path_.c_str());
    }
  } catch (const std::exception& e) {
    SPMD_LOG_WARN("FileStore ", path_, ": could not record this worker's exit: ", e.what());
  }
  ::close(fd_);
}

// ---- the log ----

void FileStore::replay() {
  std::vector<uint8_t> buf;
  uint8_t chunk[1 << 16];
  for (;;) {
    ssize_t k = ::pread(fd_, chunk, sizeof chunk, static_cast<off_t>(offset_ + buf.size()));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) SPMD_THROW(Error, "FileStore ", path_, ": read: ", std::strerror(errno));
    if (k == 0) break;
    buf.insert(buf.end(), chunk, chunk + k);
  }
  size_t pos = 0;
  auto need = [&](size_t n) {
    if (buf.size() - pos < n)
      SPMD_THROW(Error, "FileStore ", path_, ": the file is corrupt at byte ", offset_ + pos,
                 " (a truncated record); delete it and start again");
  };
  auto field = [&]() {
    need(4);
    uint32_t n = get_u32(&buf[pos]);
    pos += 4;
    need(n);
    pos += n;
    return std::string(reinterpret_cast<const char*>(&buf[pos - n]), n);
  };
  while (pos < buf.size()) {
    auto type = static_cast<Record>(buf[pos++]);
    if (type == Record::kLeave) {
      ++leaves_;
    } else if (type == Record::kSet) {
      std::string key = field();
      std::string value = field();
      table_.set(key, Bytes(value.begin(), value.end()));
    } else if (type == Record::kDelete) {
      table_.erase(field());
    } else {
      SPMD_THROW(Error, "FileStore ", path_, ": the file is corrupt at byte ", offset_ + pos - 1,
                 " (record type ", static_cast<int>(type), "); is it a FileStore file?");
    }
  }
  offset_ += buf.size();
}

void FileStore::append(Record type, const std::string& key, const Bytes& value) {
  std::vector<uint8_t> rec{static_cast<uint8_t>(type)};
  if (type != Record::kLeave) {
    put_u32(rec, static_cast<uint32_t>(key.size()));
    rec.insert(rec.end(), key.begin(), key.end());
  }
  if (type == Record::kSet) {
    put_u32(rec, static_cast<uint32_t>(value.size()));
    rec.insert(rec.end(), value.begin(), value.end());
  }
  ssize_t k;
  do {
    k = ::write(fd_, rec.data(), rec.size());
  } while (k < 0 && errno == EINTR);
  if (k != static_cast<ssize_t>(rec.size()))
    SPMD_THROW(Error, "FileStore ", path_,
               ": write failed: ", k < 0 ? std::strerror(errno) : "short write");
  replay();
}

void FileStore::poll_until_present(const std::vector<std::string>& keys, Duration timeout,
                                   const char* op) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    std::vector<std::string> missing;
    {
      FileLock lock(*this, false);
      replay();
      missing = table_.missing(keys);
    }
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline)
      SPMD_THROW(TimeoutError, "FileStore ", op, ": timed out after ", timeout.count(),
                 " ms waiting for key ", quote_keys(missing), " (file ", path_, ")");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

// ---- the operations ----

void FileStore::set(const std::string& key, const Bytes& value) {
  FileLock lock(*this, true);
  replay();
  append(Record::kSet, key, value);
}

Bytes FileStore::get(const std::string& key, Duration timeout) {
  poll_until_present({key}, timeout, "get");
  FileLock lock(*this, false);
  const Bytes* value = table_.find(key);  // replayed above; a later delete is not seen
  SPMD_CHECK(value != nullptr, "FileStore get: key '", key, "' was deleted while read");
  return *value;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  FileLock lock(*this, true);
  replay();
  const Bytes* old = table_.find(key);
  int64_t value = (old ? parse_counter(key, *old) : 0) + delta;
  append(Record::kSet, key, counter_bytes(value));
  return value;
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  FileLock lock(*this, true);
  replay();
  KeyValueTable probe;  // the table's rule, applied to this key alone
  if (const Bytes* old = table_.find(key)) probe.set(key, *old);
  Bytes after = probe.compare_set(key, expected, desired);
  const Bytes* now = probe.find(key);
  const Bytes* before = table_.find(key);
  if (now && (!before || *before != *now)) append(Record::kSet, key, *now);
  return after;
}

void FileStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  poll_until_present(keys, timeout, "wait");
}

bool FileStore::check(const std::vector<std::string>& keys) {
  FileLock lock(*this, false);
  replay();
  return table_.missing(keys).empty();
}

bool FileStore::delete_key(const std::string& key) {
  FileLock lock(*this, true);
  replay();
  if (!table_.find(key)) return false;
  append(Record::kDelete, key);
  return true;
}

int64_t FileStore::num_keys() {
  FileLock lock(*this, false);
  replay();
  return table_.size();
}

}  // namespace spmd
