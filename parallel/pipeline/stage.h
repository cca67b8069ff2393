// Pipeline stages: the Transformer cut between its blocks (16.5, 16.5.1).
//
// A stage is a contiguous run of the model's pieces: the first holds the
// embeddings and the first blocks, a middle one only blocks, the last the
// final blocks, the norm and the head. Stage s computes
//
//   first:  ids (b, T)    -> tok_embeddings (+ pos_embeddings) -> dropout
//                         -> layers[0, k1)                      -> (b, T, C)
//   middle: (b, T, C)     -> layers[k_s, k_s+1)                 -> (b, T, C)
//   last:   (b, T, C)     -> layers[k_p-1, L) -> norm -> output -> (b, T, V)
//
// exactly as Transformer::forward does on the whole, so the stages in a row
// are the model. A stage shares the model's modules (no copy): every rank
// may build the whole model and keep the stage it owns; its parameters keep
// the model's names ("layers.3.attn.wq.weight").
//
// A stage can also be called as an nn::Module (as_module()), whose
// children are the modules it runs, so that module hooks see it whole: FSDP
// shards a stage with it as the root and its blocks as units, as
// TorchTitan's per-stage fully_shard does.
//
// Not here: a head tied to the embedding (GPT-2's) across the first and last
// stage, which would need the two copies' gradients summed every step: such
// a model is refused, naming tie_embeddings.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/nn/transformer.h"

namespace spmd::dist::pp {

class TransformerStage {
 public:
  // Stage `index` of `num_stages` whose blocks are [first_layer, end_layer).
  TransformerStage(std::shared_ptr<nn::Transformer> model, int index, int num_stages,
                   int64_t first_layer, int64_t end_layer);

  // ids (b, T) on the first stage, activations (b, T, C) on the others ->
  // activations (b, T, C), or logits (b, T, V) on the last. Once as_module()
  // has been called, through that module (its hooks run).
  Tensor forward(const Tensor& x);

  // The stage as a module: its children the embeddings and dropout (first
  // stage), its blocks as the model holds them now (an activation-
  // checkpointing wrapper included) under "layers.<i>", the norm and head
  // (last stage); so its named_parameters() are this stage's, with the
  // model's names. Its forward is the stage's. Made on the first call; the
  // same module after it (and for the copies of this stage made after it).
  std::shared_ptr<nn::Module> as_module();

  int index() const { return index_; }
  int num_stages() const { return num_stages_; }
  bool is_first() const { return index_ == 0; }
  bool is_last() const { return index_ == num_stages_ - 1; }
  int64_t first_layer() const { return first_layer_; }
  int64_t end_layer() const { return end_layer_; }
  // The parameters this stage trains, with the model's names.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  const nn::Transformer& model() const { return *model_; }

 private:
  std::shared_ptr<nn::Transformer> model_;
  std::shared_ptr<nn::Module> module_;  // as_module()'s, once made
  int index_, num_stages_;
  int64_t first_layer_, end_layer_;
};

// Where to cut: the index of the first block of each stage after the first,
// from split points ("layers.4", "layers.8") or, when none are given, blocks
// spread as evenly as they go over num_stages (the earlier stages take one
// more when they do not divide). Throws InvalidArgument, naming the values,
// for a split point that names no block, points out of order, or more
// stages than blocks.
std::vector<int64_t> split_layers(int64_t num_layers, int num_stages,
                                  const std::vector<std::string>& split_points = {});

// Stage `index` of `model` cut as split_layers says. Throws InvalidArgument
// for a head tied to the embedding when num_stages > 1.
TransformerStage split_model(std::shared_ptr<nn::Transformer> model, int index, int num_stages,
                             const std::vector<std::string>& split_points = {});

// The default cut of num_layers blocks into num_ranks x stages_per_rank
// stages of an interleaved pipeline (stage s on rank s % p), as split_layers
// gives it: as even as they go, but the num_layers % (num_ranks x
// stages_per_rank) stages that take one more block are the middle ones (of the
// two middle windows, the one that gives rank 0 more of them), not the
// first. Simulated under the interleaved schedule with each stage's time
// its blocks (docs/pipeline.md), 6 blocks on 2 x 2 stages, m = 16: blocks
// 1, 2, 2, 1 leave a bubble of 0.027, the first-heavy 2, 2, 1, 1 0.040.
// stages_per_rank 1: split_layers(num_layers, num_ranks). Throws as
// split_layers does, and for stages_per_rank < 1.
std::vector<int64_t> split_layers_interleaved(int64_t num_layers, int num_ranks,
                                              int stages_per_rank);

// The stages of rank `rank` of num_ranks when each rank holds
// stages_per_rank of them (interleaved pipelines): stages rank, rank + p,
// ..., rank + (v - 1)p of p v, cut at split_points or, when none are given,
// as split_layers_interleaved says. Throws InvalidArgument, naming the
// values, for stages_per_rank < 1 or more stages than blocks.
std::vector<TransformerStage> split_model_interleaved(
    std::shared_ptr<nn::Transformer> model, int rank, int num_ranks, int stages_per_rank,
    const std::vector<std::string>& split_points = {});

}  // namespace spmd::dist::pp
