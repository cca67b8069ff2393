// The trained model, whole, in one process: what generation and export read.
#pragma once

#include <memory>
#include <string>

#include "autograd/nn/transformer.h"
#include "train/config.h"

namespace spmd::train {

struct TrainedModel {
  std::shared_ptr<nn::Transformer> model;  // on the CPU
  int64_t step = 0;                        // the checkpoint's (-1 for a model file)
  std::string source;                      // what it was read from, for messages
};

// The model the config names, with the weights of:
//   model_file a file: a safetensors file of spmd's names (spmd-train
//     export's), every tensor of the model required, with its shape;
//   model_file a folder: Hugging Face's GPT-2 layout (export --format hf,
//     or GPT-2's own weights: train/hf_gpt2.h), checked against the config;
//   else the latest checkpoint of checkpoint.folder, saved under any layout.
// Throws naming the file or folder, and the parameter, when a tensor is
// missing or has another shape (a checkpoint of another model), and when the
// folder holds no checkpoint; and OutOfMemoryError, before building anything,
// when the whole model (with AdamW's state, from a checkpoint) does not fit
// the memory available (runtime/resource_limits.h).
TrainedModel load_trained_model(const TrainConfig& config, const std::string& model_file = "");

}  // namespace spmd::train
