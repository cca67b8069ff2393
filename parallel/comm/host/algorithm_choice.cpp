// Choosing a collective's algorithm (see the header).
#include "parallel/comm/host/algorithm_choice.h"

#include <cstdlib>
#include <string>

#include "runtime/error.h"

namespace spmd::dist::host {

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case Algorithm::kHierarchical:
      return "hierarchical";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kChain:
      return "chain";
    case Algorithm::kPairwise:
      return "pairwise";
    case Algorithm::kDirect:
      return "direct";
    case Algorithm::kDissemination:
      return "dissemination";
  }
  return "?";
}

HierarchyMode hierarchy_mode_from_env() {
  const char* text = std::getenv("SPMD_HIERARCHICAL");
  if (!text || !*text) return HierarchyMode::kAuto;
  const std::string v = text;
  if (v == "auto") return HierarchyMode::kAuto;
  if (v == "1") return HierarchyMode::kAlways;
  if (v == "0") return HierarchyMode::kNever;
  SPMD_THROW(InvalidArgument, "SPMD_HIERARCHICAL='", v, "': expected auto, 1 or 0");
}

const char* hierarchy_mode_name(HierarchyMode m) {
  return m == HierarchyMode::kAlways ? "1" : m == HierarchyMode::kNever ? "0" : "auto";
}

Algorithm choose_algorithm(OpType op, size_t bytes, const tcp::Tuning& tuning,
                           bool hierarchical_group, HierarchyMode mode) {
  const bool hierarchical = hierarchical_group && mode != HierarchyMode::kNever;
  switch (op) {
    case OpType::kAllReduce:
      if (hierarchical && mode == HierarchyMode::kAlways) return Algorithm::kHierarchical;
      if (bytes <= tuning.small_all_reduce_bytes) return Algorithm::kRecursiveDoubling;
      return hierarchical ? Algorithm::kHierarchical : Algorithm::kRing;
    case OpType::kAllGather:
    case OpType::kReduceScatter:
      return hierarchical ? Algorithm::kHierarchical : Algorithm::kRing;
    case OpType::kBroadcast:
    case OpType::kReduce:
      return bytes <= tuning.small_rooted_bytes ? Algorithm::kTree : Algorithm::kChain;
    case OpType::kAllToAll:
    case OpType::kAllToAllv:
      return Algorithm::kPairwise;
    case OpType::kGather:
    case OpType::kScatter:
      return Algorithm::kDirect;
    case OpType::kBarrier:
      return Algorithm::kDissemination;
    default:
      SPMD_THROW(InvalidArgument, "choose_algorithm: ", op_name(op), " is not a collective");
  }
}

}  // namespace spmd::dist::host
