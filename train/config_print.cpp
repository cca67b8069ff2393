// Printing the resolved config (spmd-train --print-config): every key in the
// order of for_each_field(), as TOML that load_config() reads back; a model
// key the preset set is printed as a comment.
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include "runtime/error.h"
#include "train/config.h"
#include "train/config_toml.h"

namespace spmd::train {

using namespace config_detail;

std::string to_toml(const TrainConfig& c) {
  SPMD_CHECK(c.training.seed <= uint64_t(std::numeric_limits<int64_t>::max()),
             "to_toml: training.seed ", c.training.seed, " does not fit a TOML integer");
  TrainConfig from_preset = c;  // what load_config fills in before the model's keys
  from_preset.model = model_defaults(c.model.preset, c.model.shape);
  const bool preset = c.model.preset != "custom";
  std::ostringstream os;
  os << "# spmd-train config: every key, resolved. load_config() reads it back.\n";
  std::string current;
  for_each_field(
      [&](const std::string& section, const std::string& key, const auto& field,
          const auto& preset_field) {
        if (section != current) os << (current.empty() ? "" : "\n") << "[" << section << "]\n";
        current = section;
        using T = std::decay_t<decltype(field)>;
        std::string value;
        if constexpr (std::is_same_v<T, std::string>)
          value = toml_string(field);
        else if constexpr (std::is_same_v<T, bool>)
          value = field ? "true" : "false";
        else if constexpr (std::is_integral_v<T>)
          value = std::to_string(field);
        else
          value = toml_double(field);
        if (preset && section == "model" && key != "preset" && field == preset_field)
          os << "# " << key << " = " << value << "  (preset \"" << c.model.preset << "\")\n";
        else
          os << key << " = " << value << "\n";
      },
      c, from_preset);
  return os.str();
}
}  // namespace spmd::train
