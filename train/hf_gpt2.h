// Hugging Face's GPT-2 layout, out and in: the folder that
// transformers' GPT2LMHeadModel.from_pretrained reads, and writes with
// save_pretrained.
//
//   <dir>/model.safetensors   the weights under GPT2LMHeadModel's names
//   <dir>/config.json         model_type "gpt2", n_embd, n_layer, n_head, ...
//
// The two models compute the same function with different names and, for
// the four matrices of a block, another orientation: GPT-2's Conv1D keeps
// its weight as [in, out] (y = x W + b), a Linear as [out, in]
// (y = x W^T + b), so those are written transposed and read back
// transposed:
//
//   tok_embeddings.weight            transformer.wte.weight
//   pos_embeddings.weight            transformer.wpe.weight
//   layers.{i}.attn_norm.{weight,bias}   transformer.h.{i}.ln_1.{weight,bias}
//   layers.{i}.attn.wqkv.weight      transformer.h.{i}.attn.c_attn.weight   transposed
//   layers.{i}.attn.wqkv.bias        transformer.h.{i}.attn.c_attn.bias
//   layers.{i}.attn.wo.weight        transformer.h.{i}.attn.c_proj.weight   transposed
//   layers.{i}.ffn_norm.{weight,bias}    transformer.h.{i}.ln_2.{weight,bias}
//   layers.{i}.mlp.w1.weight         transformer.h.{i}.mlp.c_fc.weight      transposed
//   layers.{i}.mlp.w2.weight         transformer.h.{i}.mlp.c_proj.weight    transposed
//   norm.{weight,bias}               transformer.ln_f.{weight,bias}
//   output.weight (untied only)      lm_head.weight (a Linear: not transposed)
//
// (the biases of wo, w1, w2 map as their weights do). The fused qkv needs
// no reordering: both put q, k and v one after another along the output
// features, each head's D features together. A tied head is not written:
// GPT2LMHeadModel ties lm_head to wte itself, as save_pretrained leaves it
// out; an untied one is written as lm_head.weight with
// "tie_word_embeddings": false.
//
// Only the GPT-2 shape maps: LayerNorm, GELU with the tanh approximation
// (transformers' "gelu_new"), learned positions, fused qkv with biases, one
// key/value head per head, no experts.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/nn/transformer.h"
#include "tensor/tensor.h"
#include "train/config.h"

namespace spmd::train {

// The name a parameter of the spmd model has in GPT2LMHeadModel, and
// whether its values are stored transposed there (Conv1D's [in, out]).
struct HfName {
  std::string name;
  bool transposed = false;
};
// Throws InvalidArgument for a name the GPT-2 model has no counterpart of.
HfName hf_gpt2_name(const std::string& spmd_name);

// Refuses (InvalidArgument naming the key and its value) a model config
// that is not GPT-2's shape; `what` starts the message ("export --format hf").
void check_gpt2_shape(const ModelConfig& m, const std::string& what);

// Writes `model` (whole, on any device) to the folder `dir` (made when
// missing) as model.safetensors and config.json, each synced and checked,
// then the folder. REQUIRES: check_gpt2_shape passed for the model's config.
void save_hf_gpt2(const nn::Transformer& model, const ModelConfig& m, const std::string& dir);

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Fills `params` (this rank's tensors, under the model's names: the whole
// model's, one stage's, or pieces with placements) in place from the folder
// `dir`, each piece reading only its own box of the file, converted to the
// piece's dtype (an f16 or bf16 file loads into f32 parameters). Checked
// first, against the model config and `whole_model` (every parameter of the
// whole model, its whole shape: the model built on the meta device):
// config.json's n_embd, n_layer, n_head, vocab_size, n_positions (the key,
// the file's and the config's values), its activation, epsilon and tying;
// then the file's tensors: a missing one, one of another shape (the name,
// the shape expected and the one found) and one the model has no place for
// are named, all in one InvalidArgument. The causal-mask buffers older
// transformers versions saved (h.{i}.attn.bias, h.{i}.attn.masked_bias) are
// skipped, and the original release's names without "transformer." are read
// as well. No communication.
void load_hf_gpt2(const std::string& dir, const ModelConfig& m, const NamedTensors& whole_model,
                  const NamedTensors& params);

// The folder of a `model.init_from` value "hf:PATH"; throws for any other form.
std::string hf_init_folder(const std::string& init_from);

}  // namespace spmd::train
