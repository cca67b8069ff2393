// The numeric flag checks: parse the text the user typed, then compare.
#include "runtime/flag_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace spmd::flags {
namespace {

// Shortest text for a bound: 1, 0.5, 604800 (never 1797693... digits).
std::string show(double v) {
  if (v == std::numeric_limits<double>::max()) return "the largest double";
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

std::string count_error(const std::string& text, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  const bool whole = !text.empty() && end && *end == '\0';
  if (!whole) {
    const double d = std::strtod(text.c_str(), &end);
    if (!text.empty() && *end == '\0' && std::isfinite(d) && d > double(max))
      return "must be at most " + std::to_string(max) + ", got " + text;
    return "must be a whole number, got '" + text + "'";
  }
  if (errno == ERANGE || v > max) return "must be at most " + std::to_string(max) + ", got " + text;
  if (v < min) return "must be at least " + std::to_string(min) + ", got " + text;
  return "";
}

std::string number_error(const std::string& text, double min, double max, bool min_exclusive) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') return "must be a number, got '" + text + "'";
  if (std::isnan(v)) return "must be a number, got " + text;
  if (std::isinf(v)) return "must be finite, got " + text;
  if (min_exclusive && v <= min)
    return (min == 0 ? std::string("must be positive") : "must be above " + show(min)) + ", got " +
           text;
  if (v < min) return "must be at least " + show(min) + ", got " + text;
  if (v > max) return "must be at most " + show(max) + ", got " + text;
  return "";
}

CLI::Validator count(int64_t min, int64_t max) {
  return CLI::Validator([=](std::string& text) { return count_error(text, min, max); },
                        "INT in " + std::to_string(min) + ".." + std::to_string(max));
}

CLI::Validator number(double min, double max) {
  return CLI::Validator([=](std::string& text) { return number_error(text, min, max, false); },
                        "NUMBER >= " + show(min));
}

CLI::Validator positive(double max) {
  return CLI::Validator([=](std::string& text) { return number_error(text, 0, max, true); },
                        "NUMBER > 0");
}

CLI::Validator seconds(double max) {
  return CLI::Validator(
      [=](std::string& text) {
        std::string err = number_error(text, 0, max, true);
        return err.empty() ? err : err + " (seconds, above 0 and at most " + show(max) + ")";
      },
      "SECONDS");
}

}  // namespace spmd::flags
