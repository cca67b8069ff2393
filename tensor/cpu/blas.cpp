// OpenBLAS's core, checked and if need be chosen again at start-up (blas.h).
//
// OpenBLAS exports what it uses itself for this: gotoblas_dynamic_init()
// picks a core (reading OPENBLAS_CORETYPE first, as its constructor did) and
// does nothing while one is set; gotoblas_dynamic_quit() unsets it. spmd
// sets OPENBLAS_CORETYPE for the one call and removes it again, so child
// processes see the environment the user gave. The symbols are looked up
// at run time: an OpenBLAS built for one CPU (no DYNAMIC_ARCH) lacks them
// and is left as it is, as is a core OpenBLAS was not built with (its
// gotoblas_<CORE> table is missing). The check runs before main (a static
// initializer) and again, as a no-op, when the first CpuBackend is made.
#include "tensor/cpu/blas.h"

#include <dlfcn.h>
#include <strings.h>

#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "tensor/cpu/capability.h"

namespace spmd::cpu {
namespace {

template <class F>
F* find_symbol(const char* name) {
  return reinterpret_cast<F*>(dlsym(RTLD_DEFAULT, name));
}

// The vector ISA an OpenBLAS core's kernels use: 1 SSE, 2 AVX, 3 AVX2, 4
// AVX-512; 0 for a name spmd does not know (left alone).
int isa_level_of_core(const std::string& core) {
  static const std::pair<const char*, int> kLevels[] = {
      {"SapphireRapids", 4}, {"Cooperlake", 4}, {"SkylakeX", 4},
      {"Haswell", 3},        {"Zen", 3},        {"Sandybridge", 2},
      {"Bulldozer", 2},      {"Piledriver", 2}, {"Steamroller", 2},
      {"Excavator", 2},      {"Prescott", 1},   {"Core2", 1},
      {"Penryn", 1},         {"Dunnington", 1}, {"Nehalem", 1},
      {"Atom", 1},           {"Nano", 1},       {"Opteron", 1},
      {"Opteron_SSE3", 1},   {"Barcelona", 1},  {"Bobcat", 1},
      {"Katmai", 1},         {"Coppermine", 1}, {"Northwood", 1},
      {"Banias", 1},         {"Athlon", 1}};
  for (const auto& [name, level] : kLevels)
    if (strcasecmp(core.c_str(), name) == 0) return level;
  return 0;
}

// The cores for this CPU, best first (a later one is tried when OpenBLAS
// was built without the earlier).
std::vector<std::string> cores_for_this_cpu() {
  const CpuId& id = cpu_id();
  const bool amd = id.vendor == "AuthenticAMD";
  // SkylakeX before Cooperlake: the same f32 kernels (Cooperlake adds bf16
  // ones spmd does not call), and 0-5% faster at the benchmark's shapes.
  if (id.x86_64_v4) return {"SkylakeX", "Cooperlake", amd ? "Zen" : "Haswell"};
  if (id.x86_64_v3) return {amd ? "Zen" : "Haswell", "Sandybridge"};
  if (__builtin_cpu_supports("avx")) return {"Sandybridge"};
  return {};
}

std::string upper(std::string s) {
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

std::string current_core() {
  auto* corename = find_symbol<char*()>("openblas_get_corename");
  return corename ? corename() : "";
}

// Asks OpenBLAS for `core`; returns the core it then reports.
std::string reselect(const std::string& core) {
  auto* quit = find_symbol<void()>("gotoblas_dynamic_quit");
  auto* init = find_symbol<void()>("gotoblas_dynamic_init");
  if (!quit || !init) return current_core();
  setenv("OPENBLAS_CORETYPE", upper(core).c_str(), 1);
  quit();
  init();
  unsetenv("OPENBLAS_CORETYPE");
  return current_core();
}

BlasInfo check_core() {
  BlasInfo info;
  auto* config = find_symbol<char*()>("openblas_get_config");
  if (!config) {
    info.library = "none (Eigen's own GEMM)";
    return info;
  }
  const std::string cfg = config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  const size_t second_space = cfg.find(' ', cfg.find(' ') + 1);
  info.library = cfg.substr(0, second_space);
  info.core = info.picked = current_core();
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  info.chosen_by = forced && *forced ? "OPENBLAS_CORETYPE" : "OpenBLAS";
  if ((forced && *forced) || cfg.find("DYNAMIC_ARCH") == std::string::npos) return info;
  const std::string better = better_openblas_core(info.picked);
  if (better.empty()) return info;
  for (const std::string& core : cores_for_this_cpu()) {
    if (isa_level_of_core(core) <= isa_level_of_core(info.picked)) break;
    if (!find_symbol<char>(("gotoblas_" + upper(core)).c_str())) continue;  // not built in
    info.core = reselect(core);
    if (strcasecmp(info.core.c_str(), core.c_str()) == 0) {
      info.chosen_by = "spmd";
      return info;
    }
  }
  info.core = reselect(info.picked);  // none took: back to OpenBLAS's own pick
  return info;
}

}  // namespace

std::string better_openblas_core(const std::string& current) {
  const int level = isa_level_of_core(current);
  if (level == 0) return "";
  for (const std::string& core : cores_for_this_cpu())
    if (isa_level_of_core(core) > level) return core;
  return "";
}

const BlasInfo& blas_info() {
  static const BlasInfo info = check_core();
  return info;
}

namespace {
[[maybe_unused]] const BlasInfo& g_before_main = blas_info();
}  // namespace

std::string describe_blas() {
  const BlasInfo& b = blas_info();
  if (b.core.empty()) return b.library;
  std::string s = b.library + " core " + b.core;
  if (b.chosen_by == "spmd") return s + " (chosen by spmd: OpenBLAS picked " + b.picked + ")";
  return s + " (chosen by " + b.chosen_by + ")";
}

}  // namespace spmd::cpu
