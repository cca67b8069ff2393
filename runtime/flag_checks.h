// Checks for the numeric flags of every spmd binary, with messages in the
// user's terms. CLI11's own checks (CLI::PositiveNumber...) accept nan and
// inf and word a failure as "Value 0 not in range 0.000000 to 1797693...";
// these say what the flag needs and what it got:
//
//   app.add_option("--steps", f.steps, "optimizer steps")->check(flags::count(1));
//   $ 01_train_single --steps 0
//   --steps: must be at least 1, got 0
//
// Every check refuses nan and inf; a count refuses a fraction. Not here:
// checks that relate two flags or a flag and the machine (the binaries do
// those after parsing, e.g. runtime/resource_limits.h for what must fit).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>

namespace spmd::flags {

// The longest timeout a flag accepts: a week, in seconds. Longer is a typo
// or "forever", which a timeout must not mean.
inline constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;

// A whole number in [min, max] (steps, batches, threads, ranks...).
CLI::Validator count(int64_t min, int64_t max = std::numeric_limits<int32_t>::max());

// A finite real number in [min, max] (learning rate with min > 0 via positive()).
CLI::Validator number(double min, double max = std::numeric_limits<double>::max());

// A finite real number above 0, at most max.
CLI::Validator positive(double max = std::numeric_limits<double>::max());

// A finite real number of seconds above 0 (and at most a week).
CLI::Validator seconds(double max = kMaxTimeoutSeconds);

// The messages themselves, for values checked after parsing ("" when fine).
std::string count_error(const std::string& text, int64_t min, int64_t max);
std::string number_error(const std::string& text, double min, double max, bool min_exclusive);

}  // namespace spmd::flags
