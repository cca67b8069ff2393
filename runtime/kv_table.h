// KeyValueTable: the meaning of every Store operation, once, on a plain map.
// HashStore wraps it in a mutex, the TCPStore server owns one on its thread,
// and FileStore replays its file into one; so set/add/compare_set behave the
// same in every store by construction. Not thread-safe: the owner locks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/store.h"

namespace spmd {

class KeyValueTable {
 public:
  void set(const std::string& key, const Bytes& value) { map_[key] = value; }
  // The value of key, or nullptr when it does not exist.
  const Bytes* find(const std::string& key) const;
  // Adds delta to the decimal integer at key (absent counts as 0) and returns
  // the new value. Throws InvalidArgument naming the key when the value there
  // is not an integer.
  int64_t add(const std::string& key, int64_t delta);
  // Store::compare_set's rule: sets desired when the value equals expected,
  // or when the key is absent and expected is empty; returns the value after
  // (empty when the key stays absent).
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired);
  bool erase(const std::string& key) { return map_.erase(key) > 0; }
  // The keys of `keys` that do not exist, in the given order.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  int64_t size() const { return static_cast<int64_t>(map_.size()); }

 private:
  std::map<std::string, Bytes> map_;
};

// Parses a counter's bytes as a decimal int64; throws InvalidArgument naming
// `key` when they are not one.
int64_t parse_counter(const std::string& key, const Bytes& value);
Bytes counter_bytes(int64_t value);

// "'a', 'b'" for error messages.
std::string quote_keys(const std::vector<std::string>& keys);

}  // namespace spmd
