// Shareable host blocks (tensor/cpu/allocator.h, shareable_blocks.h): once
// switched on, blocks from the threshold up are memory files, found from any
// pointer inside them, smaller ones are not; and after fork() the child's
// blocks are private again (a write in the child does not reach the parent,
// as with every other tensor). The switch is process-wide and cannot be
// undone, so each case runs in a forked child and reports through its exit
// code.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>

#include "tensor/cpu/allocator.h"
#include "tensor/factory.h"
#include "tensor/tensor.h"

using namespace spmd;

namespace {

// Runs `check` in a child process; returns its exit code (0: every check
// held, else the number of the first that failed).
int in_child(const std::function<int()>& check) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(check());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

float* f32(const Tensor& t) { return static_cast<float*>(t.raw_data()); }

}  // namespace

TEST_CASE("shareable blocks: from the threshold up, found from any pointer inside",
          "[tensor][allocator]") {
  CHECK(in_child([] {
          cpu::share_host_blocks_from(size_t(1) << 20);
          Tensor big = ops::empty(Shape{int64_t(1) << 19}, {DType::kF32});    // 2 MiB
          Tensor small = ops::empty(Shape{int64_t(1) << 14}, {DType::kF32});  // 64 KiB
          cpu::ShareableBlock b;
          if (!cpu::find_shareable_block(big.raw_data(), &b)) return 1;
          if (b.offset != 0 || b.bytes < (size_t(2) << 20) || b.fd < 0) return 2;
          cpu::ShareableBlock inside;
          if (!cpu::find_shareable_block(f32(big) + 1000, &inside)) return 3;
          if (inside.offset != 4000 || inside.serial != b.serial || inside.fd != b.fd) return 4;
          if (cpu::find_shareable_block(small.raw_data(), &b)) return 5;
          return 0;
        }) == 0);
}

TEST_CASE("shareable blocks are private again in a child of fork()", "[tensor][allocator]") {
  CHECK(in_child([] {
          cpu::share_host_blocks_from(size_t(1) << 20);
          Tensor t = ops::empty(Shape{int64_t(1) << 19}, {DType::kF32});
          std::fill_n(f32(t), t.numel(), 1.f);
          const int child = in_child([&] {
            cpu::ShareableBlock b;
            if (cpu::find_shareable_block(t.raw_data(), &b)) return 1;  // forgotten here
            if (f32(t)[12345] != 1.f) return 2;                         // the contents kept
            std::fill_n(f32(t), t.numel(), 2.f);                        // must not reach the parent
            return 0;
          });
          if (child != 0) return 10 + child;
          if (f32(t)[0] != 1.f || f32(t)[12345] != 1.f) return 3;  // the child's write came through
          cpu::ShareableBlock b;
          return cpu::find_shareable_block(t.raw_data(), &b) ? 0 : 4;  // still shareable here
        }) == 0);
}

TEST_CASE("shareable blocks: switching them on gives back the cached ordinary blocks they replace",
          "[tensor][allocator]") {
  CHECK(in_child([] {
          cpu::empty_host_cache();
          { Tensor t = ops::empty(Shape{int64_t(1) << 18}, {DType::kF32}); }  // 1 MiB, cached
          { Tensor t = ops::empty(Shape{int64_t(1) << 16}, {DType::kF32}); }  // 256 KiB, cached
          const size_t before = cpu::host_memory_stats().cached;
          if (before < (size_t(5) << 18)) return 1;  // both cached
          cpu::share_host_blocks_from(size_t(512) << 10);
          const size_t after = cpu::host_memory_stats().cached;
          if (before - after != (size_t(1) << 20)) return 2;  // the 1 MiB block only
          Tensor t = ops::empty(Shape{int64_t(1) << 18}, {DType::kF32});
          cpu::ShareableBlock b;
          if (!cpu::find_shareable_block(t.raw_data(), &b)) return 3;  // a new, shareable one
          return 0;
        }) == 0);
}
