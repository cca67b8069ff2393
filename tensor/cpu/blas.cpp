// The choice of OpenBLAS's core (blas.h): which cores can run, how one is
// made current, and which wins.
//
// OpenBLAS exports what it uses itself to pick a core:
// gotoblas_dynamic_init() picks one (reading OPENBLAS_CORETYPE first, as its
// constructor did) and does nothing while one is set; gotoblas_dynamic_quit()
// unsets it. spmd sets OPENBLAS_CORETYPE for the one call and restores it, so
// child processes see the environment the user gave. The symbols are looked
// up at run time: an OpenBLAS built for one CPU (no DYNAMIC_ARCH) lacks them
// and is left as it is, as is a core the library was built without (its
// gotoblas_<CORE> table is missing).
//
// Only cores whose instructions spmd knows are ever made current: running
// one the CPU lacks would end the process with SIGILL. The list below says
// what each needs; the fastest is then found by timing (blas_measure.h), not
// by a table of CPU models.
#include "tensor/cpu/blas.h"

#include <dlfcn.h>
#include <strings.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tensor/cpu/blas_measure.h"
#include "tensor/cpu/capability.h"

namespace spmd::cpu {
namespace {

template <class F>
F* find_symbol(const char* name) {
  return reinterpret_cast<F*>(dlsym(RTLD_DEFAULT, name));
}

// The cores spmd may run, and what their kernels execute: the vector ISA
// (1 SSE3, 2 AVX, 3 AVX2 with FMA, 4 AVX-512 F/BW/CD/DQ/VL) and whether
// they also use AVX512_BF16 (Cooperlake's bf16 kernels; its f32 ones are
// SkylakeX's). The AMD cores of the AVX era (Bulldozer...) use FMA4, which
// later CPUs lack, and are left out.
struct CoreNeeds {
  const char* name;
  int isa;
  bool bf16;
};
constexpr CoreNeeds kCores[] = {{"SkylakeX", 4, false},    {"Cooperlake", 4, true},
                                {"Haswell", 3, false},     {"Zen", 3, false},
                                {"Sandybridge", 2, false}, {"Prescott", 1, false}};

const CoreNeeds* needs_of(const std::string& core) {
  for (const CoreNeeds& c : kCores)
    if (strcasecmp(core.c_str(), c.name) == 0) return &c;
  return nullptr;
}

// The widest vector ISA this CPU executes, on the scale above.
int cpu_isa() {
  const CpuId& id = cpu_id();
  if (id.x86_64_v4) return 4;
  if (id.x86_64_v3) return 3;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx")) return 2;
  return 1;  // x86-64 has SSE2; OpenBLAS's Prescott core adds SSE3, on every x86-64 since 2005
#else
  return 0;
#endif
}

bool cpu_has_bf16() { return cpu_id().avx512_bf16; }

std::string upper(std::string s) {
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

bool built_in(const std::string& core) {
  return find_symbol<char>(("gotoblas_" + upper(core)).c_str()) != nullptr;
}

std::string current_core() {
  auto* corename = find_symbol<char*()>("openblas_get_corename");
  return corename ? corename() : "";
}

// Asks OpenBLAS for `core`; true when it then runs it.
bool reselect(const std::string& core) {
  auto* quit = find_symbol<void()>("gotoblas_dynamic_quit");
  auto* init = find_symbol<void()>("gotoblas_dynamic_init");
  if (!quit || !init) return false;
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = before ? before : "";
  setenv("OPENBLAS_CORETYPE", upper(core).c_str(), 1);
  quit();
  init();
  if (before) {
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  } else {
    unsetenv("OPENBLAS_CORETYPE");
  }
  return strcasecmp(current_core().c_str(), core.c_str()) == 0;
}

std::string names_of(const std::vector<std::string>& cores) {
  std::string s;
  for (const std::string& c : cores) s += (s.empty() ? "" : ", ") + c;
  return s.empty() ? "none" : s;
}

// What a cached result is valid for: the CPU, the library build, the shapes.
// OpenBLAS's config string names the core it runs at the time; that word
// is left out, so the key is the same whichever core the process began on.
std::string cache_key(const std::string& config_now, const std::string& core_now) {
  std::string config;
  size_t start = 0;
  while (start < config_now.size()) {
    size_t end = config_now.find(' ', start);
    if (end == std::string::npos) end = config_now.size();
    const std::string word = config_now.substr(start, end - start);
    if (strcasecmp(word.c_str(), core_now.c_str()) != 0)
      config += (config.empty() ? "" : " ") + word;
    start = end + 1;
  }
  const CpuId& id = cpu_id();
  return id.vendor + " family " + std::to_string(id.family) + " model " +
         std::to_string(id.model_number) + " \"" + id.model + "\" isa " +
         std::to_string(cpu_isa()) + (cpu_has_bf16() ? " bf16" : "") + " | " + config +
         " | mlp 1024x384x1536 x3, 1 thread";
}

// SPMD_BLAS_CORE=<core>: that core, checked.
void choose_named(BlasInfo& info, const std::string& value) {
  const CoreNeeds* needs = needs_of(value);
  SPMD_CHECK(needs && built_in(value) && cpu_runs_openblas_core(value), "SPMD_BLAS_CORE=", value,
             ": ",
             !needs             ? "not a core spmd knows how to run"
             : !built_in(value) ? "this OpenBLAS was built without it"
                                : "this CPU cannot execute its instructions",
             " (cores here: ", names_of(openblas_core_candidates()), "; or auto, keep)");
  SPMD_CHECK(reselect(needs->name), "SPMD_BLAS_CORE=", value, ": OpenBLAS did not take it (runs ",
             current_core(), ")");
  info.core = current_core();
  info.chosen_by = "SPMD_BLAS_CORE";
}

// auto: the cached winner, or time the candidates and keep the winner.
void choose_measured(BlasInfo& info, const std::string& config) {
  const std::vector<std::string> candidates = openblas_core_candidates();
  if (candidates.size() < 2) return;  // nothing to choose between
  const std::string key = cache_key(config, current_core());
  const std::string path = core_cache_path(key);
  std::string why;
  std::optional<std::vector<CoreRate>> rates;
  if (!path.empty()) rates = read_core_cache(path, key, &why);
  if (!rates && !path.empty()) {
    const CoreCacheLock lock(path, 60.0);
    rates = read_core_cache(path, key, &why);  // another process may have measured meanwhile
    if (!rates) {
      rates = measure_cores(candidates, reselect);
      const std::string error = rates->empty() ? "no core could be timed"
                                : !lock.held() ? "waited 60 s for " + path + ".lock"
                                               : write_core_cache(path, key, *rates);
      info.cache = error.empty() ? "cached in " + path : "not cached: " + error;
      info.chosen_by = "measured";
    }
  }
  if (!rates) {  // no place to keep it
    rates = measure_cores(candidates, reselect);
    info.cache = "not cached: none of SPMD_CACHE_DIR, XDG_CACHE_HOME, HOME is set";
    info.chosen_by = "measured";
  }
  if (info.chosen_by != "measured") {
    info.chosen_by = "cached";
    info.cache = "read from " + path;
  }
  info.rates = *rates;
  for (const CoreRate& r : info.rates)
    if (needs_of(r.core) && built_in(r.core) && cpu_runs_openblas_core(r.core) &&
        reselect(r.core)) {
      info.core = current_core();
      return;
    }
  reselect(info.picked);  // none took: back to OpenBLAS's own pick
  info.core = current_core();
  info.chosen_by = "OpenBLAS";
}

BlasInfo choose_core() {
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
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  info.coretype = coretype ? coretype : "";
  info.chosen_by = "OpenBLAS";
  const char* env = std::getenv("SPMD_BLAS_CORE");
  const std::string choice = env && *env ? env : "auto";
  if (strcasecmp(choice.c_str(), "keep") == 0) {
    info.chosen_by = "keep";
    return info;
  }
  if (cfg.find("DYNAMIC_ARCH") == std::string::npos) {
    SPMD_CHECK(strcasecmp(choice.c_str(), "auto") == 0, "SPMD_BLAS_CORE=", choice,
               ": this OpenBLAS (", cfg, ") was built for one core and cannot change it");
    return info;
  }
  if (strcasecmp(choice.c_str(), "auto") == 0) {
    choose_measured(info, cfg);
  } else {
    choose_named(info, choice);
  }
  return info;
}

}  // namespace

int openblas_core_isa(const std::string& core) {
  const CoreNeeds* needs = needs_of(core);
  return needs ? needs->isa : 0;
}

bool cpu_runs_openblas_core(const std::string& core) {
  const CoreNeeds* needs = needs_of(core);
  return needs && needs->isa <= cpu_isa() && (!needs->bf16 || cpu_has_bf16());
}

std::vector<std::string> openblas_core_candidates() {
  std::vector<std::string> cores;
  if (!find_symbol<void()>("gotoblas_dynamic_init")) return cores;
  // A narrower ISA than the two widest is never faster at a GEMM: it does
  // the same work in more instructions.
  const int widest = cpu_isa();
  for (const CoreNeeds& c : kCores)
    if (c.isa >= widest - 1 && cpu_runs_openblas_core(c.name) && built_in(c.name))
      cores.push_back(c.name);
  return cores;
}

const BlasInfo& blas_info() {
  static const BlasInfo info = choose_core();
  return info;
}

std::string describe_blas() {
  const BlasInfo& b = blas_info();
  if (b.core.empty()) return b.library;
  std::string s = b.library + " core " + b.core + " (";
  if (b.chosen_by == "measured" || b.chosen_by == "cached") {
    s += "measured fastest at 1 thread:";
    char rate[64];
    for (size_t i = 0; i < b.rates.size(); ++i) {
      std::snprintf(rate, sizeof(rate), "%s %s %.0f", i ? "," : "", b.rates[i].core.c_str(),
                    b.rates[i].gflops);
      s += rate;
    }
    s += " GFLOP/s; " + b.cache;
    if (!b.coretype.empty() && strcasecmp(b.coretype.c_str(), b.core.c_str()) != 0)
      s += "; OPENBLAS_CORETYPE=" + b.coretype + " overridden, SPMD_BLAS_CORE=keep keeps it";
  } else if (b.chosen_by == "SPMD_BLAS_CORE") {
    s += "SPMD_BLAS_CORE; OpenBLAS picked " + b.picked;
  } else {
    if (b.chosen_by == "keep") s += "SPMD_BLAS_CORE=keep: ";
    s += b.coretype.empty() ? "OpenBLAS's own pick" : "OPENBLAS_CORETYPE=" + b.coretype;
    if (b.chosen_by == "OpenBLAS") s += ", no other core to choose";
  }
  return s + ")";
}

}  // namespace spmd::cpu
