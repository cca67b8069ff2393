// Logging: one process-wide level and prefix, each line one write(2).
#include "runtime/logging.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "runtime/env.h"

namespace spmd {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_level{kUnset};
std::mutex g_prefix_mu;
std::string g_prefix;  // guarded by g_prefix_mu; empty until first use
std::atomic<LogSink> g_sink{nullptr};

LogLevel level_from_env() {
  const char* text = std::getenv("SPMD_LOG_LEVEL");
  if (!text || !*text) return LogLevel::kWarn;
  try {
    return parse_log_level(text);
  } catch (const InvalidArgument& e) {
    std::string line = std::string("[spmd] W ") + e.what() + "; using warn\n";
    (void)!::write(2, line.data(), line.size());
    return LogLevel::kWarn;
  }
}

std::string default_prefix() {
  if (const std::optional<int> rank = launcher_rank()) return str_cat("[rank ", *rank, "]");
  return str_cat("[pid ", ::getpid(), "]");
}

std::string current_prefix() {
  std::lock_guard<std::mutex> lock(g_prefix_mu);
  if (g_prefix.empty()) g_prefix = default_prefix();
  return g_prefix;
}

// "12:00:01.234" in local time.
std::string clock_text() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count()));
  return buf;
}

}  // namespace

LogLevel log_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level == kUnset) {
    level = static_cast<int>(level_from_env());
    int expected = kUnset;  // a concurrent first use may have won: keep its value
    if (!g_level.compare_exchange_strong(expected, level)) level = expected;
  }
  return static_cast<LogLevel>(level);
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

LogLevel parse_log_level(std::string_view text) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "debug") return LogLevel::kDebug;
  if (t == "info") return LogLevel::kInfo;
  if (t == "warn" || t == "warning") return LogLevel::kWarn;
  if (t == "error") return LogLevel::kError;
  if (t == "off" || t == "none") return LogLevel::kOff;
  SPMD_THROW(InvalidArgument, "SPMD_LOG_LEVEL='", text,
             "' is not one of debug, info, warn, error, off");
}

void set_log_rank(int rank) { set_log_prefix(str_cat("[rank ", rank, "]")); }

void set_log_prefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(g_prefix_mu);
  g_prefix = std::move(prefix);
}

void log_message(LogLevel level, std::string_view message) {
  static constexpr char kLetters[] = "DIWE";  // one per level below kOff
  static_assert(sizeof(kLetters) - 1 == size_t(LogLevel::kOff), "one letter per LogLevel");
  std::string line = current_prefix();
  line += ' ';
  line += kLetters[static_cast<int>(level) & 3];
  line += ' ';
  line += clock_text();
  line += ' ';
  line += message;
  line += '\n';
  if (LogSink sink = g_sink.load()) return sink(std::move(line));
  (void)!::write(2, line.data(), line.size());
}

void set_log_sink(LogSink sink) { g_sink.store(sink); }

}  // namespace spmd
