// [gpu] The CUDA runtime pieces: the caching allocator's statistics and
// reuse, its out-of-memory error, streams, events and record_stream, and the
// API's behaviour when there is no GPU.
#include <catch2/catch.hpp>

#include "gpu_test_util.h"

namespace spmd::test {
namespace {

// Queues about a TFLOP of f32 matrix products on the current stream: tens of
// milliseconds on an H200, ages next to the microseconds the host needs to go on.
void keep_busy(const Tensor& a, const Tensor& c) {
  for (int i = 0; i < 8; ++i) backend_for(a.device()).matmul(a, a, c, 1, 0);
}

}  // namespace

TEST_CASE("without a GPU the CUDA API says so instead of failing later", "[gpu]") {
  CHECK(cuda::is_available() == (cuda::device_count() > 0));
  if (!cuda::is_available()) {
    CHECK_THROWS_AS(cuda::current_device(), Error);
    CHECK_THROWS_AS(cuda::memory_allocated(), Error);
    CHECK_THROWS_AS(cuda::Stream::create(), Error);
    return;
  }
  CHECK_THROWS_WITH(cuda::set_device(cuda::device_count()), Catch::Contains("does not exist"));
  CHECK_THROWS_WITH(empty(Device::cuda(cuda::device_count()), {4}, DType::kF32),
                    Catch::Contains("GPU(s) visible"));
}

TEST_CASE("the caching allocator counts, reuses and releases blocks", "[gpu]") {
  SPMD_REQUIRE_GPU();
  const size_t base_allocated = cuda::memory_allocated();
  {
    Tensor t = empty(kGpu, {250}, DType::kF32);  // 1000 bytes: the 1024-byte class
    CHECK(cuda::memory_allocated() - base_allocated == 1024);
  }
  CHECK(cuda::memory_allocated() == base_allocated);

  // The same size again and again: served from the cache, nothing new reserved.
  { Tensor warm = empty(kGpu, {3, 1000, 1000}, DType::kF32); }
  const size_t reserved = cuda::memory_reserved();
  for (int i = 0; i < 50; ++i) {
    Tensor t = empty(kGpu, {3, 1000, 1000}, DType::kF32);
  }
  CHECK(cuda::memory_reserved() == reserved);

  // Peak tracking.
  cuda::reset_peak_memory_stats();
  {
    Tensor a = empty(kGpu, {1 << 20}, DType::kF32);  // 4 MiB
    Tensor b = empty(kGpu, {1 << 20}, DType::kF32);
  }
  CHECK(cuda::max_memory_allocated() >= cuda::memory_allocated() + (size_t(8) << 20));

  // empty_cache gives back everything that no tensor holds.
  Tensor live = empty(kGpu, {1 << 18}, DType::kF32);
  cuda::empty_cache();
  CHECK(cuda::memory_reserved() == cuda::memory_allocated());
  CHECK(cuda::memory_allocated() >= (size_t(1) << 20));
}

TEST_CASE("out of memory says how much was asked, allocated and reserved", "[gpu]") {
  SPMD_REQUIRE_GPU();
  const size_t huge = size_t(1) << 52;  // 4 PiB
  try {
    backend_for(kGpu).allocate(huge, kGpu);
    FAIL("a 4 PiB allocation succeeded");
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("CUDA out of memory on cuda:0"));
    CHECK_THAT(what, Catch::Contains("tried to allocate 4096.00 TiB"));
    CHECK_THAT(what, Catch::Contains("allocated by tensors"));
    CHECK_THAT(what, Catch::Contains("reserved"));
  }
  Tensor after = empty(kGpu, {16}, DType::kF32);  // the allocator still works
  CHECK(after.defined());
}

TEST_CASE("streams: work waits for the events it is told to wait for", "[gpu]") {
  SPMD_REQUIRE_GPU();
  Tensor a = from_doubles(uniform_values(4096 * 4096, -1, 1, 8), {4096, 4096}, DType::kF32, kGpu);
  Tensor c = empty(kGpu, {4096, 4096}, DType::kF32);
  Tensor x = empty(kGpu, {1 << 20}, DType::kF32);
  backend_for(kGpu).fill(x, 0);
  cuda::synchronize();

  cuda::Stream side = cuda::Stream::create();
  CHECK(side.handle() != nullptr);
  CHECK(!(side == cuda::current_stream()));
  cuda::Event start(true), stop(true);
  {
    cuda::StreamGuard guard(side);
    CHECK(cuda::current_stream() == side);
    start.record();
    keep_busy(a, c);
    backend_for(kGpu).fill(x, 1);  // after the products, on the side stream
    stop.record();
  }
  CHECK(cuda::current_stream() == cuda::Stream::default_stream());
  // The default stream waits for the side stream's work, then adds 1.
  cuda::current_stream().wait_stream(side);
  backend_for(kGpu).binary_scalar(BinaryOp::kAdd, x, 1, x, false);
  const std::vector<double> v = to_doubles(x);  // waits for the default stream
  CHECK(v.front() == 2);
  CHECK(v.back() == 2);
  stop.synchronize();
  CHECK(stop.query());
  CHECK(side.query());
  CHECK(start.elapsed_ms(stop) > 0);
}

TEST_CASE("record_stream keeps a block from reuse until the other stream is done", "[gpu]") {
  SPMD_REQUIRE_GPU();
  Tensor a = from_doubles(uniform_values(4096 * 4096, -1, 1, 9), {4096, 4096}, DType::kF32, kGpu);
  Tensor c = empty(kGpu, {4096, 4096}, DType::kF32);
  cuda::Stream side = cuda::Stream::create();
  void* first = nullptr;
  {
    Tensor t = empty(kGpu, {12345}, DType::kF32);  // allocated on the default stream
    first = t.storage()->data();
    cuda::StreamGuard guard(side);
    keep_busy(a, c);
    backend_for(kGpu).fill(t, 3);  // used on the side stream, behind the products
    cuda::record_stream(t, side);
  }  // freed while the side stream still has it queued
  Tensor u = empty(kGpu, {12345}, DType::kF32);
  CHECK(u.storage()->data() != first);  // parked, not handed out
  side.synchronize();
  Tensor w = empty(kGpu, {12345}, DType::kF32);
  CHECK(w.storage()->data() == first);  // back in the free list once the side stream passed
}

TEST_CASE("a stream dropped before the tensor it used is freed stays valid until then", "[gpu]") {
  SPMD_REQUIRE_GPU();
  Tensor a = from_doubles(uniform_values(2048 * 2048, -1, 1, 10), {2048, 2048}, DType::kF32, kGpu);
  Tensor c = empty(kGpu, {2048, 2048}, DType::kF32);
  Tensor t = empty(kGpu, {777}, DType::kF32);  // allocated on the default stream
  void* first = t.storage()->data();
  {
    cuda::Stream side = cuda::Stream::create();
    cuda::StreamGuard guard(side);
    keep_busy(a, c);
    backend_for(kGpu).fill(t, 5);
    cuda::record_stream(t, side);
  }              // the caller's last handle of the side stream is gone; the block keeps the stream
  t = Tensor();  // freed now: the allocator records its event on the side stream
  cuda::synchronize(0);
  Tensor w = empty(kGpu, {777}, DType::kF32);
  CHECK(w.storage()->data() == first);  // reused once the (kept) stream passed its event
}

}  // namespace spmd::test
