// The sharded checkpoint: saved under one layout and world size, loaded under
// another, the values that come back are the original whole tensor's,
// exactly. Every rank makes the whole tensor from arange (each element its
// own index, so a misplaced block shows) and cuts its piece by hand with
// narrow(), the offsets worked out in the comments; the checkpoint's own
// block arithmetic is then checked against those. Each case saves into a
// fresh temporary folder.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/checkpoint/checkpoint.h"
#include "parallel/checkpoint/index.h"
#include "parallel/device_mesh.h"
#include "parallel/placement.h"
#include "tensor/ops.h"
#include "tensor/safetensors.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;
namespace fs = std::filesystem;

namespace {

// A fresh folder for one case; the checkpoint goes to <path>/ckpt.
struct TempDir {
  TempDir() {
    char name[] = "/tmp/spmd_test_checkpoint_XXXXXX";
    path = ::mkdtemp(name);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string ckpt() const { return path + "/ckpt"; }
  std::string path;
};

// 0, 1, 2, ... in row-major order.
Tensor iota(const Shape& shape, DType dtype = DType::kF32) {
  return ops::reshape(ops::arange(0, double(shape.numel()), 1, {dtype}), shape);
}

// A copy of rows [start, start + length) of t (dim 0), or of columns (dim 1).
Tensor cut(const Tensor& t, int dim, int64_t start, int64_t length) {
  return ops::clone(ops::narrow(t, dim, start, length));
}

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  expect(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs ", want.shape());
  const std::vector<double> a = ops::to_vector<double>(ops::contiguous(got));
  const std::vector<double> b = ops::to_vector<double>(ops::contiguous(want));
  for (size_t i = 0; i < a.size(); ++i)
    expect(a[i] == b[i], what, ": element ", i, " is ", a[i], ", want ", b[i]);
}

// w (6 rows) saved as "w" at dir by 3 ranks, Shard(0): 2 rows each.
void save_rows_on_three(const Tensor& w, const std::string& dir) {
  run_world(3, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {3}, {"dp"});
    const Tensor piece = cut(w, 0, 2 * world.rank(), 2);
    set_placements(piece, mesh, {Placement::shard(0)}, w.shape());
    save_sharded({{"w", piece}}, dir, world);
  });
}

bool has_file(const std::string& dir, const std::string& name) {
  return fs::exists(fs::path(dir) / name);
}

}  // namespace

TEST_CASE("uneven Shard(0) saved on 4 ranks loads on 2 ranks and whole in one process",
          "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.ckpt();
  const Tensor w = iota({10, 3}), v = iota({5, 2}, DType::kI64), bias = iota({4});
  run_world(4, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {4}, {"dp"});
    const int r = world.rank();
    // torch.chunk's cut: 10 rows in chunks of 3 are 3, 3, 3, 1; 5 rows in
    // chunks of 2 are 2, 2, 1, 0 (rank 3 holds nothing of v).
    const int64_t w_rows[4] = {3, 3, 3, 1}, v_rows[4] = {2, 2, 1, 0};
    const Tensor w_piece = cut(w, 0, 3 * r, w_rows[r]);
    const Tensor v_piece = cut(v, 0, std::min(2 * r, 5), v_rows[r]);
    set_placements(w_piece, mesh, {Placement::shard(0)}, w.shape());
    set_placements(v_piece, mesh, {Placement::shard(0)}, v.shape());
    // bias has no placements: replicated, rank 0 writes it.
    save_sharded({{"w", w_piece}, {"v", v_piece}, {"bias", ops::clone(bias)}}, dir, world);
  });
  for (int r = 0; r < 4; ++r) CHECK(has_file(dir, str_cat("shard_rank", r, ".safetensors")));
  CHECK_FALSE(fs::exists(dir + ".tmp"));
  const CheckpointIndex index = read_checkpoint_index(dir);
  CHECK(index.world_size == 4);
  CHECK(index.tensors.at("w").blocks.size() == 4);
  CHECK(index.tensors.at("v").blocks.size() == 3);  // rank 3's piece of v is empty
  CHECK(index.tensors.at("bias").blocks.size() == 1);
  CHECK(index.tensors.at("v").dtype == DType::kI64);

  run_world(2, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"dp"});
    const int r = world.rank();
    // Over 2 ranks: w's rows 0-4 and 5-9; v's rows 0-2 and 3-4.
    Tensor w_piece = ops::zeros({5, 3}), v_piece = ops::zeros({r == 0 ? 3 : 2, 2}, {DType::kI64});
    Tensor b = ops::zeros({4});
    set_placements(w_piece, mesh, {Placement::shard(0)}, w.shape());
    set_placements(v_piece, mesh, {Placement::shard(0)}, v.shape());
    load_sharded({{"w", w_piece}, {"v", v_piece}, {"bias", b}}, dir);
    expect_equal(w_piece, cut(w, 0, 5 * r, 5), str_cat("w on rank ", r, " of 2"));
    expect_equal(v_piece, cut(v, 0, 3 * r, r == 0 ? 3 : 2), str_cat("v on rank ", r, " of 2"));
    expect_equal(b, bias, "bias");
  });

  Tensor whole_w = ops::zeros({10, 3}), whole_v = ops::zeros({5, 2}, {DType::kI64});
  load_sharded({{"w", whole_w}, {"v", whole_v}}, dir);
  expect_equal(whole_w, w, "w whole");
  expect_equal(whole_v, v, "v whole");
}

TEST_CASE("Shard(1) on tp of a 2x2 mesh, written once per dp replica, loads as Shard(0) over 2",
          "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.ckpt();
  const Tensor w = iota({4, 6});
  run_world(4, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2, 2}, {"dp", "tp"});
    // Rank (dp, tp) holds columns 3 tp .. 3 tp + 2, whatever its dp.
    const Tensor piece = cut(w, 1, 3 * mesh.coordinate("tp"), 3);
    set_placements(piece, mesh, {Placement::replicate(), Placement::shard(1)}, w.shape());
    save_sharded({{"w", piece}}, dir, world);
  });
  // Only dp = 0 (ranks 0 and 1) writes: ranks 2 and 3 hold the same columns.
  CHECK(has_file(dir, "shard_rank0.safetensors"));
  CHECK(has_file(dir, "shard_rank1.safetensors"));
  CHECK_FALSE(has_file(dir, "shard_rank2.safetensors"));
  CHECK_FALSE(has_file(dir, "shard_rank3.safetensors"));
  const SavedTensor saved = read_checkpoint_index(dir).tensors.at("w");
  REQUIRE(saved.blocks.size() == 2);
  CHECK(saved.blocks[1].box.offset == Shape{0, 3});
  CHECK(saved.blocks[1].box.size == Shape{4, 3});
  CHECK(saved.blocks[1].key == "w@0,3");

  run_world(2, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"dp"});
    // Rows 2 r, 2 r + 1: each takes half of both saved column blocks.
    Tensor piece = ops::zeros({2, 6});
    set_placements(piece, mesh, {Placement::shard(0)}, w.shape());
    load_sharded({{"w", piece}}, dir);
    expect_equal(piece, cut(w, 0, 2 * world.rank(), 2), str_cat("rank ", world.rank()));
  });
  Tensor whole = ops::zeros({4, 6});
  load_sharded({{"w", whole}}, dir);
  expect_equal(whole, w, "w whole");
}

TEST_CASE("a fused tensor cut by segments saves its blocks apart and loads as plain rows",
          "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.ckpt();
  const Tensor qkv = iota({8, 2});  // q rows 0-3, k rows 4-5, v rows 6-7
  run_world(2, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"tp"});
    const int64_t r = world.rank();
    // Rank r: q's rows 2r, 2r+1, then k's row 4+r, then v's row 6+r.
    const Tensor piece =
        ops::cat({cut(qkv, 0, 2 * r, 2), cut(qkv, 0, 4 + r, 1), cut(qkv, 0, 6 + r, 1)}, 0);
    set_placements(piece, mesh, {Placement::shard(0, {4, 2, 2})}, qkv.shape());
    save_sharded({{"qkv", piece}}, dir, world);
  });
  CHECK(read_checkpoint_index(dir).tensors.at("qkv").blocks.size() == 6);
  run_world(2, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"tp"});
    const int64_t r = world.rank();
    Tensor rows = ops::zeros({4, 2}), fused = ops::zeros({4, 2});  // rows 4r .. 4r + 3
    set_placements(rows, mesh, {Placement::shard(0)}, qkv.shape());
    set_placements(fused, mesh, {Placement::shard(0, {4, 2, 2})}, qkv.shape());
    load_sharded({{"qkv", rows}}, dir);
    load_sharded({{"qkv", fused}}, dir);
    expect_equal(rows, cut(qkv, 0, 4 * r, 4), str_cat("rows on rank ", r));
    expect_equal(fused,
                 ops::cat({cut(qkv, 0, 2 * r, 2), cut(qkv, 0, 4 + r, 1), cut(qkv, 0, 6 + r, 1)}, 0),
                 str_cat("the fused layout on rank ", r));
  });
  Tensor whole = ops::zeros({8, 2});
  load_sharded({{"qkv", whole}}, dir);
  expect_equal(whole, qkv, "qkv whole");
}

TEST_CASE("a piece of a piece (FSDP's Shard(0) on dp over TP's Shard(0) on tp) roundtrips",
          "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.ckpt();
  const Tensor w = iota({8, 3});
  // Rank (dp, tp): TP's piece is rows 4 tp .. 4 tp + 3; FSDP's piece of that
  // is its rows 2 dp, 2 dp + 1, so whole rows 4 tp + 2 dp and the next.
  auto make_piece = [&](const DeviceMesh& mesh, bool fill) {
    const int64_t dp = mesh.coordinate("dp"), tp = mesh.coordinate("tp");
    const Tensor tp_piece = cut(w, 0, 4 * tp, 4);
    set_placements(tp_piece, mesh, {Placement::replicate(), Placement::shard(0)}, w.shape());
    const Tensor piece = fill ? cut(w, 0, 4 * tp + 2 * dp, 2) : ops::zeros({2, 3});
    set_placements(piece, mesh, {Placement::shard(0), Placement::replicate()}, tp_piece.shape(),
                   tp_piece.layout_meta());
    return piece;
  };
  run_world(4, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2, 2}, {"dp", "tp"});
    save_sharded({{"w", make_piece(mesh, true)}}, dir, world);
  });
  // Each level replicates along the axis the other cuts: all four blocks
  // differ, and every rank writes its own.
  for (int r = 0; r < 4; ++r) CHECK(has_file(dir, str_cat("shard_rank", r, ".safetensors")));
  CHECK(read_checkpoint_index(dir).tensors.at("w").blocks.size() == 4);

  run_world(4, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2, 2}, {"dp", "tp"});
    const Tensor piece = make_piece(mesh, false);
    load_sharded({{"w", piece}}, dir);
    const int64_t dp = mesh.coordinate("dp"), tp = mesh.coordinate("tp");
    expect_equal(piece, cut(w, 0, 4 * tp + 2 * dp, 2), "rank " + mesh.describe());
  });
  Tensor whole = ops::zeros({8, 3});
  load_sharded({{"w", whole}}, dir);
  expect_equal(whole, w, "w whole");
}

TEST_CASE("saving again to the same folder replaces the checkpoint whole", "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.ckpt();
  run_world(2, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"dp"});
    for (double scale : {1.0, 2.0}) {
      const Tensor piece = cut(ops::mul(iota({4, 2}), scale), 0, 2 * world.rank(), 2);
      set_placements(piece, mesh, {Placement::shard(0)}, Shape{4, 2});
      save_sharded({{"w", piece}}, dir, world);
    }
  });
  CHECK_FALSE(fs::exists(dir + ".tmp"));
  CHECK_FALSE(fs::exists(dir + ".old"));
  Tensor whole = ops::zeros({4, 2});
  load_sharded({{"w", whole}}, dir);
  expect_equal(whole, ops::mul(iota({4, 2}), 2.0), "the second save");
}

TEST_CASE("loading names what does not match the checkpoint", "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.ckpt();
  const Tensor w = iota({6, 2});
  save_rows_on_three(w, dir);
  auto load_w = [&](const Tensor& t, const std::string& from) { load_sharded({{"w", t}}, from); };

  CHECK_THROWS_WITH(load_sharded({{"wq", ops::zeros({6, 2})}}, dir),
                    Catch::Contains("'wq' is not in the checkpoint") && Catch::Contains("'w'"));
  CHECK_THROWS_WITH(load_w(ops::zeros({6, 3}), dir),
                    Catch::Contains("'w' is [6, 3] here but [6, 2] in the checkpoint"));
  CHECK_THROWS_WITH(load_w(ops::zeros({6, 2}, {DType::kF64}), dir),
                    Catch::Contains("'w' is f64 here but f32 in the checkpoint"));
  CHECK_THROWS_WITH(load_w(ops::zeros({6, 2}), tmp.path), Catch::Contains("holds no index.json"));

  // Rank 1's file gone: what needs rows 2-3 says so.
  fs::copy(dir, tmp.path + "/no_file");
  fs::remove(tmp.path + "/no_file/shard_rank1.safetensors");
  CHECK_THROWS_WITH(load_w(ops::zeros({6, 2}), tmp.path + "/no_file"),
                    Catch::Contains("'w' needs shard_rank1.safetensors, which is missing"));

  // Rank 2's block dropped from the index: rows 4-5 are in no block.
  fs::copy(dir, tmp.path + "/no_block");
  CheckpointIndex index = read_checkpoint_index(dir);
  index.tensors.at("w").blocks.pop_back();
  write_checkpoint_index(index, tmp.path + "/no_block/index.json");
  CHECK_THROWS_WITH(load_w(ops::zeros({6, 2}), tmp.path + "/no_block"),
                    Catch::Contains("no saved block covers part of 'w'") &&
                        Catch::Contains("(4 of 12 elements)"));
}

TEST_CASE("a save that fails on one rank fails on every rank and leaves no checkpoint",
          "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.ckpt(), mine = tmp.path + "/mine";
  fs::create_directories(mine + "/notes");
  run_world(2, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"dp"});
    auto fails_with = [&](const TensorMap& state, const std::string& to, const std::string& text) {
      try {
        save_sharded(state, to, world);
      } catch (const Error& e) {
        expect(std::string(e.what()).find(text) != std::string::npos, "rank ", world.rank(),
               ": the error '", e.what(), "' does not say '", text, "'");
        return;
      }
      expect(false, "rank ", world.rank(), ": save_sharded did not throw");
    };
    const std::string where = "save_sharded(" + dir + "): ";
    // Only rank 1's state is wrong; rank 0 learns it from rank 1's part.
    TensorMap state{{"w", ops::zeros({2})}};
    if (world.rank() == 1) state["broken"] = Tensor();
    fails_with(state, dir, where + "rank 1: 'broken' is an undefined tensor");
    // A term of a sum is not a value to save.
    const Tensor partial = ops::zeros({3});
    set_placements(partial, mesh, {Placement::partial()}, Shape{3});
    fails_with({{"p", partial}}, dir, where + "rank 0: 'p' is Partial() on axis dp");
    // A folder that is not a checkpoint is never replaced.
    fails_with({{"w", ops::zeros({2})}}, mine, mine + " exists and is not a checkpoint");
  });
  CHECK_FALSE(fs::exists(dir));
  CHECK_FALSE(fs::exists(dir + ".tmp"));
  CHECK(fs::is_directory(mine + "/notes"));
}

TEST_CASE("a flipped byte in a shard is refused naming the file, the block and the tensor",
          "[checkpoint][checksum]") {
  TempDir tmp;
  const std::string dir = tmp.ckpt();
  // Rows of 2 floats, 1M rows a rank: each block is 8 MiB, two checksum
  // chunks of 4 MiB.
  const int64_t rows = 1 << 20;
  const Tensor w = iota({2 * rows, 2}, DType::kF32);
  run_world(2, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"dp"});
    const Tensor piece = cut(w, 0, rows * world.rank(), rows);
    set_placements(piece, mesh, {Placement::shard(0)}, w.shape());
    save_sharded({{"w", piece}}, dir, world);
  });
  const CheckpointIndex index = read_checkpoint_index(dir);
  for (const SavedBlock& b : index.tensors.at("w").blocks)
    CHECK(b.crc32c.size() == 2);  // 8 MiB: two chunks

  // One byte of rank 1's block, in its second chunk (its second half).
  const std::string shard = dir + "/shard_rank1.safetensors";
  const SafetensorsIndex file = read_safetensors_index(shard);
  const uint64_t at =
      file.entries.at("w@" + std::to_string(rows) + ",0").offset + kChecksumChunk + 12345;
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(at));
    char c = 0;
    f.seekg(std::streamoff(at));
    f.read(&c, 1);
    c = char(c ^ 0x10);
    f.seekp(std::streamoff(at));
    f.write(&c, 1);
  }
  // Whole: refused, naming the file, the block, the tensor and the bytes.
  CHECK_THROWS_WITH(
      load_sharded({{"w", ops::zeros({2 * rows, 2})}}, dir),
      Catch::Contains(shard) && Catch::Contains("the bytes 4194304-8388608 of 'w@1048576,0'") &&
          Catch::Contains("a block of tensor 'w'") && Catch::Contains("do not match the index"));
  // Over 4 ranks, each reads a quarter: only the rank whose rows lie in the
  // damaged chunk reads it, and only it fails; the others load their rows.
  run_world(4, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {4}, {"dp"});
    const Tensor piece = ops::zeros({rows / 2, 2});
    set_placements(piece, mesh, {Placement::shard(0)}, w.shape());
    if (world.rank() == 3) {
      bool threw = false;
      try {
        load_sharded({{"w", piece}}, dir);
      } catch (const InvalidArgument& e) {
        threw =
            std::string(e.what()).find("do not match the index's checksum") != std::string::npos;
      }
      expect(threw, "rank 3 read the damaged chunk without a word");
    } else {
      load_sharded({{"w", piece}}, dir);
      expect_equal(piece, cut(w, 0, world.rank() * rows / 2, rows / 2), "rank's quarter");
    }
  });
}

TEST_CASE("an index edited after it was written is refused, naming it", "[checkpoint][checksum]") {
  TempDir tmp;
  const std::string dir = tmp.ckpt();
  const Tensor w = iota({6, 2});
  save_rows_on_three(w, dir);
  std::ifstream in(dir + "/index.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  in.close();
  // Rank 1's and rank 2's blocks swapped: the same sizes, valid JSON, every
  // file and key present; only the checksum tells.
  const std::string one = "\"key\":\"w@2,0\"", two = "\"key\":\"w@4,0\"";
  REQUIRE(text.find(one) != std::string::npos);
  REQUIRE(text.find(two) != std::string::npos);
  text.replace(text.find(one), one.size(), "\"key\":\"TMP\"");
  text.replace(text.find(two), two.size(), one);
  text.replace(text.find("\"key\":\"TMP\""), std::string("\"key\":\"TMP\"").size(), two);
  {
    std::ofstream out(dir + "/index.json", std::ios::trunc);
    out << text;
  }
  CHECK_THROWS_WITH(load_sharded({{"w", ops::zeros({6, 2})}}, dir),
                    Catch::Contains(dir + "/index.json: its tensors do not match its checksum"));
}
