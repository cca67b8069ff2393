// A GPU's peak arithmetic rate, from its datasheet: the tensor cores' dense
// bf16 and TF32 rates and the CUDA cores' f32, found by the name CUDA gives
// the device (cuda::device_name: "NVIDIA H100 80GB HBM3"). These are the
// denominators TorchTitan's MFU uses. NVIDIA's datasheets print tensor-core
// rates with 2:4 structured sparsity, twice the dense ones, marked with an
// asterisk; a training step's products are dense, so the table holds half
// the starred figures. All are at the boost clock: a GPU held at its power
// limit runs below them.
//
// Not here: GPUs spmd has no backend for (AMD, Intel), fp8 and fp16 (the
// same as bf16 on these parts), and a GPU not in the table, for which there
// is no figure (nullopt) and the caller says so.
#pragma once

#include <optional>
#include <string>

namespace spmd::cuda {

struct GpuPeak {
  std::string model;  // the datasheet's name for the part: "H100 SXM"
  double bf16 = 0;    // FLOP/s, tensor cores, dense
  double tf32 = 0;    // FLOP/s, tensor cores, dense (f32 products with allow_tf32)
  double f32 = 0;     // FLOP/s, CUDA cores (f32 products without TF32)
};

// The datasheet peak of the GPU named `device_name`: the table's first row
// whose words (case aside) are all words of the name, split at spaces and
// dashes ("H100 PCIe" matches "NVIDIA H100 PCIe", "A100" matches
// "NVIDIA A100-SXM4-80GB", "A10" matches "NVIDIA A10" but not an A100).
// Returns nullopt when no row matches.
std::optional<GpuPeak> datasheet_peak(const std::string& device_name);

}  // namespace spmd::cuda
