// Collectives of small structured records, as torch.distributed's
// all_gather_object, but typed: instead of pickling any Python object, a
// record says how it becomes bytes (encode) and how it comes back (decode),
// with the small explicit encoder below. Used to compare what the ranks
// hold (DDP compares its parameters' names, shapes and dtypes this way)
// before any tensor moves.
//
//   struct Entry {
//     std::string name; int64_t size;
//     void encode(RecordWriter& w) const { w.str(name); w.i64(size); }
//     static Entry decode(RecordReader& r) { return {r.str(), r.i64()}; }
//   };
//   std::vector<Entry> all = all_gather_object(group, mine);  // all[r]: rank r's
//
// How the bytes travel: every rank's byte count is all-gathered first, then
// every rank's bytes, padded to the longest, in one all_gather of i64 words
// (the communicator carries no u8). Not here: scatter or broadcast of
// objects, and records of megabytes (the padding makes it n * longest).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/comm/process_group.h"
#include "runtime/error.h"

namespace spmd::dist {

// Appends fixed-width integers (in the host's byte order: every rank runs the
// same binary on the same kind of host) and length-prefixed strings and lists
// to a byte buffer.
class RecordWriter {
 public:
  void u8(uint8_t v) { put(&v, 1); }
  void i64(int64_t v) { put(&v, sizeof v); }
  void str(std::string_view s) {
    i64(int64_t(s.size()));
    put(s.data(), s.size());
  }
  void i64s(const std::vector<int64_t>& v) {
    i64(int64_t(v.size()));
    for (int64_t x : v) i64(x);
  }
  // A count, then each item's encode().
  template <class T>
  void list(const std::vector<T>& items) {
    i64(int64_t(items.size()));
    for (const T& item : items) item.encode(*this);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  void put(const void* p, size_t n) {
    const size_t at = bytes_.size();
    bytes_.resize(at + n);
    if (n > 0) std::memcpy(bytes_.data() + at, p, n);
  }
  std::vector<uint8_t> bytes_;
};

// Reads back what a RecordWriter wrote, in the same order. Reading past the
// end, or a length longer than what is left, throws CommError: the bytes
// were not written by the same encode().
class RecordReader {
 public:
  explicit RecordReader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  uint8_t u8() {
    uint8_t v;
    get(&v, 1);
    return v;
  }
  int64_t i64() {
    int64_t v;
    get(&v, sizeof v);
    return v;
  }
  std::string str() {
    const size_t n = length(1);
    std::string s(n, '\0');
    get(s.data(), n);
    return s;
  }
  std::vector<int64_t> i64s() {
    std::vector<int64_t> v(length(sizeof(int64_t)));
    for (int64_t& x : v) x = i64();
    return v;
  }
  template <class T>
  std::vector<T> list() {
    const size_t n = length(1);
    std::vector<T> items;
    for (size_t i = 0; i < n; ++i) items.push_back(T::decode(*this));
    return items;
  }
  // Every byte was read.
  bool done() const { return pos_ == bytes_.size(); }

 private:
  // A count read from the record, checked against the bytes left (each
  // element takes at least `min_bytes`).
  size_t length(size_t min_bytes) {
    const int64_t n = i64();
    if (n < 0 || size_t(n) > (bytes_.size() - pos_) / min_bytes)
      SPMD_THROW(CommError, "RecordReader: a length of ", n, " with only ", bytes_.size() - pos_,
                 " bytes left: the record is corrupt");
    return size_t(n);
  }
  void get(void* p, size_t n) {
    if (n > bytes_.size() - pos_)
      SPMD_THROW(CommError, "RecordReader: read ", n, " bytes at offset ", pos_, " of a ",
                 bytes_.size(), "-byte record: the record is corrupt");
    std::memcpy(p, bytes_.data() + pos_, n);
    pos_ += n;
  }
  const std::vector<uint8_t>& bytes_;
  size_t pos_ = 0;
};

// Every rank's bytes, in rank order, on every rank (any sizes, 0 included).
// Collective over `group`.
std::vector<std::vector<uint8_t>> all_gather_bytes(ProcessGroup& group,
                                                   const std::vector<uint8_t>& mine);

// Every rank's record, in rank order, on every rank. T has
// `void encode(RecordWriter&) const` and `static T decode(RecordReader&)`.
// Collective over `group`; throws CommError if a rank's bytes do not decode
// to exactly one T.
template <class T>
std::vector<T> all_gather_object(ProcessGroup& group, const T& mine) {
  RecordWriter w;
  mine.encode(w);
  std::vector<T> all;
  int r = 0;
  for (const std::vector<uint8_t>& bytes : all_gather_bytes(group, w.bytes())) {
    RecordReader reader(bytes);
    all.push_back(T::decode(reader));
    if (!reader.done())
      SPMD_THROW(CommError, "all_gather_object: rank ", r, "'s record has ", bytes.size(),
                 " bytes, more than its decode() read");
    ++r;
  }
  return all;
}

}  // namespace spmd::dist
