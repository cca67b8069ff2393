// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11).
//
// A Philox draw is a pure function of (key, counter): no hidden state, so any
// device and any parallel layout can compute element i of a random tensor
// without computing the others. A Generator is only a seed (the key) and an
// offset (where the next tensor's counters start). Every device implements
// exactly this mapping, so the same seed gives the same tensor everywhere:
//
//   key     = seed (k0 = low 32 bits, k1 = high 32 bits)
//   counter = 128 bits, words (c0, c1, c2, c3) = low and high halves of
//             counter_lo, then of counter_hi; 10 rounds with the constants of
//             Salmon et al. (M0 = 0xD2511F53, M1 = 0xCD9E8D57,
//             W0 = 0x9E3779B9, W1 = 0xBB67AE85)
//   element i of a tensor drawn at offset o: r = philox4x32(seed, o + i/4),
//             lane i%4 of r
//   uniform:  u = (r[i%4] >> 8) * 2^-24 in [0, 1) (24 bits, exact in f32);
//             value = low + (high - low) * u, computed in f32 (f64 for f64 out)
//   normal:   lanes (0,1) and (2,3) of r form Box-Muller pairs:
//             u1 = (r[2j] >> 8) * 2^-24 + 2^-25 (never 0), u2 = (r[2j+1] >> 8) * 2^-24,
//             rad = sqrt(-2 ln u1); element 2j is rad cos(2 pi u2), 2j+1 is
//             rad sin(2 pi u2); value = mean + std * z, computed in f32
//   integers: low + ((uint64_t(r[i%4]) * (high - low)) >> 32)
//
// After a draw of n elements the offset advances by ceil(n / 4), so the next
// draw starts on fresh counters.
#pragma once

#include <array>
#include <cstdint>

namespace spmd {

// The four 32-bit outputs of Philox-4x32-10 for a 64-bit key and 128-bit counter.
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_lo, uint64_t counter_hi = 0);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  // Reserves counters for n elements and returns the offset they start at.
  uint64_t advance(uint64_t n) {
    uint64_t start = offset_;
    offset_ += (n + 3) / 4;
    return start;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator that factories use when given none (seed 0 until
// manual_seed). Not thread-safe: seed and draw from one thread, or pass your own.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace spmd
