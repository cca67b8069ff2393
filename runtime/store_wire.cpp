// Little-endian encoding and bounds-checked decoding of store frames.
#include "runtime/store_wire.h"

namespace spmd::store_wire {

Writer& Writer::u8(uint8_t v) {
  buf_.push_back(v);
  return *this;
}

Writer& Writer::u16(uint16_t v) {
  for (int i = 0; i < 2; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

Writer& Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

Writer& Writer::i64(int64_t v) {
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(u >> (8 * i)));
  return *this;
}

Writer& Writer::bytes(const void* data, size_t n) {
  SPMD_CHECK(n <= kMaxFrameBytes, "store: a key or value of ", n, " bytes exceeds the limit of ",
             kMaxFrameBytes, " bytes");
  u32(static_cast<uint32_t>(n));
  auto* p = static_cast<const uint8_t*>(data);
  buf_.insert(buf_.end(), p, p + n);
  return *this;
}

Writer& Writer::keys(const std::vector<std::string>& ks) {
  u32(static_cast<uint32_t>(ks.size()));
  for (const std::string& k : ks) str(k);
  return *this;
}

std::vector<uint8_t> Writer::finish() {
  size_t body = buf_.size() - 4;
  SPMD_CHECK(body <= kMaxFrameBytes, "store: a message of ", body, " bytes exceeds the limit of ",
             kMaxFrameBytes, " bytes");
  for (int i = 0; i < 4; ++i) buf_[i] = static_cast<uint8_t>(body >> (8 * i));
  return std::move(buf_);
}

const uint8_t* Reader::take(size_t n) {
  if (static_cast<size_t>(end_ - p_) < n)
    throw ProtocolError(
        str_cat("truncated message: wanted ", n, " more bytes, ", end_ - p_, " left"));
  const uint8_t* at = p_;
  p_ += n;
  return at;
}

uint8_t Reader::u8() { return *take(1); }

uint16_t Reader::u16() {
  const uint8_t* p = take(2);
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

uint32_t Reader::u32() { return load_u32(take(4)); }

int64_t Reader::i64() {
  const uint8_t* p = take(8);
  uint64_t u = 0;
  for (int i = 7; i >= 0; --i) u = (u << 8) | p[i];
  return static_cast<int64_t>(u);
}

Bytes Reader::bytes() {
  uint32_t n = u32();
  const uint8_t* p = take(n);
  return Bytes(p, p + n);
}

std::string Reader::str() {
  uint32_t n = u32();
  const uint8_t* p = take(n);
  return std::string(reinterpret_cast<const char*>(p), n);
}

std::vector<std::string> Reader::keys() {
  uint32_t n = u32();
  // Each key needs at least its 4-byte length: a count larger than the rest
  // of the frame allows is garbage, refused before anything is reserved.
  if (n > static_cast<size_t>(end_ - p_) / 4)
    throw ProtocolError(str_cat("key count ", n, " too large"));
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(str());
  return out;
}

void Reader::expect_end() const {
  if (p_ != end_)
    throw ProtocolError(str_cat(end_ - p_, " unexpected bytes at the end of a message"));
}

uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace spmd::store_wire
