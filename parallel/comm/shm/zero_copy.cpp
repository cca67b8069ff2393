// The zero-copy collectives (see the header): the descriptors' exchange,
// then the four algorithms, each a short loop over its peers' mapped buffers.
#include "parallel/comm/shm/zero_copy.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "parallel/comm/shm/byte_ranges.h"
#include "parallel/comm/shm/peer_memory.h"
#include "parallel/comm/shm/segment_all_reduce.h"
#include "parallel/comm/shm/stream_copy.h"
#include "parallel/comm/tcp/reduce.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace spmd::dist::shm {
namespace {

// The broadcast's copies of at least this many bytes stream (stream_copy.h):
// inside the collectives, both cores copying at once, streaming paid clearly
// only from 8 MiB copies on, twice the L2 cache (docs/measurements/shm.md).
constexpr size_t kStreamBytes = size_t(8) << 20;
// The all_gather streams every piece from an input this large on: each rank
// writes p times its input, 2 MiB or more from here on 2 ranks, which stays in
// no core's L2 (2 MiB) anyway. On 2 ranks of the Xeon of docs/measurements/shm.md
// (alternating with the 8 MiB threshold, 4 rounds of 50 calls) it raised the
// bus bandwidth about 1.1x at 2 and 4 MiB, and lowered it 0.7x at 1 MiB (an
// input of 512 KiB, whose writes do stay in cache), hence not lower.
constexpr size_t kAllGatherStreamBytes = size_t(1) << 20;

// A copy that streams (stream_copy.h) or is a memcpy: each algorithm below
// says which by its size.
void copy(char* dst, const char* src, size_t bytes, bool stream) {
  if (stream) {
    stream_copy(dst, src, bytes);
  } else {
    copy_bytes(dst, src, bytes);
  }
}

// Where in its slot a rank says whether it mapped all its peers' buffers:
// just past its descriptor, which the peers may still be reading then.
constexpr size_t kMappedAt = sizeof(BufferDescriptor);
static_assert(kMappedAt < 64, "a slot has at least 64 bytes");

}  // namespace

// The descriptors' exchange: this rank's in its slot of the next set, the
// barrier; every peer's buffer mapped, whether it could in its slot, a
// second barrier. A rank that could not map a peer's (EMFILE, ENOMEM,
// vm.max_map_count) warns once a process; every rank then takes the staged
// path, having decided alike from what all published.
std::vector<char*> map_peer_buffers(const Context& ctx, GroupSegment& segment,
                                    const SharedBuffer& shared) {
  const int p = ctx.size(), r = ctx.rank();
  char* data = shared.span.data;
  const BufferDescriptor mine =
      shared.usable ? describe_buffer(data, shared.span.bytes()) : BufferDescriptor{};
  const int set = segment.next_set();
  std::memcpy(segment.slot(set, r), &mine, sizeof mine);
  segment_barrier(ctx, segment);  // every descriptor written (release) and visible (acquire)
  std::vector<BufferDescriptor> all(p);
  bool shareable = true;
  for (int q = 0; q < p; ++q) {
    std::memcpy(&all[q], segment.slot(set, q), sizeof all[q]);
    shareable &= all[q].shareable();
  }
  if (!shareable) return {};
  PeerMemory& memory = segment.peer_memory();
  memory.begin_collective();  // what it maps now stays mapped until this collective ends
  std::vector<char*> at(p);
  std::string why;
  for (int q = 0; q < p && why.empty(); ++q) {
    try {
      at[q] = q == r ? data : memory.address(q, all[q]);
    } catch (const CommError& e) {
      why = e.what();
    }
  }
  segment.slot(set, r)[kMappedAt] = why.empty() ? 1 : 0;
  segment_barrier(ctx, segment);
  bool mapped = true;
  for (int q = 0; q < p; ++q) mapped &= segment.slot(set, q)[kMappedAt] == 1;
  static std::atomic<bool> warned{false};  // once a process (any group's thread): likely the same
  if (!why.empty() && !warned.exchange(true)) {
    SPMD_LOG_WARN(why, "; this collective, and any other that cannot map, takes the staged path");
  }
  if (!mapped) return {};
  return at;
}

namespace {

// out = own (op) each peer's piece, a piece at a time; then / p for kAvg;
// then reduced(at, bytes) on the piece at that byte offset, while it is in
// cache. peers: the p buffers (this rank's too), each at the range reduced.
template <class Reduced>
void reduce_from(const Context& ctx, ReduceOp op, DType dtype, size_t elem, char* out,
                 const char* own, const std::vector<const char*>& peers, size_t count,
                 Reduced&& reduced) {
  const int p = ctx.size(), r = ctx.rank();
  const size_t per = std::max<size_t>(1, kZeroCopyPiece / elem);
  for (size_t first = 0; first < count; first += per) {
    const size_t n = std::min(per, count - first), at = first * elem;
    for (int k = 1; k < p; ++k) {
      combine(op, dtype, out + at, k == 1 ? own + at : out + at, peers[mod(r + k, p)] + at, n);
    }
    if (op == ReduceOp::kAvg) divide(dtype, out + at, n, p);
    reduced(at, n * elem);
  }
}

void broadcast(const Context& ctx, const std::vector<char*>& at, Span data, int root) {
  const int p = ctx.size(), r = ctx.rank();
  const size_t n = data.count, last = size_t(p - 1);
  const size_t split = part_begin(n, size_t(p), last) * data.elem;  // parts 0..p-2 | part p-1
  if (r != root) {
    copy(data.data, at[root], split, split >= kStreamBytes);
  } else {
    for (int q = 0; q < p; ++q) {
      const size_t bytes = data.bytes() - split;
      if (q != root) copy(at[q] + split, data.data + split, bytes, bytes >= kStreamBytes);
    }
  }
}

// Rank r writes its input into block r of every rank's output (`out`: the
// p outputs, its own too unless in place), a piece at a time: each piece is
// read from memory once and copied p times from cache, where reading every
// peer's input into its own output would read p blocks from memory. An
// input of kAllGatherStreamBytes or more streams every piece.
void all_gather(const Context& ctx, const std::vector<char*>& out, Span input) {
  const int p = ctx.size(), r = ctx.rank();
  const size_t n = input.bytes(), block = size_t(r) * n;
  const bool stream = n >= kAllGatherStreamBytes;
  for (size_t at = 0; at < n; at += kZeroCopyPiece) {
    const size_t len = std::min(kZeroCopyPiece, n - at);
    for (int k = 0; k < p; ++k) {
      char* dst = out[mod(r + k, p)] + block + at;
      if (dst == input.data + at) continue;  // in place: this rank's block already holds it
      copy(dst, input.data + at, len, stream);
    }
  }
}

void reduce_scatter(const Context& ctx, const std::vector<char*>& in, Span input, Span output,
                    ReduceOp op) {
  const int p = ctx.size(), r = ctx.rank();
  const size_t block = size_t(r) * output.bytes();
  std::vector<const char*> blocks(p);
  for (int q = 0; q < p; ++q) blocks[q] = in[q] + block;
  reduce_from(ctx, op, output.dtype, output.elem, output.data, input.data + block, blocks,
              output.count, [](size_t, size_t) {});
}

// Rank r reduces part r (of p) of every rank's tensor into its own, a
// piece at a time, and writes each reduced piece into part r of every
// peer's tensor while it is in cache: part r is read and written by rank r
// alone, so the barrier after (run_zero_copy's) is the only one it needs.
void all_reduce(const Context& ctx, const std::vector<char*>& at, Span data, ReduceOp op) {
  const int p = ctx.size(), r = ctx.rank();
  const size_t begin = part_begin(data.count, size_t(p), size_t(r)) * data.elem;
  std::vector<const char*> parts(p);
  for (int q = 0; q < p; ++q) parts[q] = at[q] + begin;
  char* own = data.data + begin;
  reduce_from(ctx, op, data.dtype, data.elem, own, own, parts,
              part_size(data.count, size_t(p), size_t(r)), [&](size_t piece, size_t bytes) {
                for (int k = 1; k < p; ++k)
                  copy_bytes(at[mod(r + k, p)] + begin + piece, own + piece, bytes);
              });
}

// Whether `block`, this rank's block of `whole` in size, is either that very
// block of `whole` (in place) or lies apart from all of it.
bool in_place_or_apart(const Context& ctx, Span whole, Span block) {
  return block.data == whole.at(size_t(ctx.rank()) * block.count) ||
         !overlaps(whole.data, whole.bytes(), block.data, block.bytes());
}

}  // namespace

std::optional<SharedBuffer> zero_copy_buffer(const Context& ctx, OpType type, Span whole, Span in) {
  switch (type) {
    case OpType::kAllReduce:
    case OpType::kBroadcast:
      return SharedBuffer{whole, true};
    case OpType::kAllGather:
      return SharedBuffer{whole, in_place_or_apart(ctx, whole, in)};
    case OpType::kReduceScatter:
      return SharedBuffer{in, in_place_or_apart(ctx, in, whole)};
    default:
      return std::nullopt;
  }
}

void run_zero_copy(const Context& ctx, GroupSegment& segment, const std::vector<char*>& at,
                   OpType type, Span whole, Span in, int root, ReduceOp op) {
  switch (type) {
    case OpType::kAllReduce:
      all_reduce(ctx, at, whole, op);
      break;
    case OpType::kBroadcast:
      broadcast(ctx, at, whole, root);
      break;
    case OpType::kAllGather:
      all_gather(ctx, at, in);
      break;
    default:  // kReduceScatter
      reduce_scatter(ctx, at, in, whole, op);
      break;
  }
  segment_barrier(ctx, segment);  // no rank leaves while a peer still reads or writes its buffer
  ctx.mesh.finish();
}

}  // namespace spmd::dist::shm
