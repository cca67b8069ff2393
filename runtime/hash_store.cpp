// HashStore: the table behind a mutex, and a condition variable for waiters.
#include "runtime/hash_store.h"

#include "runtime/error.h"

namespace spmd {

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.set(key, value);
  }
  changed_.notify_all();
}

Bytes HashStore::get(const std::string& key, Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_locked(lock, {key}, timeout, "get");
  return *table_.find(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    value = table_.add(key, delta);
  }
  changed_.notify_all();
  return value;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    value = table_.compare_set(key, expected, desired);
  }
  changed_.notify_all();
  return value;
}

void HashStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_locked(lock, keys, timeout, "wait");
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.missing(keys).empty();
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.erase(key);
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.size();
}

void HashStore::wait_locked(std::unique_lock<std::mutex>& lock,
                            const std::vector<std::string>& keys, Duration timeout,
                            const char* op) {
  bool ok = changed_.wait_for(lock, timeout, [&] { return table_.missing(keys).empty(); });
  if (!ok)
    SPMD_THROW(TimeoutError, "HashStore ", op, ": timed out after ", timeout.count(),
               " ms waiting for key ", quote_keys(table_.missing(keys)));
}

}  // namespace spmd
