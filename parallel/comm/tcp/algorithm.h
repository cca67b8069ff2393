// What every TCP algorithm is given, and the arithmetic they share. An
// algorithm is a class in the manner of Gloo's: the constructor works out the
// peers, the segments and the chunks; run() is the narrated loop (post sends,
// post receives, wait, reduce, forward), on the thread the collective queue
// chose (../host/collective_queue.h: its waiter, else the worker).
#pragma once

#include <cstddef>
#include <cstdint>

#include "parallel/comm/tcp/mesh.h"
#include "parallel/comm/tcp/tuning.h"
#include "parallel/comm/tcp/workspace.h"
#include "parallel/comm/types.h"

namespace spmd::dist::tcp {

// The group's transport and memory, borrowed for one collective.
struct Context {
  Mesh& mesh;
  Workspace& workspace;
  const Tuning& tuning;
  int rank() const { return mesh.rank(); }
  int size() const { return mesh.size(); }
};

// A typed element range in memory.
struct Span {
  char* data;    // the first element
  size_t count;  // elements
  DType dtype;
  size_t elem;  // bytes per element

  char* at(size_t i) const { return data + i * elem; }
  size_t bytes() const { return count * elem; }
};

// [begin, end) of part k when n things are cut into `parts` parts that differ
// in size by at most one (the first n % parts parts get the extra one... in
// effect, part k starts at k * n / parts).
inline size_t part_begin(size_t n, size_t parts, size_t k) { return k * n / parts; }
inline size_t part_size(size_t n, size_t parts, size_t k) {
  return part_begin(n, parts, k + 1) - part_begin(n, parts, k);
}

// How many chunks a piece of `bytes` is cut into so each is about
// tuning.chunk_bytes (at least one).
inline size_t chunk_count(size_t bytes, const Tuning& tuning) {
  return bytes <= tuning.chunk_bytes ? 1 : (bytes + tuning.chunk_bytes - 1) / tuning.chunk_bytes;
}

inline int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace spmd::dist::tcp
