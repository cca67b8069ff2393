// Shareable host blocks (see the header): a memory file per block, and a map
// from each block's address to its descriptor and serial, for the lookup of
// a pointer anywhere inside a block.
#include "tensor/cpu/shareable_blocks.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace spmd::cpu {
namespace {

struct Block {
  int fd;
  uint64_t serial;
  size_t bytes;
};

class Registry {
 public:
  Registry() {
    struct rlimit files {};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
      max_blocks_ = size_t(files.rlim_cur) / 2;
    }
    // Only the forking thread lives on in the child; holding the lock across
    // fork() keeps the map whole there.
    pthread_atfork([] { registry().mu_.lock(); }, [] { registry().mu_.unlock(); },
                   [] { registry().privatize_after_fork(); });
  }

  // Under the lock throughout, so that a fork() from another thread never
  // finds a mapped block missing from the map (its child would keep it
  // shared).
  void* map(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (blocks_.size() >= max_blocks_) return nullptr;  // leave descriptors to the rest
    const int fd = ::memfd_create("spmd-tensor", MFD_CLOEXEC);
    if (fd < 0) return nullptr;
    void* p = MAP_FAILED;
    if (::ftruncate(fd, off_t(bytes)) == 0) {
      p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (p == MAP_FAILED) {
      ::close(fd);
      return nullptr;
    }
    blocks_[uintptr_t(p)] = Block{fd, ++serials_, bytes};
    return p;
  }

  void unmap(void* p, size_t bytes) {
    int fd = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = blocks_.find(uintptr_t(p));
      if (it != blocks_.end()) {
        fd = it->second.fd;
        blocks_.erase(it);
      }
    }
    ::munmap(p, bytes);
    if (fd >= 0) ::close(fd);  // after the unmap: a reused number never names a mapped block
  }

  static Registry& registry();

  bool find(const void* p, ShareableBlock* out) {
    const uintptr_t a = uintptr_t(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.upper_bound(a);  // the first block above p
    if (it == blocks_.begin()) return false;
    --it;  // the last block at or below p
    if (a >= it->first + it->second.bytes) return false;
    *out =
        ShareableBlock{it->second.fd, it->second.serial, size_t(a - it->first), it->second.bytes};
    return true;
  }

 private:
  // In the child of fork(), single-threaded, the lock held: each block gets
  // private pages with the same contents at the same address. A child that
  // cannot have them stops here: going on, its writes would land in the
  // parent's tensors. (It cannot throw from a fork handler; write(2) and
  // abort() are what is safe there.)
  void privatize_after_fork() {
    for (auto& [address, block] : blocks_) {
      void* at = reinterpret_cast<void*>(address);
      void* copy =
          ::mmap(nullptr, block.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (copy == MAP_FAILED) die("no memory for a private copy of a shareable tensor block");
      std::memcpy(copy, at, block.bytes);
      if (::mremap(copy, block.bytes, block.bytes, MREMAP_MAYMOVE | MREMAP_FIXED, at) != at) {
        die("mremap of a shareable tensor block's private copy failed");
      }
      ::close(block.fd);
    }
    blocks_.clear();
    mu_.unlock();
  }

  [[noreturn]] static void die(const char* what) {
    static const char prefix[] = "spmd: in the child of fork(): ";
    (void)!::write(STDERR_FILENO, prefix, sizeof prefix - 1);
    (void)!::write(STDERR_FILENO, what, std::strlen(what));
    (void)!::write(STDERR_FILENO, "\n", 1);
    std::abort();
  }

  std::mutex mu_;
  std::map<uintptr_t, Block> blocks_;  // block address -> block
  uint64_t serials_ = 0;
  size_t max_blocks_ = size_t(1) << 20;  // half the descriptors this process may open
};

// Never destroyed: blocks freed during static destruction still find it.
Registry& Registry::registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

bool find_shareable_block(const void* p, ShareableBlock* block) {
  return Registry::registry().find(p, block);
}

namespace detail {

void* map_shareable_block(size_t bytes) { return Registry::registry().map(bytes); }

void unmap_shareable_block(void* p, size_t bytes) { Registry::registry().unmap(p, bytes); }

}  // namespace detail
}  // namespace spmd::cpu
