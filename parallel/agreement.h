// What every rank of a group must hold alike, checked once, up front, where a
// difference would otherwise go unnoticed: ranks started with different
// --seed values draw overlapping DistributedSampler shards and train without
// a word; ranks given different configs build different strategies. One
// all_gather compares the values, and a difference is named with the ranks
// that hold each value:
//
//   check_same_on_every_rank(group, "DistributedSampler", {{"seed", seed}, ...});
//   -> InvalidArgument "DistributedSampler: the ranks disagree on seed: rank 0
//      has 1337, rank 1 has 42 (every rank must be started with the same value)"
//
// REQUIRES (like any collective): every rank of the group calls it, in the
// same order relative to the group's other collectives.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm/process_group.h"

namespace spmd::dist {

// One named integer that must be equal on every rank.
struct SharedValue {
  std::string name;
  int64_t value;
};

// Throws InvalidArgument naming `what`, the first value that differs, and the
// value of every rank that differs from rank 0's.
void check_same_on_every_rank(ProcessGroup& group, const std::string& what,
                              const std::vector<SharedValue>& values);

// The same for a text (a config written out, one setting a line): the first
// line that differs from rank 0's is named, with the rank that has it.
void check_same_text_on_every_rank(ProcessGroup& group, const std::string& what,
                                   const std::string& text);

}  // namespace spmd::dist
