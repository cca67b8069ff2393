// Leveled logging for a process that is one rank among many: every line says
// which rank wrote it ("[rank 3] W 12:00:01.234 store: ..."), goes to stderr
// in one write so lines of several threads never interleave, and is filtered
// by SPMD_LOG_LEVEL (debug, info, warn, error, off; default warn).
//
//   SPMD_LOG_INFO("connected to ", host, ":", port);
//
// The message is only built when the level is enabled. Not here: log files,
// rotation, structured output (spmdrun's --log-dir keeps each worker's output
// in a file).
#pragma once

#include <string>
#include <string_view>

#include "runtime/error.h"

namespace spmd {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// The current level: SPMD_LOG_LEVEL read at first use, unless set_log_level
// was called. An unknown value is reported once and the default used.
LogLevel log_level();
void set_log_level(LogLevel level);
// "debug" | "info" | "warn" | "warning" | "error" | "off" (any case); throws
// InvalidArgument otherwise.
LogLevel parse_log_level(std::string_view text);

// The prefix of every line: "[rank N]" after set_log_rank(N); before that,
// "[rank N]" from the RANK variable when set, else "[pid P]".
void set_log_rank(int rank);
// A prefix of one's own, such as "[spmdrun]".
void set_log_prefix(std::string prefix);

inline bool log_enabled(LogLevel level) { return level >= log_level() && level != LogLevel::kOff; }
// Writes one line, with prefix, level letter and wall-clock time, to stderr
// (or to the sink, when one is set).
void log_message(LogLevel level, std::string_view message);

// Where finished lines go instead of a write(2) to stderr: a process whose
// stderr may stop reading (spmdrun) passes them to a writer that never
// blocks. nullptr: stderr again.
using LogSink = void (*)(std::string line);
void set_log_sink(LogSink sink);

}  // namespace spmd

#define SPMD_LOG_AT(level, ...)                                                               \
  do {                                                                                        \
    if (::spmd::log_enabled(level)) ::spmd::log_message(level, ::spmd::str_cat(__VA_ARGS__)); \
  } while (0)
#define SPMD_LOG_DEBUG(...) SPMD_LOG_AT(::spmd::LogLevel::kDebug, __VA_ARGS__)
#define SPMD_LOG_INFO(...) SPMD_LOG_AT(::spmd::LogLevel::kInfo, __VA_ARGS__)
#define SPMD_LOG_WARN(...) SPMD_LOG_AT(::spmd::LogLevel::kWarn, __VA_ARGS__)
#define SPMD_LOG_ERROR(...) SPMD_LOG_AT(::spmd::LogLevel::kError, __VA_ARGS__)
