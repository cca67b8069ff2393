// all_gather_bytes and all_gather_object over real processes: every rank
// gets every rank's bytes (sizes 0 and unequal, worlds of 1 to 4) exactly as
// that rank built them, and records come back as their encode() wrote them.
// The expected values are rebuilt on each rank from the rank number alone.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "harness.h"
#include "parallel/comm/object_collectives.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

// Rank r's bytes: r * stride of them (rank 0 has none), byte i = (7r + i) % 251.
std::vector<uint8_t> bytes_of(int r, int stride) {
  std::vector<uint8_t> b(size_t(r * stride));
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t((7 * r + int(i)) % 251);
  return b;
}

struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  uint8_t kind = 0;
  void encode(RecordWriter& w) const {
    w.str(name);
    w.i64s(shape);
    w.u8(kind);
  }
  static Entry decode(RecordReader& r) {
    Entry e;
    e.name = r.str();
    e.shape = r.i64s();
    e.kind = r.u8();
    return e;
  }
  bool operator==(const Entry&) const = default;
};

struct Model {
  std::vector<Entry> entries;
  void encode(RecordWriter& w) const { w.list(entries); }
  static Model decode(RecordReader& r) { return {r.list<Entry>()}; }
};

// Rank r's record: r + 1 entries, names and shapes growing with r.
Model model_of(int r) {
  Model m;
  for (int i = 0; i <= r; ++i)
    m.entries.push_back({std::string(size_t(i + r), char('a' + i)),
                         std::vector<int64_t>(size_t(i), r), uint8_t(i)});
  return m;
}

}  // namespace

TEST_CASE("all_gather_bytes: unequal sizes, rank 0 empty, worlds 1 to 4", "[comm][object]") {
  for (int world = 1; world <= 4; ++world) {
    INFO("world " << world);
    REQUIRE_NOTHROW(run_world(world, [](ProcessGroup& g) {
      for (int stride : {0, 1, 13, 4099}) {  // 0: every rank empty (no second collective)
        const auto all = all_gather_bytes(g, bytes_of(g.rank(), stride));
        expect(int(all.size()) == g.size(), "got ", all.size(), " ranks' bytes");
        for (int r = 0; r < g.size(); ++r)
          expect(all[size_t(r)] == bytes_of(r, stride), "stride ", stride, ": rank ", r,
                 "'s bytes differ (", all[size_t(r)].size(), " bytes)");
      }
    }));
  }
}

TEST_CASE("all_gather_object: nested records come back as encoded", "[comm][object]") {
  REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
    const std::vector<Model> all = all_gather_object(g, model_of(g.rank()));
    for (int r = 0; r < g.size(); ++r)
      expect(all[size_t(r)].entries == model_of(r).entries, "rank ", r, "'s record differs");
  }));
}

TEST_CASE("RecordReader: truncated or overlong records are errors", "[comm][object]") {
  RecordWriter w;
  model_of(2).encode(w);
  std::vector<uint8_t> cut(w.bytes().begin(), w.bytes().end() - 1);
  RecordReader short_reader(cut);
  CHECK_THROWS_AS(Model::decode(short_reader), CommError);
  RecordWriter huge;
  huge.i64(int64_t(1) << 40);  // a list length no record of 8 bytes can hold
  RecordReader huge_reader(huge.bytes());
  CHECK_THROWS_WITH(Model::decode(huge_reader), Catch::Contains("the record is corrupt"));
  std::vector<uint8_t> longer = w.bytes();
  longer.push_back(0);
  RecordReader long_reader(longer);
  Model::decode(long_reader);
  CHECK_FALSE(long_reader.done());
}
