// spmdrun: start the workers of an SPMD job, as torchrun does (the chapter's
// 16.1.3). `spmdrun --nproc-per-node 4 ./train --config x.toml` starts four
// copies of ./train, tells each its rank through the environment, hosts the
// store they rendezvous on, prefixes their output with their rank, and stops
// them all when one fails. docs/launcher.md explains each behaviour.
//
// Exit codes: 0 success; 1 a worker failed (no restart left) or the
// rendezvous failed; 2 a usage error (bad flag, missing program);
// 128 + N when the launcher got signal N (forwarded to the workers).
#include <iostream>

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
    std::cerr << "spmdrun: interrupted by " << signal_name(i.signal) << "\n";
    return 128 + i.signal;
  } catch (const InvalidArgument& e) {
    std::cerr << "spmdrun: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "spmdrun: error: " << e.what() << "\n";
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
  const int code = run(*parsed.options, signals);
  // The workers' last lines, for a second at most: a console that does not
  // read must not keep the launcher from exiting.
  ConsoleWriter::instance().drain(std::chrono::seconds(1));
  return code;
}
