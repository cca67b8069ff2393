// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11).
//
// A Philox draw is a pure function of (key, counter): no hidden state, so any
// device and any parallel layout can compute element i of a random tensor
// without computing the others. A Generator is only a seed (the key) and an
// offset (where the next tensor's counters start). Element i of a tensor
// drawn at offset o uses counter c = o + i/4 and takes lane i%4 of the four
// 32-bit outputs; the offset then advances past the tensor (rounded up to 4),
// so the next draw starts on fresh counters.
//
//   uniform:  u = (bits >> 8) * 2^-24, in [0, 1)   (24 random bits: exact in f32)
//   normal:   Box-Muller on lanes (0,1) and (2,3) of counter o + i/4 ... see random.cpp
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
