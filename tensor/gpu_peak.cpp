// The datasheet table (gpu_peak.h). Sources: NVIDIA's product pages and
// datasheets (nvidia.com/en-us/data-center/{h100,h200,a100,l4,l40s}/, the
// A10 datasheet, the HGX B200 and GB200 figures of the Blackwell datasheet).
// Tensor-core figures are the dense ones, half the datasheet's sparse ones.
#include "tensor/gpu_peak.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <vector>

namespace spmd::cuda {
namespace {

constexpr double T = 1e12;

struct Row {
  const char* words;  // all must be words of the device's name
  GpuPeak peak;
};

// More specific rows first: "H100 NVL" before "H100".
const Row kTable[] = {
    {"H100 NVL", {"H100 NVL", 835 * T, 417.5 * T, 60 * T}},
    {"H100 PCIe", {"H100 PCIe", 756 * T, 378 * T, 51 * T}},
    {"H100", {"H100 SXM", 989 * T, 494.5 * T, 67 * T}},
    {"H200 NVL", {"H200 NVL", 835 * T, 417.5 * T, 60 * T}},
    {"H200", {"H200 SXM", 989 * T, 494.5 * T, 67 * T}},
    {"GH200", {"GH200 (an H100 SXM's rates)", 989 * T, 494.5 * T, 67 * T}},
    {"GB200", {"GB200 (1,200 W)", 2500 * T, 1250 * T, 90 * T}},
    {"B200", {"HGX B200 (1,000 W)", 2250 * T, 1100 * T, 80 * T}},
    {"A100", {"A100", 312 * T, 156 * T, 19.5 * T}},
    {"A10", {"A10", 125 * T, 62.5 * T, 31.2 * T}},
    {"L40S", {"L40S", 362 * T, 183 * T, 91.6 * T}},
    {"L4", {"L4", 121 * T, 60 * T, 30.3 * T}},
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The words of a name, lower case, split at spaces and dashes.
std::vector<std::string> words_of(const std::string& name) {
  std::string spaced = lower(name);
  std::replace(spaced.begin(), spaced.end(), '-', ' ');
  std::istringstream in(spaced);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

std::optional<GpuPeak> datasheet_peak(const std::string& device_name) {
  const std::vector<std::string> name = words_of(device_name);
  for (const Row& row : kTable) {
    const std::vector<std::string> want = words_of(row.words);
    const bool all = std::all_of(want.begin(), want.end(), [&](const std::string& w) {
      return std::find(name.begin(), name.end(), w) != name.end();
    });
    if (all) return row.peak;
  }
  return std::nullopt;
}

}  // namespace spmd::cuda
