// spmd_test_worker: the program the launcher tests run under spmdrun. Each
// flag makes it do one thing a real worker might, so a test can check how
// the launcher reacts:
//
//   --print-env            print "ENV NAME=value" for the launcher's variables
//   --store                rendezvous through env://, count the ranks with add()
//                          and print "STORE OK ranks=N attempt=R"
//   --bind-master          rank 0 listens on MASTER_PORT, as PyTorch's rank 0
//                          does, and prints "BOUND MASTER_PORT=P" (it must be free)
//   --stdout-lines N / --stderr-lines N   print numbered lines
//   --fail-rank R --exit-code C           rank R exits with code C
//   --signal-rank R --signal NAME         rank R kills itself (KILL, SEGV, ...)
//   --fail-until-restart K                rank 0 exits 1 while the restart count < K
//   --print-pid            print "PID <pid>" (the tests then watch the process table)
//   --report-signals       on SIGINT/SIGTERM print "GOT <SIGNAME>" and exit 0
//   --ignore-sigterm       ignore SIGTERM (the launcher must SIGKILL it)
//   --sleep S              sleep S seconds before exiting
//   --tag T                ignored: a marker for finding this process by its command line
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "runtime/process.h"
#include "runtime/rendezvous.h"
#include "runtime/socket.h"

namespace {

struct Flags {
  bool print_env = false, store = false, print_pid = false, report_signals = false;
  bool ignore_sigterm = false, bind_master = false;
  int stdout_lines = 0, stderr_lines = 0;
  int fail_rank = -1, exit_code = 1, signal_rank = -1, fail_until_restart = 0;
  std::string signal_name = "KILL";
  double sleep_s = 0;
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--print-env")
      f.print_env = true;
    else if (a == "--store")
      f.store = true;
    else if (a == "--bind-master")
      f.bind_master = true;
    else if (a == "--print-pid")
      f.print_pid = true;
    else if (a == "--report-signals")
      f.report_signals = true;
    else if (a == "--ignore-sigterm")
      f.ignore_sigterm = true;
    else if (a == "--stdout-lines")
      f.stdout_lines = std::stoi(next());
    else if (a == "--stderr-lines")
      f.stderr_lines = std::stoi(next());
    else if (a == "--fail-rank")
      f.fail_rank = std::stoi(next());
    else if (a == "--exit-code")
      f.exit_code = std::stoi(next());
    else if (a == "--signal-rank")
      f.signal_rank = std::stoi(next());
    else if (a == "--signal")
      f.signal_name = next();
    else if (a == "--fail-until-restart")
      f.fail_until_restart = std::stoi(next());
    else if (a == "--sleep")
      f.sleep_s = std::stod(next());
    else if (a == "--tag")
      next();
    else {
      std::fprintf(stderr, "spmd_test_worker: unknown flag %s\n", a.c_str());
      std::exit(64);
    }
  }
  return f;
}

void print_env() {
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                           "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR",
                           "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                           "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS", "SPMD_AGENT_STORE"}) {
    const char* v = std::getenv(name);
    std::printf("ENV %s=%s\n", name, v ? v : "<unset>");
  }
}

void use_store(int rank) {
  spmd::Rendezvous rv = spmd::rendezvous("env://", -1, -1, std::chrono::seconds(20));
  rv.store->add("ranks", 1);
  spmd::store_barrier(*rv.store, "counted", rank, rv.world_size, std::chrono::seconds(20));
  std::printf("STORE OK ranks=%lld attempt=%d\n", static_cast<long long>(rv.store->add("ranks", 0)),
              env_int("TORCHELASTIC_RESTART_COUNT"));
}

void bind_master_port() {
  const int port = env_int("MASTER_PORT");
  spmd::net::Socket listener = spmd::net::listen_tcp("", static_cast<uint16_t>(port));
  std::printf("BOUND MASTER_PORT=%d\n", port);
}

void on_signal(int sig) {
  char line[64];
  int n = std::snprintf(line, sizeof line, "GOT SIG%s\n", sigabbrev_np(sig));
  (void)!::write(1, line, static_cast<size_t>(n));
  ::_exit(0);
}

int signal_number(const std::string& name) {
  for (int sig = 1; sig < NSIG; ++sig)
    if (const char* abbrev = sigabbrev_np(sig); abbrev && name == abbrev) return sig;
  return SIGKILL;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f = parse(argc, argv);
  int rank = env_int("RANK");
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a pipe: flush each line, as a terminal would
  if (f.report_signals) {
    ::signal(SIGINT, on_signal);
    ::signal(SIGTERM, on_signal);
  }
  if (f.ignore_sigterm) ::signal(SIGTERM, SIG_IGN);
  if (f.print_pid) std::printf("PID %d\n", static_cast<int>(::getpid()));
  if (f.print_env) print_env();
  if (f.store) use_store(rank);
  if (f.bind_master && rank == 0) bind_master_port();
  for (int i = 0; i < f.stdout_lines; ++i) std::printf("out line %d from rank %d\n", i, rank);
  for (int i = 0; i < f.stderr_lines; ++i)
    std::fprintf(stderr, "err line %d from rank %d\n", i, rank);
  std::fflush(nullptr);
  if (rank == 0 && env_int("TORCHELASTIC_RESTART_COUNT") < f.fail_until_restart) {
    std::printf("failing on purpose at restart %d\n", env_int("TORCHELASTIC_RESTART_COUNT"));
    return 1;
  }
  if (rank == f.fail_rank) return f.exit_code;
  if (rank == f.signal_rank) {
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);  // a test's SIGSEGV should not write a core file
    ::raise(signal_number(f.signal_name));
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(f.sleep_s));
  return 0;
}
