// The message of what a call throws, for tests that check a refusal's
// words: "" when it throws nothing.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace spmd::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace spmd::testing
