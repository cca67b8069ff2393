// spmdrun: start the workers of an SPMD job, as torchrun does (the chapter's
// 16.1.3). `spmdrun --nproc-per-node 4 ./train --config x.toml` starts four
// copies of ./train, tells each its rank through the environment, hosts the
// store they rendezvous on, prefixes their output with their rank, and stops
// them all when one fails. docs/launcher.md explains each behaviour.
//
// Exit codes: 0 success; 1 a worker failed (no restart left) or the
// rendezvous failed; 2 a usage error (bad flag, missing program);
// 128 + N when the launcher got signal N (forwarded to the workers).

#include "launcher/agent.h"
#include "launcher/console_writer.h"
#include "launcher/options.h"
#include "launcher/signals.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/process.h"

namespace {

int run(const spmd::launcher::LaunchOptions& options, spmd::launcher::SignalChannel& signals) {
  using namespace spmd;
  using namespace spmd::launcher;
  try {
    Agent agent(options, signals);
    return agent.run();
  } catch (const Interrupted& i) {
    ConsoleWriter::say(str_cat("spmdrun: interrupted by ", signal_name(i.signal), "\n"));
    return 128 + i.signal;
  } catch (const InvalidArgument& e) {
    ConsoleWriter::say(str_cat("spmdrun: error: ", e.what(), "\n"));
    return 2;
  } catch (const std::exception& e) {
    ConsoleWriter::say(str_cat("spmdrun: error: ", e.what(), "\n"));
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace spmd;
  using namespace spmd::launcher;
  SignalChannel signals;  // first: every later thread inherits the blocked signals
  set_log_prefix("[spmdrun]");
  ParseOutcome parsed = parse_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  // From here on, everything the launcher writes to its console goes through
  // one queue that a thread of its own writes out (launcher/console_writer.h).
  set_log_sink([](std::string line) { ConsoleWriter::say(std::move(line)); });
  const int code = run(*parsed.options, signals);
  // The last lines, for a second at most: a console that does not read must
  // not keep the launcher from exiting.
  ConsoleWriter::instance().drain(std::chrono::seconds(1));
  return code;
}
