// Store: the small key-value service through which ranks find each other
// before any communicator exists (torch.distributed's Store). Rank 0 (or the
// launcher) hosts a TCPStore; every rank connects as a client; they exchange
// addresses, NCCL unique ids and barrier counters through it.
//
// Implementations (runtime/): TCPStore (server thread + clients over TCP),
// FileStore (one file on a shared filesystem), HashStore (in one process),
// PrefixStore (a namespace over another store).
//
// Every blocking call ends by its timeout with a TimeoutError naming the key.
// Thread-safety: a Store may be used from several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spmd {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  using Duration = std::chrono::milliseconds;
  static constexpr Duration kDefaultTimeout = std::chrono::minutes(5);

  explicit Store(Duration timeout = kDefaultTimeout) : timeout_(timeout) {}
  virtual ~Store() = default;

  // Sets key to value, replacing any old value, and wakes its waiters.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // The value of key, waiting for it to be set for up to the store's timeout.
  virtual Bytes get(const std::string& key) = 0;
  // Adds delta to the integer at key (created as 0) and returns the new
  // value. The counter is stored as the decimal string of the integer.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets key to desired if its current value is expected (or if it does not
  // exist and expected is empty); returns the value after the call.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // Waits until every key exists; throws TimeoutError naming the missing ones.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  // True when every key exists (no waiting).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Removes key; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  // String conveniences over the byte API.
  void set(const std::string& key, std::string_view value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

  Duration timeout() const { return timeout_; }
  void set_timeout(Duration timeout) { timeout_ = timeout; }

 protected:
  Duration timeout_;
};

}  // namespace spmd
