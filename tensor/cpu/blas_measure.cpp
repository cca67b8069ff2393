// The timing of OpenBLAS cores and the file that keeps the winner
// (blas_measure.h). cblas_sgemm is looked up at run time, as blas.cpp's
// other OpenBLAS symbols are, so a build without OpenBLAS links this file
// too (and never calls it).
#include "tensor/cpu/blas_measure.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace spmd::cpu {
namespace {

// cblas_sgemm's enums, as cblas.h numbers them.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                       float, float*, int);

// The products one MLP's forward and backward make at a small model's shapes
// (spmd-bench-train's "small": C 384, 4C 1536, here 1024 tokens): y = x W
// (NN), dx = dy W^T (NT), dW = x^T dy (TN). Each is 1.2 GFLOP.
struct Shape {
  bool ta, tb;
  int M, N, K;
};
constexpr Shape kShapes[] = {{false, false, 1024, 1536, 384},
                             {false, true, 1024, 384, 1536},
                             {true, false, 384, 1536, 1024}};

double seconds_for_shapes(Sgemm sgemm, const std::vector<float>& a, const std::vector<float>& b,
                          std::vector<float>& c) {
  const auto start = std::chrono::steady_clock::now();
  for (const Shape& s : kShapes) {
    const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    sgemm(kRowMajor, s.ta ? kTrans : kNoTrans, s.tb ? kTrans : kNoTrans, s.M, s.N, s.K, 1.0f,
          a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.N);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace

std::vector<CoreRate> measure_cores(const std::vector<std::string>& cores,
                                    const std::function<bool(const std::string&)>& select) {
  auto* sgemm = reinterpret_cast<Sgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
  if (!sgemm) return {};
  size_t a_len = 0, b_len = 0, c_len = 0;
  for (const Shape& s : kShapes) {
    a_len = std::max(a_len, size_t(s.M) * size_t(s.K));
    b_len = std::max(b_len, size_t(s.K) * size_t(s.N));
    c_len = std::max(c_len, size_t(s.M) * size_t(s.N));
  }
  // Values of no consequence, but not denormal or NaN (which some kernels slow on).
  std::vector<float> a(a_len, 0.5f), b(b_len, 0.25f), c(c_len, 0.0f);
  double flops = 0;
  for (const Shape& s : kShapes) flops += 2.0 * s.M * s.N * s.K;

  // One thread: OpenBLAS's OpenMP build takes its thread count from the
  // calling thread's OpenMP setting, restored after.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  constexpr int kRounds = 3;
  std::vector<std::vector<double>> seconds(cores.size());
  std::vector<bool> took(cores.size(), true);
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < cores.size(); ++i) {
      if (!took[i]) continue;
      if (!select(cores[i])) {
        took[i] = false;
        continue;
      }
      (void)seconds_for_shapes(sgemm, a, b, c);  // warm: packing buffers, caches
      seconds[i].push_back(seconds_for_shapes(sgemm, a, b, c));
    }
  }
  omp_set_num_threads(threads);

  std::vector<CoreRate> rates;
  for (size_t i = 0; i < cores.size(); ++i) {
    if (!took[i] || seconds[i].empty()) continue;
    std::vector<double>& s = seconds[i];
    std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
    rates.push_back({cores[i], flops / s[s.size() / 2] / 1e9});
  }
  std::stable_sort(rates.begin(), rates.end(),
                   [](const CoreRate& x, const CoreRate& y) { return x.gflops > y.gflops; });
  return rates;
}

std::string core_cache_path(const std::string& key) {
  std::string dir;
  if (const char* d = std::getenv("SPMD_CACHE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/spmd";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/spmd";
  } else {
    return "";
  }
  char name[64];
  std::snprintf(name, sizeof(name), "/openblas-core-%016llx.txt",
                static_cast<unsigned long long>(fnv1a(key)));
  return dir + name;
}

// The file's text: the key, then one "rate CORE GFLOPS" line per core,
// fastest first, then "end" (a file cut short lacks it).
std::optional<std::vector<CoreRate>> read_core_cache(const std::string& path,
                                                     const std::string& key, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    *why = "no file yet";
    return std::nullopt;
  }
  std::string line;
  if (!std::getline(in, line) || line != "key " + key) {
    *why = path + " was written for another machine or library";
    return std::nullopt;
  }
  std::vector<CoreRate> rates;
  bool ended = false;
  while (std::getline(in, line)) {
    if (line == "end") {
      ended = true;
      break;
    }
    std::istringstream fields(line);
    std::string tag;
    CoreRate r;
    if (!(fields >> tag >> r.core >> r.gflops) || tag != "rate" || !(r.gflops > 0)) break;
    rates.push_back(r);
  }
  if (!ended || rates.empty()) {
    *why = path + " is malformed";
    return std::nullopt;
  }
  return rates;
}

std::string write_core_cache(const std::string& path, const std::string& key,
                             const std::vector<CoreRate>& rates) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return "cannot create " + fs::path(path).parent_path().string() + ": " + ec.message();
  std::string text = "key " + key + "\n";
  char line[128];
  for (const CoreRate& r : rates) {
    std::snprintf(line, sizeof(line), "rate %s %.2f\n", r.core.c_str(), r.gflops);
    text += line;
  }
  text += "end\n";
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot write " + tmp;
  const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!written || !synced || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return "cannot write " + path;
  }
  std::string why;
  const auto back = read_core_cache(path, key, &why);
  if (!back || back->size() != rates.size() || back->front().core != rates.front().core)
    return path + " did not read back as written";
  return "";
}

CoreCacheLock::CoreCacheLock(const std::string& path, double timeout_s) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const int fd = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::close(fd);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  fd_ = fd;
}

CoreCacheLock::~CoreCacheLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace spmd::cpu
