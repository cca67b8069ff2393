// The index of a sharded checkpoint: for every tensor, its whole shape and
// dtype, and the boxes of it that the checkpoint holds, each with the file
// and the key inside that file where its values are. On disk it is
// index.json beside the shard files (docs/checkpoint.md):
//
//   {"format": "spmd-checkpoint/2", "world_size": 4, "tensors_crc32c": "5b1e0c2a",
//    "tensors": {
//     "w": {"dtype": "f32", "shape": [10,3], "blocks": [
//      {"crc32c":["1c291ca3"],"file":"shard_rank0.safetensors","key":"w@0,0","offset":[0,0],"size":[3,3]},
//      ...
//      {"crc32c":["8a9136aa"],"file":"shard_rank3.safetensors","key":"w@9,0","offset":[9,0],"size":[1,3]}]}}}
//
// Checksums (runtime/durable_file.h's crc32c): each block carries one per
// kChecksumChunk bytes of its values, so that a load which reads only some
// rows of a block checks the chunks it reads and no others; the index
// carries one of its own "tensors" object (as nlohmann's dump() writes it:
// no spaces, keys sorted), so that an edit to the index that still parses
// is found too.
//
// save_sharded builds one from every rank's part (merge_index_part) and
// checks it is whole before writing it; load_sharded reads it back. The box
// arithmetic and the checks both need are here too.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace spmd::dist {

// [offset, offset + size) along every dim.
struct Box {
  Shape offset, size;
};
// The common part of two boxes of the same rank; nullopt when it is empty.
std::optional<Box> intersection(const Box& a, const Box& b);
// "offset [8, 0] size [2, 3]", for messages.
std::string box_str(const Box& box);

// One box of a tensor, saved as its own tensor `key` in `file`.
struct SavedBlock {
  std::string file;              // relative to the checkpoint folder: "shard_rank2.safetensors"
  std::string key;               // the name inside that file
  Box box;                       // where it sits in the whole tensor
  std::vector<uint32_t> crc32c;  // of each kChecksumChunk bytes of its values, in order
};

// Bytes of a block's values per checksum.
inline constexpr uint64_t kChecksumChunk = uint64_t(4) << 20;
// The checksums of `n` bytes of values, one per kChecksumChunk (none for 0 bytes).
std::vector<uint32_t> chunk_checksums(const void* data, uint64_t n);
// A checksum as the index writes it: 8 hex digits.
std::string hex32(uint32_t v);

struct SavedTensor {
  DType dtype = DType::kF32;
  Shape shape;  // of the whole tensor
  std::vector<SavedBlock> blocks;
};

struct CheckpointIndex {
  int world_size = 0;  // of the save (informational: any world size loads it)
  std::map<std::string, SavedTensor> tensors;
};

inline constexpr const char* kIndexFile = "index.json";
inline constexpr const char* kIndexFormat = "spmd-checkpoint/2";

// The index as JSON text, and back. from_json throws InvalidArgument naming
// `where` (a path, a rank) and the field that is malformed.
std::string index_to_json(const CheckpointIndex& index);
CheckpointIndex index_from_json(const std::string& text, const std::string& where);

// Reads <dir>/index.json; throws naming the folder when there is none (not a
// checkpoint, or one whose save never finished) and checks every tensor's
// blocks (check_blocks).
CheckpointIndex read_checkpoint_index(const std::string& dir);
// Writes `index` to `path`, synced (runtime/durable_file.h).
void write_checkpoint_index(const CheckpointIndex& index, const std::string& path);

// Adds one rank's part to `index`: a tensor seen before must have the same
// shape and dtype (InvalidArgument naming both ranks' otherwise); a block
// whose box is already listed (the same box saved twice) is dropped.
void merge_index_part(CheckpointIndex& index, const CheckpointIndex& part, int rank);

// Every block of `t` lies inside its shape and no two overlap (so counting
// elements tells how much of a region the blocks cover). Throws
// InvalidArgument naming the tensor and the blocks otherwise.
void check_blocks(const std::string& name, const SavedTensor& t, const std::string& where);
// check_blocks, and the blocks cover the whole tensor.
void check_complete(const CheckpointIndex& index, const std::string& where);

// Throws InvalidArgument (message starting with `prefix`) when a level of
// `layout` holds tensor `name` as Partial(): a checkpoint holds values, not
// terms of a sum.
void check_not_partial(const std::string& name, const LayoutMeta& layout,
                       const std::string& prefix);

}  // namespace spmd::dist
