// HashStore: a Store inside one process, for ranks that are threads (as Gloo's
// unit tests run them) and for tests of code written against Store. Waiters
// sleep on a condition variable and wake when a key they need is written.
#pragma once

#include <condition_variable>
#include <mutex>

#include "runtime/kv_table.h"
#include "runtime/store.h"

namespace spmd {

// Thread-safe; every blocking call ends by its timeout.
class HashStore : public Store {
 public:
  explicit HashStore(Duration timeout = kDefaultTimeout) : Store(timeout) {}

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

 private:
  // Waits with mu_ held until every key exists; throws TimeoutError naming
  // `op` and the missing keys.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   Duration timeout, const char* op);

  std::mutex mu_;
  std::condition_variable changed_;
  KeyValueTable table_;
};

}  // namespace spmd
