// Saving and loading named tensors in the safetensors format
// (https://github.com/huggingface/safetensors):
//
//   8 bytes   little-endian u64 N, the length of the header
//   N bytes   JSON: {"name": {"dtype": "F32", "shape": [2, 3],
//                             "data_offsets": [begin, end]}, ...,
//                    "__metadata__": {"key": "value"}}   (padded with spaces)
//   the rest  each tensor's raw little-endian bytes, row-major, at
//             [begin, end) relative to the end of the header
//
// Readable by Python's `safetensors` package, or by numpy in a dozen lines.
#pragma once

#include <map>
#include <string>

#include "tensor/tensor.h"

namespace spmd {

using TensorMap = std::map<std::string, Tensor>;

// Writes the tensors (copied to the host, made contiguous) to `path`.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  TensorMap tensors;  // CPU tensors
  std::map<std::string, std::string> metadata;
};
// Reads a file; throws naming the file and what is malformed.
SafetensorsFile load_safetensors(const std::string& path);

// A file's header alone: each tensor's dtype, shape and where its bytes
// lie, so that a reader takes only what it needs (a rank resuming its
// shards from a checkpoint another layout wrote reads its rows, not the
// files whole).
struct SafetensorsEntry {
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t offset = 0;  // of its first byte, from the start of the file
};
struct SafetensorsIndex {
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};
// Reads and checks the header (every entry within the file); throws naming
// the file and what is malformed.
SafetensorsIndex read_safetensors_index(const std::string& path);
// Rows [begin, end) of dim 0 of a tensor of `path` (all of a 0-d one),
// read alone, as a CPU tensor. REQUIRES: entry from read_safetensors_index(path).
Tensor read_safetensors_rows(const std::string& path, const SafetensorsEntry& entry, int64_t begin,
                             int64_t end);

}  // namespace spmd
