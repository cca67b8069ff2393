// Fault injection (fault.h).
#include "runtime/fault.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "runtime/error.h"

namespace spmd {
namespace {

struct FaultPlan {
  bool armed = false, list = false, parent = false;
  std::string prefix;  // "" matches any point
  long at = 0;         // the matching point to kill at, from 1
  long seen = 0;       // matching points passed so far
  long passed = 0;     // all points passed (for the list)
};

// SPMD_FAULT_AT, SPMD_FAULT_RANK and SPMD_FAULT_LIST, read once.
FaultPlan read_plan() {
  FaultPlan p;
  const char* list = std::getenv("SPMD_FAULT_LIST");
  p.list = list != nullptr && std::string(list) == "1";
  const char* at = std::getenv("SPMD_FAULT_AT");
  if (at == nullptr || *at == '\0') return p;
  const char* rank = std::getenv("SPMD_FAULT_RANK");
  const char* mine = std::getenv("RANK");
  if (rank != nullptr && *rank != '\0' && (mine == nullptr || std::string(rank) != mine)) return p;
  const std::string spec = at;
  const size_t colon = spec.find(':');
  SPMD_CHECK(colon != std::string::npos, "SPMD_FAULT_AT=", spec,
             ": expected <name>:<n>[:parent] (a point's name or *, and a count from 1)");
  p.prefix = spec.substr(0, colon);
  if (p.prefix == "*") p.prefix.clear();
  std::string rest = spec.substr(colon + 1);
  const size_t colon2 = rest.find(':');
  if (colon2 != std::string::npos) {
    SPMD_CHECK(rest.substr(colon2 + 1) == "parent", "SPMD_FAULT_AT=", spec,
               ": the action after the count must be 'parent' (or nothing: this process)");
    p.parent = true;
    rest = rest.substr(0, colon2);
  }
  char* end = nullptr;
  p.at = std::strtol(rest.c_str(), &end, 10);
  SPMD_CHECK(!rest.empty() && *end == '\0' && p.at >= 1, "SPMD_FAULT_AT=", spec, ": the count '",
             rest, "' must be a whole number from 1");
  p.armed = true;
  return p;
}

}  // namespace

void fault_point(const char* name) {
  static FaultPlan plan = read_plan();
  if (!plan.armed && !plan.list) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  ++plan.passed;
  if (plan.list) std::fprintf(stderr, "fault point %ld: %s\n", plan.passed, name);
  if (!plan.armed || std::string(name).rfind(plan.prefix, 0) != 0) return;
  if (++plan.seen != plan.at) return;
  std::fprintf(stderr, "SPMD_FAULT_AT: SIGKILL to %s at %s (point %ld)\n",
               plan.parent ? "the parent" : "this process", name, plan.seen);
  std::fflush(stderr);
  if (plan.parent) {
    ::kill(::getppid(), SIGKILL);
    ::sleep(10);  // the parent's death kills this process (PR_SET_PDEATHSIG); else, below
  }
  ::kill(::getpid(), SIGKILL);
}

}  // namespace spmd
