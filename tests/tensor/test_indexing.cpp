// Indexing, joining and splitting against naive loops; out-of-range indices
// and mismatched shapes throw errors naming the op and the values.
#include "reference.h"

using namespace spmd;
using namespace spmd::test;

TEST_CASE("index_select and index_add_ along every dim", "[indexing]") {
  std::mt19937 rng(40);
  const Shape shape{4, 5, 6};
  const std::vector<int64_t> idx = {2, 0, 2, 3};  // repeated on purpose
  for (int dim = 0; dim < 3; ++dim)
    for (Layout layout : {Layout::kContiguous, Layout::kTransposed, Layout::kStrided}) {
      const Tensor x = random_tensor(rng, shape, DType::kF32, layout);
      const Tensor index = ops::from_vector(idx, {4});
      const Ref rx(x);
      Shape out_shape = shape;
      out_shape[dim] = 4;
      Ref want(out_shape);
      for (int64_t i = 0; i < want.numel(); ++i) {
        auto at = unravel(out_shape, i);
        at[size_t(dim)] = idx[size_t(at[size_t(dim)])];
        want.v[size_t(i)] = rx.at(at);
      }
      check_close(ops::index_select(x, dim, index), want, 0, 0,
                  str_cat("index_select dim ", dim, " ", layout_name(layout)));
      // index_add_: out.index_select(dim, idx) += src, repeats accumulating.
      Tensor out = ops::zeros(shape);
      const Tensor src = random_tensor(rng, out_shape, DType::kF32, layout);
      const Ref rs(src);
      Ref want_add(shape);
      for (int64_t i = 0; i < rs.numel(); ++i) {
        auto at = unravel(out_shape, i);
        at[size_t(dim)] = idx[size_t(at[size_t(dim)])];
        want_add.v[size_t(want_add.flat(at))] += rs.v[size_t(i)];
      }
      ops::index_add_(out, dim, index, src);
      check_close(out, want_add, 1e-6, 1e-6, str_cat("index_add_ dim ", dim));
    }
  // A large index_add_: threads split the columns and never race on repeats.
  Tensor big = ops::zeros({3, 100000});
  ops::index_add_(big, 0, ops::from_vector<int32_t>({1, 1, 1}, {3}), ops::ones({3, 100000}));
  CHECK(ops::sum(big).item<double>() == 300000);
  CHECK(ops::to_vector<float>(ops::select(big, 1, 99999)) == std::vector<float>{0, 3, 0});
}

TEST_CASE("gather and scatter_add follow the index along dim", "[indexing]") {
  std::mt19937 rng(41);
  for (int dim = 0; dim < 2; ++dim) {
    const Tensor x = random_tensor(rng, {5, 6}, DType::kF64, Layout::kTransposed);
    // index smaller than x in the other dim, values in range along dim.
    const Tensor index = ops::randint(0, dim == 0 ? 5 : 6, {4, 3});
    const Ref rx(x), ri(index);
    Ref want({4, 3});
    for (int64_t i = 0; i < 12; ++i) {
      auto at = unravel({4, 3}, i);
      at[size_t(dim)] = int64_t(ri.v[size_t(i)]);
      want.v[size_t(i)] = rx.at(at);
    }
    check_close(ops::gather(x, dim, index), want, 0, 0, str_cat("gather dim ", dim));
    const Tensor src = random_tensor(rng, {4, 5}, DType::kF64, Layout::kContiguous);
    const Ref rs(src);
    Ref want_scatter(rx);
    for (int64_t i = 0; i < 12; ++i) {
      auto at = unravel({4, 3}, i);
      const double s = rs.at(at);
      at[size_t(dim)] = int64_t(ri.v[size_t(i)]);
      want_scatter.v[size_t(want_scatter.flat(at))] += s;
    }
    check_close(ops::scatter_add(x, dim, index, src), want_scatter, 1e-12, 1e-12,
                str_cat("scatter_add dim ", dim));
  }
}

TEST_CASE("index ops reject bad indices and shapes", "[indexing][errors]") {
  const Tensor x = ops::zeros({3, 4});
  CHECK_THROWS_WITH(ops::index_select(x, 0, ops::from_vector<int64_t>({0, 3}, {2})),
                    Catch::Contains("index_select: index 3 is out of range for a dim of size 3"));
  CHECK_THROWS_WITH(ops::index_select(x, 1, ops::from_vector<int64_t>({-1}, {1})),
                    Catch::Contains("index -1 is out of range"));
  CHECK_THROWS_WITH(ops::index_select(x, 0, ops::zeros({1})),
                    Catch::Contains("index must be i64 or i32, got f32"));
  CHECK_THROWS_WITH(ops::gather(x, 1, ops::zeros({3, 4, 1}, {DType::kI64})),
                    Catch::Contains("must have as many dims"));
  CHECK_THROWS_WITH(ops::gather(x, 1, ops::full({3, 2}, 4, {DType::kI64})),
                    Catch::Contains("gather: index 4 is out of range"));
  Tensor y = ops::zeros({3, 4});
  CHECK_THROWS_WITH(ops::index_add_(y, 0, ops::from_vector<int64_t>({0}, {1}), ops::ones({2, 4})),
                    Catch::Contains("index_add_: src [2, 4] should be [1, 4]"));
  CHECK(ops::to_vector<float>(y) == std::vector<float>(12, 0));  // nothing was written
}

TEST_CASE("cat, stack, split and chunk", "[indexing][join]") {
  const Tensor a = ops::reshape(ops::arange(0, 6, 1, {DType::kF32}), {2, 3});
  const Tensor b = ops::full({2, 1}, -1);
  CHECK(ops::to_vector<float>(ops::cat({a, b}, 1)) == std::vector<float>{0, 1, 2, -1, 3, 4, 5, -1});
  CHECK(ops::to_vector<float>(ops::cat({a, ops::zeros({0, 3}), a}, 0)).size() == 12);
  const Tensor s = ops::stack({a, a}, 1);
  CHECK(s.shape() == Shape{2, 2, 3});
  CHECK(ops::to_vector<float>(s) == std::vector<float>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  const std::vector<Tensor> parts = ops::split(ops::arange(int64_t(7)), 3);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].numel() == 1);
  CHECK(parts[1].storage() == parts[0].storage());  // views
  CHECK(ops::split(a, std::vector<int64_t>{1, 2}, 1)[1].shape() == Shape{2, 2});
  CHECK(ops::chunk(ops::arange(int64_t(10)), 4).size() == 4);  // 3, 3, 3, 1
  CHECK(ops::chunk(ops::arange(int64_t(2)), 4).size() == 2);   // fewer when small
  CHECK_THROWS_WITH(ops::cat({a, ops::zeros({2, 2}, {DType::kF64})}, 0),
                    Catch::Contains("cat: tensor 1 is f64"));
  CHECK_THROWS_WITH(
      ops::cat({a, ops::zeros({3, 2})}, 0),
      Catch::Contains("cat: tensor 1 of shape [3, 2] does not match tensor 0 [2, 3]"));
  CHECK_THROWS_WITH(ops::split(a, std::vector<int64_t>{1, 1}, 1),
                    Catch::Contains("sizes sum to 2"));
  CHECK_THROWS_WITH(ops::stack({a, b}), Catch::Contains("stack: tensor 1 has shape [2, 1]"));
}
