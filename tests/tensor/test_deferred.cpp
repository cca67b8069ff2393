// The meta device and layout-invariant draws (tensor/deferred.h): ops on
// meta tensors give meta tensors of the right shapes and touch no bytes; a
// meta storage materialized is a real one under every view; and any box of
// a parameter, drawn alone, holds the whole draw's bits there.
#include "reference.h"
#include "tensor/deferred.h"
#include "tensor/meta_memory.h"

using namespace spmd;
using namespace spmd::test;

TEST_CASE("ops on meta tensors give meta tensors of the right shapes, with no bytes", "[meta]") {
  Tensor a, b;
  {
    DefaultDeviceGuard meta(Device::meta());
    a = ops::randn({8, 6});
    b = ops::zeros({6, 4});
    CHECK(ops::empty({2}).device() == Device::meta());
  }
  CHECK(ops::empty({2}).device() == Device::cpu());  // the guard is gone
  CHECK(a.device().is_meta());
  // Its block is a counted token (tensor/meta_memory.h), no memory: reading
  // it throws below.
  CHECK(meta_block_id(*a.storage()) != 0);
  const Tensor c = ops::matmul(a, b);
  CHECK(c.shape() == Shape{8, 4});
  CHECK(c.device().is_meta());
  const Tensor piece = ops::clone(ops::narrow(a, 1, 2, 3));
  CHECK(piece.shape() == Shape{8, 3});
  CHECK(ops::cat({a, a}, 0).shape() == Shape{16, 6});
  CHECK_THROWS_WITH(a.data<float>(), Catch::Contains("meta device"));
  CHECK_THROWS_WITH(ops::to_vector<float>(a), Catch::Contains("materialized"));
  CHECK_THROWS_WITH(ops::to(a, Device::cpu()), Catch::Contains("cannot copy a meta tensor"));
  ops::copy_(a, ops::ones({8, 6}));  // into meta: nothing to write
  CHECK(Device::parse("meta") == Device::meta());
  CHECK(Device::meta().str() == "meta");
}

TEST_CASE("materialize_ gives a meta storage bytes under every view of it", "[meta]") {
  Tensor whole;
  {
    DefaultDeviceGuard meta(Device::meta());
    whole = ops::empty({4, 5});
  }
  const Tensor row = ops::narrow(whole, 0, 1, 1);
  ops::materialize_(row, Device::cpu());
  CHECK(whole.device() == Device::cpu());
  ops::fill_(whole, 2);
  CHECK(ops::to_vector<float>(row) == std::vector<float>(5, 2.0f));
  ops::materialize_(whole, Device::cpu());  // no longer meta: nothing to do
  CHECK(ops::to_vector<float>(row) == std::vector<float>(5, 2.0f));
}

TEST_CASE("normal_box_ draws any box of a tensor with the whole draw's bits", "[meta][random]") {
  const uint64_t key = ops::init_key(42, "layers.0.attn.wqkv.weight");
  const std::vector<std::pair<Shape, std::pair<Shape, Shape>>> cases = {
      // whole, {offset, size}
      {{37}, {{5}, {23}}},                   // starts mid-counter, ends mid-counter
      {{37}, {{0}, {37}}},                   // the whole of it
      {{10, 12}, {{3, 0}, {4, 12}}},         // rows: FSDP's chunk, one run
      {{10, 12}, {{0, 5}, {10, 6}}},         // columns: a row-parallel slice, a run per row
      {{6, 7, 9}, {{1, 2, 3}, {4, 5, 6}}},   // a box inside every dim
      {{6, 7, 9}, {{2, 0, 0}, {0, 7, 9}}}};  // empty
  for (const auto& [whole, box] : cases) {
    const auto& [offset, size] = box;
    Generator gen(key);
    const Tensor all = ops::normal(whole, 0.5, 0.02, {}, &gen);
    Tensor want = all;
    for (int d = 0; d < whole.ndim(); ++d) want = ops::narrow(want, d, offset[d], size[d]);
    const Tensor got = ops::empty(size);
    ops::normal_box_(got, 0.5, 0.02, key, whole, offset);
    CHECK(ops::to_vector<float>(got) == ops::to_vector<float>(want));
    // Into a strided view too (a column block of a larger piece).
    if (whole.ndim() == 2 && size[0] > 0) {
      const Tensor wide = ops::zeros({size[0], size[1] + 3});
      ops::normal_box_(ops::narrow(wide, 1, 3, size[1]), 0.5, 0.02, key, whole, offset);
      CHECK(ops::to_vector<float>(ops::narrow(wide, 1, 3, size[1])) == ops::to_vector<float>(want));
    }
  }
  const Tensor out = ops::empty({3, 3});
  CHECK_THROWS_WITH(ops::normal_box_(out, 0, 1, key, {4, 4}, {2, 0}),
                    Catch::Contains("does not lie within"));
}

TEST_CASE("init_key gives each name and seed a stream of its own", "[meta][random]") {
  CHECK(ops::init_key(0, "a.weight") == ops::init_key(0, "a.weight"));
  CHECK(ops::init_key(0, "a.weight") != ops::init_key(0, "b.weight"));
  CHECK(ops::init_key(0, "a.weight") != ops::init_key(1, "a.weight"));
  CHECK(ops::init_key(0, "ab") != ops::init_key(0, "ba"));
}
