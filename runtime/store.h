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
//
// A class deriving from Store overrides the virtual byte API and adds
// `using Store::set; using Store::get; using Store::wait;` so that the
// conveniences below stay visible (C++ hides base overloads of a name that a
// derived class declares).
#pragma once

#include <atomic>
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
  // The value of key, waiting up to `timeout` for it to be set.
  virtual Bytes get(const std::string& key, Duration timeout) = 0;
  // The same, waiting up to the store's timeout.
  Bytes get(const std::string& key) { return get(key, timeout()); }
  // Adds delta to the integer at key (created as 0) and returns the new
  // value. The counter is stored as the decimal string of the integer; a value
  // that is not one makes add throw InvalidArgument naming the key.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets key to desired if its current value is expected (or if it does not
  // exist and expected is empty); returns the value after the call (empty
  // when the key does not exist and was not created).
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // Waits until every key exists; throws TimeoutError naming the missing ones.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  // True when every key exists (no waiting).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Removes key; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;
  // How many keys the store holds (for a PrefixStore: its base store's count,
  // as in PyTorch).
  virtual int64_t num_keys() = 0;

  // String conveniences over the byte API.
  void set(const std::string& key, std::string_view value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

  Duration timeout() const { return timeout_.load(); }
  void set_timeout(Duration timeout) { timeout_.store(timeout); }

 protected:
  std::atomic<Duration> timeout_;
};

}  // namespace spmd
