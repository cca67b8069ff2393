// Writing the failure report.
#include "launcher/failure_report.h"

#include <signal.h>
#include <sys/wait.h>

#include <ctime>
#include <sstream>

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

}  // namespace

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
