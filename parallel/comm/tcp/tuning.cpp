// Reading the TCP backend's knobs from the environment.
#include "parallel/comm/tcp/tuning.h"

#include <cstdlib>
#include <string>

#include "runtime/error.h"

namespace spmd::dist::tcp {
namespace {
template <class T>
void override_from(const char* name, T& value, long long min) {
  const char* text = std::getenv(name);
  if (!text || !*text) return;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  SPMD_CHECK(*end == '\0' && v >= min, name, "='", text, "' is not an integer >= ", min);
  value = T(v);
}
}  // namespace

Tuning Tuning::from_env() {
  Tuning t;
  override_from("SPMD_TCP_SMALL_ALL_REDUCE_BYTES", t.small_all_reduce_bytes, 0);
  override_from("SPMD_TCP_SMALL_ROOTED_BYTES", t.small_rooted_bytes, 0);
  override_from("SPMD_TCP_CHUNK_BYTES", t.chunk_bytes, 1024);
  override_from("SPMD_TCP_WINDOW", t.window, 1);
  override_from("SPMD_TCP_SEND_BUFFER_BYTES", t.send_buffer_bytes, 0);
  return t;
}

}  // namespace spmd::dist::tcp
