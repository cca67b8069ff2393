// Writing the failure report.
#include "launcher/failure_report.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "runtime/error.h"
#include "runtime/process.h"

namespace spmd::launcher {
namespace {

std::string wall_time(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  localtime_r(&tt, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// What usually sends a signal a worker did not ask for.
std::string hint(int status) {
  if (!WIFSIGNALED(status)) return "";
  switch (WTERMSIG(status)) {
    case SIGKILL:
      return "SIGKILL comes from outside the worker: often the kernel's out-of-memory killer "
             "(see dmesg)";
    case SIGSEGV:
    case SIGBUS:
      return "a bad memory access in the worker";
    case SIGABRT:
      return "the worker aborted (a failed assertion or std::terminate)";
    default:
      return "";
  }
}

std::string others(const WorkerGroup& group, size_t failed) {
  std::string out;
  for (size_t i = 0; i < group.workers().size(); ++i) {
    if (i == failed) continue;
    const Worker& w = group.workers()[i];
    out += str_cat(out.empty() ? "" : "; ", "rank ", w.rank, " ", describe_wait_status(w.status));
  }
  return out.empty() ? "none on this node" : out;
}

// The last `max_lines` lines of `text`, indented for the report (the end of
// a Python traceback is where the error is).
std::string indented(const std::string& text, size_t max_lines = 40) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  size_t first = lines.size() > max_lines ? lines.size() - max_lines : 0;
  if (first > 0) out += str_cat("    | (", first, " earlier lines)\n");
  for (size_t i = first; i < lines.size(); ++i) out += "    | " + lines[i] + "\n";
  return out;
}

constexpr const char* kErrorFolderPrefix = "spmdrun_errors_";

// Whether `dir` holds no file, however deep.
bool holds_no_file(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir, ec))
    if (f.is_regular_file()) return false;
  return !ec;
}

// Removes the file-less error folders of launchers that died without
// removing theirs (killed by SIGKILL): /tmp/spmdrun_errors_<pid>_XXXXXX whose
// pid is gone. A folder with a file in it is kept, as its report named it.
void remove_stale_error_folders() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/tmp", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kErrorFolderPrefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + std::strlen(kErrorFolderPrefix), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    if (holds_no_file(entry.path())) std::filesystem::remove_all(entry.path(), rm);
  }
}

}  // namespace

ErrorFiles::ErrorFiles(const std::string& log_root) : root_(log_root) {
  if (!root_.empty()) return;
  remove_stale_error_folders();
  std::string tmpl = str_cat("/tmp/", kErrorFolderPrefix, ::getpid(), "_XXXXXX");
  SPMD_CHECK(::mkdtemp(tmpl.data()) != nullptr,
             "cannot create a folder for the workers' error files: ", std::strerror(errno));
  root_ = tmpl;
  temporary_ = true;
}

ErrorFiles::~ErrorFiles() {
  std::error_code ec;
  if (temporary_ && holds_no_file(root_)) std::filesystem::remove_all(root_, ec);
}

std::string ErrorFiles::path(int restart, int rank) const {
  return str_cat(root_, "/attempt_", restart, "/rank_", rank, "/error.json");
}

std::string ErrorFiles::prepare(int restart, int rank) const {
  namespace fs = std::filesystem;
  const fs::path file = path(restart, rank);
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  SPMD_CHECK(!ec, "cannot create ", file.parent_path().string(), ": ", ec.message());
  fs::remove(file, ec);
  return file.string();
}

std::string error_file_report(const std::string& path) {
  std::ifstream in(path);
  if (path.empty() || !in) return "";
  std::string text(1 << 20, '\0');  // at most 1 MiB of it: a report, not a dump
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  std::ostringstream os;
  os << "  error file    : " << path << "\n";
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*exceptions=*/false);
  auto field = [](const nlohmann::json& j, const char* key) -> const nlohmann::json* {
    return j.is_object() && j.contains(key) ? &j.at(key) : nullptr;
  };
  const nlohmann::json* message = field(doc, "message");
  const nlohmann::json* inner = message ? field(*message, "message") : nullptr;
  const nlohmann::json* extra = message ? field(*message, "extraInfo") : nullptr;
  const nlohmann::json* stack = extra ? field(*extra, "py_callstack") : nullptr;
  if (message && message->is_string()) {  // a plain {"message": "..."} is accepted too
    os << "  error         : " << message->get<std::string>() << "\n";
  } else if (inner && inner->is_string()) {
    os << "  error         : " << inner->get<std::string>() << "\n";
    if (stack && stack->is_string())
      os << "  its call stack (from the error file):\n" << indented(stack->get<std::string>());
  } else {
    os << "  (not torchrun's error-file format; as written:)\n" << indented(text);
  }
  return os.str();
}

std::string failure_summary(const Worker& w, int group_rank) {
  return str_cat("rank ", w.rank, " (local rank ", w.local_rank, " on node ", group_rank, ") ",
                 describe_wait_status(w.status));
}

std::string format_failure_report(const WorkerGroup& group, size_t failed,
                                  const FailureContext& c) {
  const Worker& w = group.workers()[failed];
  double after = std::chrono::duration<double>(w.ended - group.started()).count();
  std::ostringstream os;
  os << "spmdrun: ======================= worker failure =======================\n";
  os << "  first to fail : rank " << w.rank << " (local rank " << w.local_rank << " on node "
     << c.group_rank << ", pid " << w.pid << ")\n";
  os << "  how           : " << describe_wait_status(w.status) << "\n";
  if (std::string h = hint(w.status); !h.empty()) os << "                  (" << h << ")\n";
  os << "  when          : " << wall_time(w.ended) << " (" << std::fixed;
  os.precision(2);
  os << after << " s after the workers started)\n";
  os << "  command       : " << c.command << "\n";
  os << "  attempt       : restart " << c.restart << " of at most " << c.max_restarts << "\n";
  os << "  the others    : " << others(group, failed) << "\n";
  os << error_file_report(c.error_file);
  std::vector<std::string> tail = w.output->tail();
  if (tail.empty()) os << "  output        : (rank " << w.rank << " wrote nothing)\n";
  if (!tail.empty())
    os << "  last " << tail.size() << " lines of rank " << w.rank << "'s output:\n";
  for (const std::string& line : tail) os << "    | " << line << "\n";
  for (int stream : {1, 2})
    if (!w.output->file_path(stream).empty())
      os << "  log           : " << w.output->file_path(stream) << "\n";
  os << "spmdrun: ================================================================\n";
  return os.str();
}

}  // namespace spmd::launcher
