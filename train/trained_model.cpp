// Loading the trained model whole: from a checkpoint of any layout, or from
// an exported file.
#include "train/trained_model.h"

#include <filesystem>

#include "autograd/optim/adamw.h"
#include "runtime/resource_limits.h"
#include "train/hf_gpt2.h"
#include "train/planner.h"
#include "train/train_checkpoint.h"

namespace spmd::train {

TrainedModel load_trained_model(const TrainConfig& config, const std::string& model_file) {
  // The model is built whole: first, whether it fits (a Llama 3.1 preset
  // may not), its f32 parameters and, from a checkpoint, AdamW's two moments.
  const uint64_t parameters = uint64_t(model_states(config).parameters);
  const bool checkpoint = model_file.empty();
  check_memory_fits(str_cat("the whole model of model.preset \"", config.model.preset, "\" (",
                            parameters, " parameters in f32",
                            checkpoint ? ", and AdamW's two moments from the checkpoint)" : ")"),
                    parameters * 4 * (checkpoint ? 3 : 1));
  TrainedModel out;
  out.model =
      std::make_shared<nn::Transformer>(transformer_config(config.model), config.training.seed);
  if (!model_file.empty() && std::filesystem::is_directory(model_file)) {
    // A Hugging Face GPT-2 folder (train/hf_gpt2.h): checked against the
    // config, every tensor named when missing or misshapen.
    load_hf_gpt2(model_file, config.model, out.model->named_parameters(),
                 out.model->named_parameters());
    out.step = -1, out.source = model_file;
    return out;
  }
  if (!model_file.empty()) {
    try {
      out.model->load(model_file);  // strict: every tensor, each with its shape
    } catch (const std::exception& e) {
      SPMD_THROW(InvalidArgument, model_file, " does not hold the model of the config: ", e.what());
    }
    out.step = -1, out.source = model_file;
    return out;
  }
  SPMD_CHECK(!config.checkpoint.folder.empty(), "set checkpoint.folder to the run's folder ",
             "(or name an exported model file)");
  // The optimizer's state is read too (a checkpoint holds both), then dropped.
  optim::AdamW opt(out.model->parameters(), {});
  LoadCheck check{{}, config.checkpoint.allow_partial_load};
  for (const auto& [name, p] : out.model->named_parameters()) check.whole_model.push_back(name);
  const auto state = load_latest_checkpoint(config.checkpoint.folder, out.model->named_parameters(),
                                            opt, nullptr, check);
  SPMD_CHECK(state.has_value(), config.checkpoint.folder, " holds no checkpoint (no latest)");
  out.step = state->step, out.source = config.checkpoint.folder;
  return out;
}

}  // namespace spmd::train
