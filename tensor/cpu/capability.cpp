// The choice of the CPU capability (capability.h): cpuid, SPMD_CPU_CAPABILITY,
// and the capability cpu_backend() reads. Each capability's backend comes
// from its kernel objects through one C symbol, spmd_cpu_backend_<namespace>
// (generic, avx2, avx512: kernels.h); the build defines SPMD_CPU_HAVE_<NAMESPACE>
// for each it compiled (tensor/CMakeLists.txt).
#include "tensor/cpu/capability.h"

#include <strings.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "tensor/backend.h"

#if SPMD_CPU_HAVE_GENERIC
extern "C" spmd::Backend* spmd_cpu_backend_generic();
#endif
#if SPMD_CPU_HAVE_AVX2
extern "C" spmd::Backend* spmd_cpu_backend_avx2();
#endif
#if SPMD_CPU_HAVE_AVX512
extern "C" spmd::Backend* spmd_cpu_backend_avx512();
#endif

namespace spmd {
namespace cpu {
namespace {

constexpr CpuCapability kAll[] = {CpuCapability::kDefault, CpuCapability::kAvx2,
                                  CpuCapability::kAvx512};

#if defined(__x86_64__)
// The 48-byte brand string of leaves 0x80000002..4, trimmed.
std::string brand_string() {
  unsigned int r[12] = {};
  for (unsigned int i = 0; i < 3; ++i) {
    if (!__get_cpuid(0x80000002 + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]))
      return "unknown x86-64 CPU";
  }
  std::string s(reinterpret_cast<const char*>(r), sizeof r);
  s = s.c_str();  // up to the first NUL
  const size_t begin = s.find_first_not_of(' '), end = s.find_last_not_of(' ');
  return begin == std::string::npos ? s : s.substr(begin, end - begin + 1);
}

CpuId read_cpuid() {
  CpuId id;
  unsigned int a = 0, b = 0, c = 0, d = 0;
  __get_cpuid(0, &a, &b, &c, &d);
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  id.vendor = vendor;
  id.model = brand_string();
  __get_cpuid(1, &a, &b, &c, &d);
  const int base_family = int((a >> 8) & 0xf), ext_family = int((a >> 20) & 0xff);
  const int base_model = int((a >> 4) & 0xf), ext_model = int((a >> 16) & 0xf);
  id.family = base_family == 0xf ? base_family + ext_family : base_family;
  id.model_number =
      (base_family == 0x6 || base_family == 0xf) ? (ext_model << 4) + base_model : base_model;
  // libgcc's checks read cpuid and XGETBV (the OS must save the ymm/zmm state).
  __builtin_cpu_init();
  id.x86_64_v3 = __builtin_cpu_supports("x86-64-v3");
  id.x86_64_v4 = __builtin_cpu_supports("x86-64-v4");
  // Leaf 7: subleaf 0's EDX bit 22 is AMX-BF16; subleaf 1's EAX bit 5 is AVX512_BF16.
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) id.amx_bf16 = (d >> 22) & 1;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) id.avx512_bf16 = id.x86_64_v4 && ((a >> 5) & 1);
  return id;
}
#else
CpuId read_cpuid() { return CpuId{.vendor = "", .model = "non-x86 CPU"}; }
#endif

bool cpu_runs(CpuCapability c) {
  switch (c) {
    case CpuCapability::kDefault:
      return true;
    case CpuCapability::kAvx2:
      return cpu_id().x86_64_v3;
    case CpuCapability::kAvx512:
      return cpu_id().x86_64_v4;
  }
  return false;
}

std::string names_of(const std::vector<CpuCapability>& caps) {
  std::string s;
  for (CpuCapability c : caps) s += std::string(s.empty() ? "" : " ") + capability_name(c);
  return s;
}

// SPMD_CPU_CAPABILITY when set, else the best available.
CpuCapability choose() {
  const std::vector<CpuCapability> available = available_capabilities();
  const char* env = std::getenv("SPMD_CPU_CAPABILITY");
  if (env == nullptr || *env == '\0') return available.back();
  for (CpuCapability c : kAll) {
    if (strcasecmp(env, capability_name(c)) != 0) continue;
    SPMD_CHECK(capability_backend(c) != nullptr && cpu_runs(c), "SPMD_CPU_CAPABILITY=", env,
               ": not available on ", cpu_id().model,
               " with this build (available: ", names_of(available), ")");
    return c;
  }
  SPMD_THROW(InvalidArgument, "SPMD_CPU_CAPABILITY=", env,
             ": unknown capability (known: default, avx2, avx512; available here: ",
             names_of(available), ")");
}

// The capability in use, set once at the first op (or by set_cpu_capability).
std::atomic<int> g_capability{-1};

}  // namespace

const char* capability_name(CpuCapability c) {
  switch (c) {
    case CpuCapability::kDefault:
      return "default";
    case CpuCapability::kAvx2:
      return "avx2";
    case CpuCapability::kAvx512:
      return "avx512";
  }
  return "?";
}

const CpuId& cpu_id() {
  static const CpuId id = read_cpuid();
  return id;
}

Backend* capability_backend(CpuCapability c) {
  switch (c) {
#if SPMD_CPU_HAVE_GENERIC
    case CpuCapability::kDefault:
      return spmd_cpu_backend_generic();
#endif
#if SPMD_CPU_HAVE_AVX2
    case CpuCapability::kAvx2:
      return spmd_cpu_backend_avx2();
#endif
#if SPMD_CPU_HAVE_AVX512
    case CpuCapability::kAvx512:
      return spmd_cpu_backend_avx512();
#endif
    default:
      return nullptr;
  }
}

std::vector<CpuCapability> available_capabilities() {
  std::vector<CpuCapability> caps;
  for (CpuCapability c : kAll)
    if (capability_backend(c) != nullptr && cpu_runs(c)) caps.push_back(c);
  return caps;
}

CpuCapability cpu_capability() {
  int c = g_capability.load(std::memory_order_acquire);
  if (c < 0) {
    const int chosen = int(choose());
    // Threads racing here all choose the same; the first store wins.
    g_capability.compare_exchange_strong(c, chosen, std::memory_order_acq_rel);
    c = g_capability.load(std::memory_order_acquire);
  }
  return CpuCapability(c);
}

void set_cpu_capability(CpuCapability c) {
  SPMD_CHECK(capability_backend(c) != nullptr && cpu_runs(c),
             "set_cpu_capability: ", capability_name(c), " is not available on ", cpu_id().model,
             " with this build (available: ", names_of(available_capabilities()), ")");
  g_capability.store(int(c), std::memory_order_release);
}

std::string describe_cpu() {
  const CpuId& id = cpu_id();
  return str_cat(id.model, " (", id.vendor, " family ", id.family, " model ", id.model_number,
                 "), kernels ", capability_name(cpu_capability()),
                 " (available: ", names_of(available_capabilities()), ")");
}

}  // namespace cpu

Backend& cpu_backend() { return *cpu::capability_backend(cpu::cpu_capability()); }

}  // namespace spmd
