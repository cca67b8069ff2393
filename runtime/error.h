// spmd's errors. Library code never exits or aborts on bad input: it throws a
// spmd::Error whose message names the operation and the values that are wrong,
// so a user can act on it. Only a main() catches, prints and exits.
//
//   Error                 anything spmd reports
//   ├── InvalidArgument   the caller passed something wrong (shape, dtype, rank...)
//   ├── CommError         a peer or transport failed (dead rank, closed socket)
//   ├── TimeoutError      a blocking call ran past its timeout
//   └── OutOfMemoryError  an allocation failed
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace spmd {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class InvalidArgument : public Error {
 public:
  using Error::Error;
};
class CommError : public Error {
 public:
  using Error::Error;
};
class TimeoutError : public Error {
 public:
  using Error::Error;
};
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// Concatenates anything that can be written to an ostream: str_cat("rank ", 3).
template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

}  // namespace spmd

// Throws InvalidArgument with the message str_cat(args...) unless `cond` holds.
//   SPMD_CHECK(a.ndim() == 2, "matmul: expected a 2-D tensor, got ", a.shape());
#define SPMD_CHECK(cond, ...)                                          \
  do {                                                                 \
    if (!(cond)) throw ::spmd::InvalidArgument(::spmd::str_cat(__VA_ARGS__)); \
  } while (0)

// Throws an error of the given kind: SPMD_THROW(CommError, "recv from rank ", r, ...).
#define SPMD_THROW(kind, ...) throw ::spmd::kind(::spmd::str_cat(__VA_ARGS__))
