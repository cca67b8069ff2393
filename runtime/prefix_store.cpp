// PrefixStore: each call forwards to the base store with the key prefixed.
#include "runtime/prefix_store.h"

#include "runtime/error.h"

namespace spmd {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : Store(base ? base->timeout() : kDefaultTimeout),
      prefix_(std::move(prefix)),
      base_(std::move(base)) {
  SPMD_CHECK(base_ != nullptr, "PrefixStore('", prefix_, "'): the base store is null");
}

void PrefixStore::set(const std::string& key, const Bytes& value) { base_->set(full(key), value); }

Bytes PrefixStore::get(const std::string& key, Duration timeout) {
  return base_->get(full(key), timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_->add(full(key), delta);
}

Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  return base_->compare_set(full(key), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  base_->wait(full(keys), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(full(keys)); }

bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(full(key)); }

int64_t PrefixStore::num_keys() { return base_->num_keys(); }

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(full(k));
  return out;
}

}  // namespace spmd
