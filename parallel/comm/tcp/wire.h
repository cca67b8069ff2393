// The header at the front of every TCP backend message. A collective sends
// one on each connection it uses, before its first data bytes (written in the
// same sendmsg), and the receiver checks it against what it expects before
// trusting the data, so two ranks that disagree on the call (a different op,
// sequence number, root, dtype or size) fail with an error that says how they
// differ, instead of reducing garbage. Point-to-point messages carry one too,
// with the tag in `arg` and a per-pair sequence number; a receiver refuses a
// message that does not fit its recv with a header of op kRecv (p2p.h).
//
// Layout (32 bytes, the sender's byte order: spmd assumes every rank runs on
// the same endianness, and a wrong magic catches a stray or foreign stream):
//
//   0  magic   u32  'S','P','M', wire version
//   4  op      u8   OpType
//   5  dtype   u8   DType
//   6  redop   u8   ReduceOp (0 when the op does not reduce)
//   7  flags   u8   reserved, 0
//   8  group   u32  FNV-1a hash of the group's name
//  12  arg     i32  root (broadcast, reduce, gather, scatter), tag (send/recv), else -1
//  16  seq     u64  the op's sequence number in its group (or pair)
//  24  count   u64  elements the op covers (all_to_all(v): this pair's message;
//                   gather, scatter: one rank's block)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "parallel/comm/types.h"

namespace spmd::dist::tcp {

inline constexpr uint32_t kWireVersion = 1;
inline constexpr uint32_t kMagic = 0x4d505300u | kWireVersion;  // "SPM" + version

struct Header {
  uint32_t magic = kMagic;
  OpType op = OpType::kBarrier;
  DType dtype = DType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  uint8_t flags = 0;
  uint32_t group = 0;
  int32_t arg = -1;
  uint64_t seq = 0;
  uint64_t count = 0;
};
static_assert(sizeof(Header) == 32, "the header is 32 bytes on the wire");

// FNV-1a of the group's name: the `group` field.
uint32_t group_hash(std::string_view name);

// "all_reduce #5 (sum) of 1000 f32": a header as a person reads it.
std::string describe(const Header& h);

// Why `got` (what a peer sent) does not match `expected` (what this rank is
// doing), or nothing when they agree. The text names both sides' values.
std::optional<std::string> mismatch(const Header& got, const Header& expected);

}  // namespace spmd::dist::tcp
