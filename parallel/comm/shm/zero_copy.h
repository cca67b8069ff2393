// Zero-copy collectives: in a group whose ranks share a host, when every
// buffer a rank's peers must read (or, for all_gather, write) lies in a
// shareable block (tensor/cpu/allocator.h), each rank maps its peers'
// buffers (peer_memory.h) and copies or reduces straight between them and
// its own: every byte is
// copied once, user space to user space, where the slots of the group
// segment (segment_collectives.h, segment_all_reduce.h) copy it in and out.
// It is what XPMEM gives MPI, and symmetric memory gives PyTorch on GPUs.
//
// Every collective of the four begins the same way: each rank writes into
// its own slot of the segment the descriptor of the buffer its peers read
// or write (BufferDescriptor, or "not shareable"), then a barrier (segment_barrier:
// release before, acquire after), then each rank reads every descriptor and
// decides from them alone, so alike on every rank: when some is not
// shareable, the staged path of the slots (which then runs as it always did;
// the descriptors cost it one barrier). Else each rank maps every peer's
// buffer, writes into its slot whether it could (a mapping may fail: EMFILE,
// ENOMEM, vm.max_map_count), and a second barrier lets every rank read what
// all wrote: zero-copy when all could, else the staged path, so no rank
// waits for a peer that left for the other path, nor writes into the tensor
// of a rank that already returned (the rank that could not map warns, once a
// process). Each ends with a barrier, so that no rank returns, and reuses or
// frees its buffer, while a peer still reads it or writes it.
//
// p ranks, rank r; the buffers peers read or write are named; the steps between
// barriers (|) in order:
//   broadcast       (the root's tensor, and every other's)
//                   each non-root copies parts 0..p-2 of the tensor (cut in
//                   p parts) from the root's; the root writes part p-1 into
//                   every non-root's tensor: each rank copies (p-1)/p of it,
//                   all cores at work, none of the parts written twice. |
//   all_gather      (each rank's output)
//                   rank r writes its input into block r of every rank's
//                   output, its own too unless in place, a piece of
//                   kZeroCopyPiece at a time: each piece is read once and
//                   copied p times from cache. |
//   reduce_scatter  (each rank's input)
//                   rank r reduces block r of every input into its output,
//                   in pieces of kZeroCopyPiece so that the partial sums stay
//                   in cache. |
//   all_reduce      (each rank's tensor)
//                   rank r reduces part r (of p) of every rank's tensor into
//                   part r of its own, a piece at a time, and writes each
//                   reduced piece into part r of every peer's tensor while it
//                   is in cache. |
//
// In place. all_reduce: rank r reads and writes only part r of every
// tensor, and no other rank touches part r, so no part is read while
// another rank writes it; the one barrier after orders rank r's writes into
// part r of a peer's tensor before that peer returns. reduce_scatter: rank r
// writes only its output, which is never read by a peer when it is block r of
// its own input (in place) or apart from the input; an output that overlaps
// the input elsewhere is published as not shareable (the staged path).
// all_gather: rank r reads only its input and writes only block r of every
// output; its peers write only the other blocks of its output. Its input is
// block r of its output (in place) or apart from it; an input that overlaps
// the output elsewhere is published as not shareable, unless run_in_segment
// (run_in_segment.h) moved it to block r first (when the staged path would take it).
// broadcast: the root's tensor is only read; each non-root's part p-1 is
// written only by the root, its other parts only by itself.
//
// A dead peer: its mapped pages stay readable (peer_memory.h), so a copy in
// progress ends, and the next barrier fails the collective naming the op, its
// sequence number and the peer, as on the staged path.
#pragma once

#include <optional>
#include <vector>

#include "parallel/comm/shm/algorithm.h"
#include "parallel/comm/shm/group_segment.h"

namespace spmd::dist::shm {

// Bytes reduced at a time from every peer (reduce_scatter, all_reduce), or
// copied at a time to every peer (all_gather).
constexpr size_t kZeroCopyPiece = size_t(128) << 10;

// The buffer a zero-copy collective's peers read or write (the tensor of
// all_reduce and broadcast, all_gather's output, reduce_scatter's input),
// and whether it may be shared: all_gather's input, or reduce_scatter's
// output, must be this rank's block of it or lie apart from it.
struct SharedBuffer {
  Span span;
  bool usable = false;
};
// That buffer for `type`; none for the collectives without a zero-copy
// algorithm. `whole` and `in` as for run_in_segment (run_in_segment.h).
std::optional<SharedBuffer> zero_copy_buffer(const Context& ctx, OpType type, Span whole, Span in);

// Publishes this rank's buffer in the segment, maps every peer's, and
// returns every rank's buffer as an address here (this rank's own among
// them); empty when some rank's is not shareable, or some rank could not map
// a peer's: then every rank, having decided alike after the barriers, takes
// another path.
std::vector<char*> map_peer_buffers(const Context& ctx, GroupSegment& segment,
                                    const SharedBuffer& shared);

// Runs the zero-copy algorithm of `type` over the mapped buffers `at`
// (map_peer_buffers), then the barrier after which no peer reads or writes
// this rank's buffers any more.
void run_zero_copy(const Context& ctx, GroupSegment& segment, const std::vector<char*>& at,
                   OpType type, Span whole, Span in, int root, ReduceOp op);

}  // namespace spmd::dist::shm
