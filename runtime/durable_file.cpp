// Durable writes and CRC-32C (durable_file.h).
#include "runtime/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/error.h"
#include "runtime/fault.h"
#include "runtime/resource_limits.h"

namespace spmd {
namespace {

namespace fs = std::filesystem;

// --- CRC-32C ---------------------------------------------------------------------------

constexpr uint32_t kPolynomial = 0x82F63B78;  // Castagnoli's, bit-reversed

// table[b]: the CRC of the byte b alone, the usual byte-at-a-time table.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[b] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

// The running (inverted) CRC over n bytes, a byte at a time.
uint32_t crc_table(uint32_t c, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
// The same with SSE4.2's crc32 instruction, 8 bytes at a time.
__attribute__((target("sse4.2"))) uint32_t crc_sse42(uint32_t c, const unsigned char* p, size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
  }
  c = uint32_t(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}

bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

// --- Errors ------------------------------------------------------------------------------

[[noreturn]] void fail(const std::string& what, const std::string& path, int err, uint64_t needed) {
  std::string note;
  if ((err == ENOSPC || err == EDQUOT) && needed > 0) note = " (" + space_note(path, needed) + ")";
  SPMD_THROW(Error, what, " ", path, ": ", std::strerror(err), note);
}

// Closes fd on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, returning close()'s errno (0 when it succeeded).
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

}  // namespace

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (have_sse42()) return ~crc_sse42(~crc, p, n);
#endif
  return ~crc_table(~crc, p, n);
}

std::string space_note(const std::string& path, uint64_t needed) {
  fs::path folder = fs::path(path).parent_path();
  std::error_code ec;
  while (!folder.empty() && !fs::exists(folder, ec)) folder = folder.parent_path();
  if (folder.empty()) folder = ".";
  struct statvfs st {};
  if (::statvfs(folder.c_str(), &st) != 0) return "";
  const uint64_t free = uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
  return "needs " + format_bytes(needed) + ", " + format_bytes(free) + " free on " +
         folder.string();
}

void write_durably(const std::string& path, const ByteSpan* spans, size_t count) {
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += spans[i].size;
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("cannot create", path, errno, total);
  for (size_t i = 0; i < count; ++i) {
    const char* p = static_cast<const char*>(spans[i].data);
    size_t left = spans[i].size;
    while (left > 0) {
      const ssize_t n = ::write(fd.get(), p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("cannot write", path, errno, total);
      p += n;
      left -= size_t(n);
    }
    fault_point("file.write");
  }
  if (::fsync(fd.get()) != 0) fail("cannot sync (fsync)", path, errno, total);
  fault_point("file.sync");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot stat", path, errno, 0);
  SPMD_CHECK(uint64_t(st.st_size) == total, "wrote ", total, " bytes to ", path, " but it holds ",
             uint64_t(st.st_size), " after the sync");
  if (const int err = fd.close()) fail("cannot close", path, err, total);
}

void write_durably(const std::string& path, const std::string& text) {
  const ByteSpan span{text.data(), text.size()};
  write_durably(path, &span, 1);
}

void sync_folder(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open the folder", path, errno, 0);
  if (::fsync(fd.get()) != 0) fail("cannot sync (fsync) the folder", path, errno, 0);
}

void replace_durably(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  try {
    write_durably(tmp, text);
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) fail("cannot rename " + tmp + " to", path, ec.value(), 0);
    fault_point("file.rename");
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  std::string folder = fs::path(path).parent_path().string();
  sync_folder(folder.empty() ? "." : folder);
}

}  // namespace spmd
