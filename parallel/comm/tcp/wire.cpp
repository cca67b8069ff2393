// Comparing headers and saying how two ranks disagree.
#include "parallel/comm/tcp/wire.h"

#include "runtime/error.h"

namespace spmd::dist::tcp {

uint32_t group_hash(std::string_view name) {
  uint32_t h = 2166136261u;
  for (char c : name) {
    h ^= uint8_t(c);
    h *= 16777619u;
  }
  return h;
}

std::string describe(const Header& h) {
  std::string s = str_cat(op_name(h.op), " #", h.seq);
  if (h.op == OpType::kAllReduce || h.op == OpType::kReduce || h.op == OpType::kReduceScatter) {
    s += str_cat(" (", reduce_op_name(h.redop), ")");
  }
  if (h.op == OpType::kBroadcast || h.op == OpType::kReduce || h.op == OpType::kScatter) {
    s += str_cat(" from root ", h.arg);
  }
  if (h.op == OpType::kGather) s += str_cat(" to root ", h.arg);
  if (h.op == OpType::kSend) s += str_cat(" with tag ", h.arg);
  if (h.op != OpType::kBarrier) s += str_cat(" of ", h.count, " ", dtype_name(h.dtype));
  return s;
}

std::optional<std::string> mismatch(const Header& got, const Header& expected) {
  if (got.magic != kMagic) {
    return str_cat("received bytes that are not a spmd message header (magic 0x", std::hex,
                   got.magic, ", expected 0x", kMagic,
                   "): a peer of another wire version, or a stream out of step");
  }
  if (got.group != expected.group) {
    return std::string("the message belongs to another process group");
  }
  if (got.flags != expected.flags) {  // reserved: a sender that sets them speaks another format
    return str_cat("the header's reserved flags are ", int(got.flags), ", expected ",
                   int(expected.flags), ": a peer of another wire format, or a stream out of step");
  }
  const bool same = got.op == expected.op && got.seq == expected.seq &&
                    got.dtype == expected.dtype && got.count == expected.count &&
                    got.arg == expected.arg && got.redop == expected.redop;
  if (same) return std::nullopt;
  std::string why;
  if (got.op != expected.op || got.seq != expected.seq) {
    why = "the ranks issued different collectives at this point (a rank skipped or added a call)";
  } else if (got.count != expected.count || got.dtype != expected.dtype) {
    why = "the ranks passed tensors of different sizes or dtypes";
  } else if (got.arg != expected.arg) {
    why = "the ranks passed different roots";
  } else {
    why = "the ranks passed different reduce ops";
  }
  return str_cat("the peer is at ", describe(got), " but this rank is at ", describe(expected),
                 ": ", why);
}

}  // namespace spmd::dist::tcp
