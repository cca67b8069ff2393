// tensor/cuda_api.h in a build without CUDA (compiled instead of
// tensor/cuda/cuda_api.cpp when SPMD_WITH_CUDA is off): there is no GPU, and
// anything that needs one says why it is not there.
#include "tensor/cuda_api.h"

namespace spmd::cuda {
namespace {

[[noreturn]] void unavailable(const char* what) {
  SPMD_THROW(Error, "cuda::", what,
             ": this spmd was built without CUDA (SPMD_CUDA=OFF, or no nvcc was found)");
}

}  // namespace

struct Stream::Impl {};
struct Event::Impl {};

bool is_available() { return false; }
int device_count() { return 0; }
int current_device() { unavailable("current_device"); }
void set_device(int) { unavailable("set_device"); }
std::string device_name(int) { unavailable("device_name"); }
void synchronize(int) { unavailable("synchronize"); }

size_t memory_allocated(int) { unavailable("memory_allocated"); }
size_t max_memory_allocated(int) { unavailable("max_memory_allocated"); }
size_t memory_reserved(int) { unavailable("memory_reserved"); }
void reset_peak_memory_stats(int) { unavailable("reset_peak_memory_stats"); }
void empty_cache() { unavailable("empty_cache"); }
MemInfo mem_get_info(int) { unavailable("mem_get_info"); }
void set_allow_tf32(bool) { unavailable("set_allow_tf32"); }
bool allow_tf32() { return false; }

Stream Stream::create(int, bool) { unavailable("Stream::create"); }
Stream Stream::default_stream(int) { unavailable("Stream::default_stream"); }
void* Stream::handle() const { unavailable("Stream::handle"); }
int Stream::device_index() const { unavailable("Stream::device_index"); }
void Stream::synchronize() const { unavailable("Stream::synchronize"); }
bool Stream::query() const { unavailable("Stream::query"); }
void Stream::wait_event(const Event&) const { unavailable("Stream::wait_event"); }
void Stream::wait_stream(const Stream&) const { unavailable("Stream::wait_stream"); }
Stream current_stream(int) { unavailable("current_stream"); }
void set_current_stream(const Stream&) { unavailable("set_current_stream"); }
StreamGuard::StreamGuard(const Stream& stream) : previous_(stream) { unavailable("StreamGuard"); }
StreamGuard::~StreamGuard() = default;

Event::Event(bool) { unavailable("Event"); }
void Event::record() { unavailable("Event::record"); }
void Event::record(const Stream&) { unavailable("Event::record"); }
void Event::synchronize() const { unavailable("Event::synchronize"); }
bool Event::query() const { unavailable("Event::query"); }
float Event::elapsed_ms(const Event&) const { unavailable("Event::elapsed_ms"); }
void* Event::handle() const { unavailable("Event::handle"); }

void record_stream(const Tensor&, const Stream&) { unavailable("record_stream"); }

}  // namespace spmd::cuda
