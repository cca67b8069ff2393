// Host blocks that another process of the same user can map: each is an
// anonymous memory file (memfd_create, sized with ftruncate, mapped
// MAP_SHARED), so a peer that knows this process's pid and the block's file
// descriptor opens it as /proc/<pid>/fd/<fd> and maps the very same pages.
// The communicator's shared-memory collectives use this to copy straight from
// one rank's tensor into another's (docs/shm.md, "Zero copy"); tensor/
// itself never maps anything of another process.
//
// A memory file has no name, so nothing is left behind in /dev/shm however
// the process ends; its pages live as long as some process maps it or holds
// its descriptor. File descriptors are reused once closed, so each block also
// carries a serial, unique within the process, that tells a peer whether the
// block it mapped earlier under that descriptor is still the one it sees.
//
// Each block holds a file descriptor, so at most half of the process's
// limit on them (RLIMIT_NOFILE, when the registry is first used) are blocks;
// beyond that map_shareable_block() refuses and the allocator hands out
// ordinary blocks.
//
// After fork() the child's copies of the blocks would still share pages with
// the parent (MAP_SHARED), unlike the copy-on-write private memory every
// other tensor has; so in the child each block is copied into private memory
// at its address and forgotten (it is no longer shareable there): a fork()
// copies every shareable byte at once (posix_spawn does not: it runs no fork
// handlers), and a child that cannot get the memory for it aborts with a
// message rather than share its parent's tensors.
//
// Thread-safe. Internal to the CPU allocator (allocator.h), which decides
// which blocks are shareable.
#pragma once

#include <cstddef>

#include "tensor/cpu/allocator.h"

namespace spmd::cpu::detail {

// A new shareable block of `bytes` (a multiple of the page size), or null
// when the system refuses one (no descriptor left, no memory).
void* map_shareable_block(size_t bytes);
// Unmaps a block map_shareable_block() returned and closes its descriptor
// (after a fork, only unmaps the private copy).
void unmap_shareable_block(void* p, size_t bytes);

}  // namespace spmd::cpu::detail
