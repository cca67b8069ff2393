// The TCPStore wire protocol, version 1 (docs/store-protocol.md is its
// specification): length-prefixed frames of little-endian fields. This file
// is the encoder and the bounds-checked decoder; both ends of the connection
// use it, so the format is written down in one place.
//
//   frame    = u32 body_length, body            (body_length <= kMaxFrameBytes)
//   hello    = u32 kMagic, u16 version          (client -> server, first frame)
//   request  = u8 Op, fields...
//   response = u8 Status, fields...
//   bytes    = u32 length, that many bytes      (keys and values)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/store.h"

namespace spmd::store_wire {

constexpr uint32_t kMagic = 0x444d5053;  // "SPMD" as the bytes 'S','P','M','D'
constexpr uint16_t kVersion = 1;
// A frame larger than this closes the connection: values are addresses,
// NCCL ids and counters, never bulk data.
constexpr uint32_t kMaxFrameBytes = 16u << 20;

enum class Op : uint8_t {
  kSet = 1,         // key, value                  -> kOk
  kGet = 2,         // key, i64 timeout_ms         -> kOk value | kTimeout keys
  kAdd = 3,         // key, i64 delta              -> kOk i64 | kError message
  kCompareSet = 4,  // key, expected, desired      -> kOk value
  kWait = 5,        // u32 n, n keys, i64 timeout  -> kOk | kTimeout keys
  kCheck = 6,       // u32 n, n keys               -> kOk u8
  kDeleteKey = 7,   // key                         -> kOk u8
  kNumKeys = 8,     //                             -> kOk i64
};

enum class Status : uint8_t {
  kOk = 0,
  kTimeout = 1,  // u32 n, n missing keys
  kError = 2,    // message: the request was well formed but refused
};

// A malformed frame: the server closes the connection that sent it.
class ProtocolError : public CommError {
 public:
  using CommError::CommError;
};

// Builds one frame; finish() returns it with its length prefix filled in.
class Writer {
 public:
  Writer() : buf_(4, 0) {}
  Writer& u8(uint8_t v);
  Writer& u16(uint16_t v);
  Writer& u32(uint32_t v);
  Writer& i64(int64_t v);
  Writer& bytes(const void* data, size_t n);
  Writer& bytes(const Bytes& b) { return bytes(b.data(), b.size()); }
  Writer& str(const std::string& s) { return bytes(s.data(), s.size()); }
  Writer& keys(const std::vector<std::string>& ks);
  std::vector<uint8_t> finish();

 private:
  std::vector<uint8_t> buf_;
};

// Reads the fields of one frame body; every read checks the remaining length
// and throws ProtocolError instead of reading past the end.
class Reader {
 public:
  Reader(const uint8_t* data, size_t n) : p_(data), end_(data + n) {}
  uint8_t u8();
  uint16_t u16();
  uint32_t u32();
  int64_t i64();
  Bytes bytes();
  std::string str();
  std::vector<std::string> keys();
  // Throws ProtocolError unless the whole body was read.
  void expect_end() const;

 private:
  const uint8_t* take(size_t n);
  const uint8_t* p_;
  const uint8_t* end_;
};

// The little-endian u32 at p (a frame's length prefix).
uint32_t load_u32(const uint8_t* p);

}  // namespace spmd::store_wire
