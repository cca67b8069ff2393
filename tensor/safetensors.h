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

}  // namespace spmd
