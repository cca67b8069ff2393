// Describing this process's buffers and mapping a peer's (see the header).
#include "parallel/comm/shm/peer_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <utility>

#include "runtime/error.h"
#include "tensor/cpu/allocator.h"

namespace spmd::dist::shm {

BufferDescriptor describe_buffer(const void* data, size_t bytes) {
  BufferDescriptor d;
  cpu::ShareableBlock block;
  if (data == nullptr || !cpu::find_shareable_block(data, &block)) return d;
  if (block.offset + bytes > block.bytes) return d;  // not all of it in the block
  d.pid = int32_t(::getpid());
  d.fd = block.fd;
  d.serial = block.serial;
  d.offset = block.offset;
  d.block_bytes = block.bytes;
  return d;
}

void* map_process_file(int pid, int fd, size_t bytes, std::string* why) {
  const std::string path = str_cat("/proc/", pid, "/fd/", fd);
  const int f = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (f < 0) {
    *why = str_cat("open(", path, "): ", std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  void* p = nullptr;
  if (::fstat(f, &st) != 0 || size_t(st.st_size) != bytes) {
    *why = str_cat(path, " has ", st.st_size, " bytes, not ", bytes);
  } else {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (p == MAP_FAILED) {
      *why = str_cat("mmap(", path, "): ", std::strerror(errno));
      p = nullptr;
    }
  }
  ::close(f);  // the mapping keeps the file
  return p;
}

namespace {
constexpr size_t kProbeBytes = 4096;
}

MappingProbe::MappingProbe() {
  fd_ = ::memfd_create("spmd-probe", MFD_CLOEXEC);
  if (fd_ < 0) return;
  std::random_device rd;
  cookie_ = (uint64_t(rd()) << 32) | rd();
  if (::ftruncate(fd_, off_t(kProbeBytes)) != 0 ||
      ::pwrite(fd_, &cookie_, sizeof cookie_, 0) != ssize_t(sizeof cookie_)) {
    ::close(fd_);
    fd_ = -1;
  }
}

MappingProbe::~MappingProbe() {
  if (fd_ >= 0) ::close(fd_);
}

std::string MappingProbe::text() const {
  return fd_ < 0 ? std::string() : str_cat(::getpid(), " ", fd_, " ", cookie_);
}

bool MappingProbe::check(const std::string& text, std::string* why) {
  std::istringstream in(text);
  int pid = 0, fd = -1;
  uint64_t cookie = 0;
  if (!(in >> pid >> fd >> cookie)) {
    *why = "the peer has no probe";
    return false;
  }
  void* p = map_process_file(pid, fd, kProbeBytes, why);
  if (p == nullptr) return false;
  uint64_t seen = 0;
  std::memcpy(&seen, p, sizeof seen);
  ::munmap(p, kProbeBytes);
  if (seen != cookie) *why = str_cat("/proc/", pid, "/fd/", fd, " is not the peer's probe");
  return seen == cookie;
}

PeerMemory::~PeerMemory() {
  for (const Mapping& m : mappings_) ::munmap(m.base, m.bytes);
}

char* PeerMemory::address(int peer, const BufferDescriptor& d) {
  ++uses_;
  for (size_t i = 0; i < mappings_.size(); ++i) {
    Mapping& m = mappings_[i];
    if (m.peer != peer || m.fd != d.fd) continue;
    if (m.serial == d.serial && m.bytes == d.block_bytes) {
      m.last_used = uses_;
      m.collective = collective_;
      return m.base + d.offset;
    }
    drop(i);  // the peer closed that block; its number now names another
    break;    // (at most one mapping per (peer, fd))
  }
  evict_for(d.block_bytes);
  std::string why;
  void* base = map_process_file(d.pid, d.fd, d.block_bytes, &why);
  if (base == nullptr) {
    SPMD_THROW(CommError, "zero-copy: cannot map the buffer of rank ", peer, ": ", why);
  }
  mappings_.push_back(
      Mapping{peer, d.fd, d.serial, static_cast<char*>(base), d.block_bytes, uses_, collective_});
  mapped_bytes_ += d.block_bytes;
  return static_cast<char*>(base) + d.offset;
}

void PeerMemory::evict_for(size_t bytes) {
  while (mappings_.size() >= limits_.max_mappings ||
         mapped_bytes_ + bytes > limits_.max_mapped_bytes) {
    size_t oldest = mappings_.size();
    for (size_t i = 0; i < mappings_.size(); ++i) {
      if (mappings_[i].collective == collective_) continue;  // in use now
      if (oldest == mappings_.size() || mappings_[i].last_used < mappings_[oldest].last_used) {
        oldest = i;
      }
    }
    if (oldest == mappings_.size()) return;  // all in use: this collective exceeds the limits
    drop(oldest);
  }
}

void PeerMemory::drop(size_t i) {
  ::munmap(mappings_[i].base, mappings_[i].bytes);
  mapped_bytes_ -= mappings_[i].bytes;
  mappings_.erase(mappings_.begin() + std::ptrdiff_t(i));
}

}  // namespace spmd::dist::shm
