// Loading a sharded checkpoint (parallel/checkpoint/checkpoint.h): for each
// tensor, each box this rank holds is intersected with every saved block,
// and the common parts copied across through narrow views. Each shard file's
// header is read once; of a block only the rows a piece needs are read,
// with the rest of the checksum chunks they lie in, and checked against the
// index's checksums.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "autograd/grad_mode.h"
#include "parallel/checkpoint/checkpoint.h"
#include "parallel/checkpoint/index.h"
#include "parallel/placement.h"
#include "runtime/durable_file.h"
#include "tensor/ops.h"
#include "tensor/safetensors.h"

namespace spmd::dist {

namespace fs = std::filesystem;

namespace {

// Rows [begin, end) (of dim 0) of block `b` of tensor `name`, stored as
// `entry` in the shard file at `path`: the checksum chunks the rows lie in
// are read whole (at most two chunks more than the rows) and checked against
// b's checksums; a mismatch names the file, the bytes, the block and the
// tensor.
Tensor read_checked_rows(const std::string& path, const std::string& name, const SavedBlock& b,
                         const SafetensorsEntry& entry, int64_t begin, int64_t end) {
  const int64_t rows = entry.shape.ndim() == 0 ? 1 : entry.shape[0];
  SPMD_CHECK(0 <= begin && begin <= end && end <= rows, "read_checked_rows: rows [", begin, ", ",
             end, ") of '", b.key, "' in ", path, ", which has ", rows);
  const uint64_t total = uint64_t(entry.shape.numel()) * element_size(entry.dtype);
  const uint64_t row_bytes = rows > 0 ? total / uint64_t(rows) : 0;
  const uint64_t lo = uint64_t(begin) * row_bytes, hi = uint64_t(end) * row_bytes;
  Shape shape = entry.shape;
  if (shape.ndim() > 0) shape[0] = end - begin;
  Tensor t = ops::empty(shape, {entry.dtype, Device::cpu()});
  if (hi == lo) return t;
  const uint64_t first = lo / kChecksumChunk, last = (hi - 1) / kChecksumChunk;
  const uint64_t from = first * kChecksumChunk, to = std::min(total, (last + 1) * kChecksumChunk);
  std::vector<char> bytes(to - from);
  std::ifstream in(path, std::ios::binary);
  in.seekg(std::streamoff(entry.offset + from));
  in.read(bytes.data(), std::streamsize(bytes.size()));
  SPMD_CHECK(in.good(), "load_sharded: cannot read bytes ", from, "-", to, " of '", b.key, "' in ",
             path, " (the file is shorter than its header says)");
  for (uint64_t c = first; c <= last; ++c) {
    const uint64_t at = c * kChecksumChunk - from,
                   n = std::min(kChecksumChunk, total - c * kChecksumChunk);
    const uint32_t found = crc32c(0, bytes.data() + at, n);
    SPMD_CHECK(c < b.crc32c.size() && found == b.crc32c[c], "load_sharded: ", path, ": the bytes ",
               c * kChecksumChunk, "-", c * kChecksumChunk + n, " of '", b.key,
               "' (a block of tensor '", name, "') do not match the index's checksum (crc32c ",
               hex32(found), ", written ", hex32(c < b.crc32c.size() ? b.crc32c[c] : 0),
               "): the file was damaged or changed after it was written");
  }
  std::memcpy(t.raw_data(), bytes.data() + (lo - from), hi - lo);
  return t;
}

// The shard files of one checkpoint: each file's header read once, when a
// block first needs it, and of a block only the rows a piece needs, so a
// rank holds its own slices and not the files (a model saved whole,
// resumed over 8 ranks, is not read whole by each).
class ShardFiles {
 public:
  explicit ShardFiles(std::string dir) : dir_(std::move(dir)) {}

  // Rows [begin, end) (of dim 0) of block `b` of tensor `name`, checked
  // against the index: its shape and dtype, and the checksums of the chunks
  // the rows lie in (read whole for that, at most two chunks more than the
  // rows).
  Tensor rows(const std::string& name, const SavedTensor& saved, const SavedBlock& b, int64_t begin,
              int64_t end) {
    const std::string path = (fs::path(dir_) / b.file).string();
    auto file = files_.find(b.file);
    if (file == files_.end()) {
      SPMD_CHECK(fs::exists(path), "load_sharded: '", name, "' needs ", b.file,
                 ", which is missing from ", dir_);
      file = files_.emplace(b.file, read_safetensors_index(path)).first;
    }
    const auto it = file->second.entries.find(b.key);
    SPMD_CHECK(it != file->second.entries.end(), "load_sharded: ", path, " holds no tensor '",
               b.key, "' (a block of '", name, "')");
    SPMD_CHECK(it->second.shape == b.box.size && it->second.dtype == saved.dtype,
               "load_sharded: ", path, ": '", b.key, "' is ", it->second.shape, " ",
               dtype_name(it->second.dtype), " but the index says ", b.box.size, " ",
               dtype_name(saved.dtype));
    return read_checked_rows(path, name, b, it->second, begin, end);
  }

 private:
  std::string dir_;
  std::map<std::string, SafetensorsIndex> files_;  // by file name
};

// Fills each of t's blocks from the saved blocks that overlap it.
void load_tensor(const std::string& name, const Tensor& t, const SavedTensor& saved,
                 ShardFiles& files, const std::string& dir) {
  const LayoutMeta* layout = placements_of(t);
  if (layout != nullptr) check_not_partial(name, *layout, "load_sharded: ");
  const Shape whole = layout ? whole_shape(*layout) : t.shape();
  SPMD_CHECK(whole == saved.shape, "load_sharded: '", name, "' is ", whole, " here but ",
             saved.shape, " in the checkpoint at ", dir);
  SPMD_CHECK(t.dtype() == saved.dtype, "load_sharded: '", name, "' is ", dtype_name(t.dtype()),
             " here but ", dtype_name(saved.dtype), " in the checkpoint at ", dir);
  for (const Block& mine : local_blocks(t)) {
    const Box wanted{mine.global_offset, mine.size};
    int64_t filled = 0;
    for (const SavedBlock& b : saved.blocks) {
      const std::optional<Box> common = intersection(wanted, b.box);
      if (!common) continue;
      std::vector<int64_t> in_mine(whole.ndim()), in_saved(whole.ndim());
      for (int d = 0; d < whole.ndim(); ++d) {
        in_mine[d] = mine.local_offset[d] + common->offset[d] - mine.global_offset[d];
        in_saved[d] = common->offset[d] - b.box.offset[d];
      }
      // The rows of the saved block that overlap, read alone.
      const int64_t row = whole.ndim() > 0 ? in_saved[0] : 0;
      const int64_t rows = whole.ndim() > 0 ? common->size[0] : 1;
      const Tensor src = files.rows(name, saved, b, row, row + rows);
      if (whole.ndim() > 0) in_saved[0] = 0;
      ops::copy_(box_view(t, Shape(in_mine), common->size),
                 box_view(src, Shape(in_saved), common->size));
      filled += common->size.numel();
    }
    // The saved blocks do not overlap (read_checkpoint_index checked), so
    // the count is exactly how much of the box they cover.
    SPMD_CHECK(filled == wanted.size.numel(), "load_sharded: no saved block covers part of '", name,
               "' in ", box_str(wanted), " (", wanted.size.numel() - filled, " of ",
               wanted.size.numel(), " elements) in the checkpoint at ", dir);
  }
}

}  // namespace

void load_sharded(const TensorMap& state, const std::string& dir) {
  const CheckpointIndex index = read_checkpoint_index(dir);
  ShardFiles files(dir);
  NoGradGuard no_grad;  // parameters are filled in place
  for (const auto& [name, t] : state) {
    SPMD_CHECK(t.defined(), "load_sharded: '", name, "' is an undefined tensor");
    const auto saved = index.tensors.find(name);
    if (saved == index.tensors.end()) {
      std::string some;  // a few of the names it has, to show how they are spelled
      for (auto it = index.tensors.begin(); it != index.tensors.end() && some.size() < 120; ++it)
        some += str_cat(some.empty() ? "" : ", ", "'", it->first, "'");
      SPMD_THROW(InvalidArgument, "load_sharded: '", name, "' is not in the checkpoint at ", dir,
                 " (it holds ", index.tensors.size(), " tensors: ", some,
                 index.tensors.size() > 3 ? ", ...)" : ")");
    }
    load_tensor(name, t, saved->second, files, dir);
  }
}

}  // namespace spmd::dist
