// nonfinite.h: the decision on a step whose loss or gradient norm is not
// finite, and the message that names where it went wrong.
#include "train/nonfinite.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "parallel/comm/object_collectives.h"
#include "tensor/ops.h"

namespace spmd::train {

NonfiniteCheck::NonfiniteCheck(const TrainConfig& config, dist::ProcessGroup& world)
    : world_(world),
      allowed_(config.training.skip_nonfinite_steps),
      folder_(config.checkpoint.folder) {}

bool NonfiniteCheck::may_update(int64_t step, double loss, double grad_norm,
                                const NamedTensors& params, int64_t last_saved) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return true;
  const std::string tensor = first_nonfinite_tensor(params);  // collective
  const std::string where =
      str_cat("step ", step, ": the loss is ", number_text(loss), " and the gradient norm ",
              number_text(grad_norm), "; ",
              tensor.empty() ? "every parameter and gradient is finite on every rank"
                             : "the first non-finite tensor is " + tensor);
  if (int64_t(skipped_.size()) < allowed_) {
    skipped_.push_back(step);
    if (world_.rank() == 0) {
      std::printf(
          "warning: %s; the step is skipped, without an update (%zu of "
          "training.skip_nonfinite_steps = %lld)\n",
          where.c_str(), skipped_.size(), (long long)allowed_);
      std::fflush(stdout);
    }
    return false;
  }
  std::string skipped;
  for (const int64_t s : skipped_) skipped += str_cat(skipped.empty() ? "" : ", ", s);
  const std::string last =
      folder_.empty() ? std::string()
      : last_saved > 0
          ? str_cat(", and the checkpoint ",
                    (std::filesystem::path(folder_) / step_folder_name(last_saved)).string(),
                    " stays the last")
          : str_cat(", with no checkpoint in ", folder_);
  SPMD_THROW(Error, where, "; the run stops before the optimizer step", last,
             allowed_ > 0 ? str_cat(" (training.skip_nonfinite_steps = ", allowed_, ": step",
                                    allowed_ > 1 ? "s " : " ", skipped, " skipped already)")
                          : std::string(" (training.skip_nonfinite_steps = K lets a run skip up "
                                        "to K such steps)"));
}

// This rank's first non-finite parameter, else gradient; then the first
// rank's that has one, gathered from every rank. Read on the host: only a
// step that already went wrong pays for it.
std::string NonfiniteCheck::first_nonfinite_tensor(const NamedTensors& params) {
  std::string mine;
  for (const bool grads : {false, true}) {
    for (const auto& [name, p] : params) {
      const Tensor t = grads ? p.grad() : p;
      if (!t.defined() || t.device().is_meta()) continue;
      const std::string element = first_nonfinite_element(t);
      if (element.empty()) continue;
      mine = str_cat(grads ? "the gradient of " : "the parameter ", name, " on rank ",
                     world_.rank(), " (", element, ")");
      break;
    }
    if (!mine.empty()) break;
  }
  if (world_.size() == 1) return mine;
  for (const auto& bytes :
       dist::all_gather_bytes(world_, std::vector<uint8_t>(mine.begin(), mine.end())))
    if (!bytes.empty()) return std::string(bytes.begin(), bytes.end());
  return "";
}

std::string first_nonfinite_element(const Tensor& t) {
  if (!is_floating(t.dtype()) || t.numel() == 0) return "";
  // On the host, in one pass: only a resume (once per tensor) and a step
  // that already went wrong pay for it.
  const auto scan = [](const auto& v) -> std::string {
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i])) return str_cat("element ", i, " is ", number_text(double(v[i])));
    return "";
  };
  if (t.dtype() == DType::kF32) return scan(ops::to_vector<float>(t));
  return scan(ops::to_vector<double>(t));
}

std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return str_cat(v);
}

}  // namespace spmd::train
