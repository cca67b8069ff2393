// PrefixStore: a namespace inside another store. Every key is written as
// "prefix/key" in the base store, so that subgroups, restart attempts and
// separate subsystems can share one TCPStore without their keys colliding
// (the same role as PyTorch's PrefixStore).
#pragma once

#include <memory>

#include "runtime/store.h"

namespace spmd {

// Thread-safe when the base store is. Its timeout starts as the base store's
// and can be changed on its own; num_keys() counts the whole base store.
class PrefixStore : public Store {
 public:
  // REQUIRES: base is not null.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

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

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace spmd
