// Reading the shared-memory paths' knobs from the environment.
#include "parallel/comm/shm/tuning.h"

#include "parallel/comm/tcp/tuning.h"
#include "runtime/error.h"

namespace spmd::dist::shm {

ShmTuning ShmTuning::from_env() {
  ShmTuning t;
  tcp::override_from_env("SPMD_SHM_RING_BYTES", t.ring_bytes, 4096);
  tcp::override_from_env("SPMD_SHM_SLOT_BYTES", t.slot_bytes, 0);
  tcp::override_from_env("SPMD_SHM_SEGMENT_MIN_BYTES", t.segment_min_bytes, 0);
  tcp::override_from_env("SPMD_SHM_POST_BYTES", t.post_bytes, 0);
  tcp::override_from_env("SPMD_SHM_ZERO_COPY_BYTES", t.zero_copy_bytes, 0);
  tcp::override_from_env("SPMD_SHM_MAX_MAPPINGS", t.max_mappings, 0);
  tcp::override_from_env("SPMD_SHM_MAX_MAPPED_BYTES", t.max_mapped_bytes, 0);
  SPMD_CHECK(t.post_bytes <= (1 << 20), "SPMD_SHM_POST_BYTES=", t.post_bytes,
             " is more than 1 MiB (posts are for small all_reduces)");
  SPMD_CHECK(t.slot_bytes % 64 == 0, "SPMD_SHM_SLOT_BYTES=", t.slot_bytes,
             " is not a multiple of 64");
  SPMD_CHECK((t.ring_bytes & (t.ring_bytes - 1)) == 0, "SPMD_SHM_RING_BYTES=", t.ring_bytes,
             " is not a power of two");
  return t;
}

}  // namespace spmd::dist::shm
