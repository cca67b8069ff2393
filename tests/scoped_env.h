// Sets an environment variable for one scope (a test case, and the ranks it
// forks, which inherit it), or unsets it when the value is null, and puts
// back what it was when the scope ends (a variant of a test binary may set
// it for every case).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace spmd::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* was = std::getenv(name)) before_ = was;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (before_) {
      ::setenv(name_.c_str(), before_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> before_;
};

}  // namespace spmd::testing
