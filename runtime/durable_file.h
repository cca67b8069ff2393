// Files that survive a crash, and a checksum to tell when one did not.
//
// A write that returned is not on disk: it sits in the page cache until the
// kernel writes it back, and a power cut or a crashed VM loses it. A rename
// is not on disk either until the folder that holds the name is synced. So a
// file that must survive is written, then fsync'ed, then checked (its size
// on disk, as fstat sees it after the sync, is what was written), and
// renamed into place through a temporary name, then its folder fsync'ed:
//
//   write_durably(path, bytes)          write + fsync + check, no rename
//   replace_durably(path, bytes)        the same to "<path>.tmp", rename, fsync the folder
//   sync_folder(path)                   fsync a folder (after a rename into it)
//
// A failure throws Error naming the file, the call and the errno's text;
// when the disk is full (ENOSPC, EDQUOT), the bytes the write needed against
// the bytes free on that filesystem. The caller removes what it left
// behind.
//
// crc32c is the Castagnoli CRC (iSCSI, ext4, Btrfs, gRPC), computed with
// the SSE4.2 crc32 instruction where the CPU has it and with a table
// elsewhere: the same values either way. A checkpoint stores one per
// block of its tensors and checks it on load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace spmd {

// The CRC-32C of `n` bytes, continuing from `crc` (0 to start):
// crc32c(crc32c(0, a), b) == crc32c(0, a + b).
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

// A chunk of bytes to write, in order.
struct ByteSpan {
  const void* data;
  size_t size;
};

// Writes the spans to `path` (created or truncated), fsyncs it and checks
// its size. Throws Error on any failure (see above).
void write_durably(const std::string& path, const ByteSpan* spans, size_t count);
void write_durably(const std::string& path, const std::string& text);

// write_durably to "<path>.tmp", then renames it to `path` and syncs the
// folder: a reader sees the old file or the whole new one.
void replace_durably(const std::string& path, const std::string& text);

// fsyncs the folder `path` so that the names in it (a rename, a new file)
// survive a crash.
void sync_folder(const std::string& path);

// "needs 1.2 GiB, 300.0 MiB free on /ckpt" for the filesystem of `path`
// (its nearest existing folder), or "" when statvfs fails.
std::string space_note(const std::string& path, uint64_t needed);

}  // namespace spmd
