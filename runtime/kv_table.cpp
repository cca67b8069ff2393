// The rules of the store operations, shared by every Store implementation.
#include "runtime/kv_table.h"

#include <charconv>

#include "runtime/error.h"

namespace spmd {

const Bytes* KeyValueTable::find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

int64_t KeyValueTable::add(const std::string& key, int64_t delta) {
  auto it = map_.find(key);
  int64_t value = it == map_.end() ? 0 : parse_counter(key, it->second);
  value += delta;
  map_[key] = counter_bytes(value);
  return value;
}

Bytes KeyValueTable::compare_set(const std::string& key, const Bytes& expected,
                                 const Bytes& desired) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (!expected.empty()) return {};
    map_[key] = desired;
    return desired;
  }
  if (it->second == expected) it->second = desired;
  return it->second;
}

std::vector<std::string> KeyValueTable::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const std::string& k : keys)
    if (map_.find(k) == map_.end()) out.push_back(k);
  return out;
}

int64_t parse_counter(const std::string& key, const Bytes& value) {
  const char* first = reinterpret_cast<const char*>(value.data());
  const char* last = first + value.size();
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(first, last, out);
  SPMD_CHECK(ec == std::errc() && ptr == last && !value.empty(), "store add: the value of key '",
             key, "' is not an integer ('", std::string(first, last).substr(0, 40), "')");
  return out;
}

Bytes counter_bytes(int64_t value) {
  std::string s = std::to_string(value);
  return Bytes(s.begin(), s.end());
}

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  return out;
}

}  // namespace spmd
