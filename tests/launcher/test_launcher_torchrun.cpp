// torchrun command lines pasted into spmdrun, run as real processes: a .py
// PROGRAM runs under python3 -u, -m runs a module, --no-python and `--`,
// PET_* defaults for flags (the command line wins), --rdzv-conf, --nnodes
// MIN:MAX, --nproc-per-node gpu from CUDA_VISIBLE_DEVICES, and the
// TORCHELASTIC_ERROR_FILE a failing Python worker writes, read back into the
// failure report.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "launch_helpers.h"

using namespace spmd::test;
namespace fs = std::filesystem;

namespace {

// A folder of its own for the test's Python files, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "spmdrun_torchrun_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

// Prints the worker's rank and world, then its command line as the kernel
// has it (python3's own flags included), then its arguments.
const char* kShowScript =
    "import os, sys\n"
    "cmd = open('/proc/self/cmdline').read().split('\\0')[:-1]\n"
    "print('PY rank=%s world=%s cmd=%s args=%s' % (os.environ['RANK'], os.environ['WORLD_SIZE'],\n"
    "      ' '.join(os.path.basename(c) for c in cmd[:3]), ','.join(sys.argv[1:])))\n";

}  // namespace

TEST_CASE("spmdrun: a .py program runs as python3 -u, -m runs a module", "[launcher]") {
  TempDir dir;
  std::string script = dir.write("show.py", kShowScript);
  RunResult py = run_spmdrun({"--standalone", "--nproc-per-node", "2", script, "a", "b"}, 30s);
  INFO(py.out << py.err);
  CHECK(py.exit_code == 0);
  CHECK(count(py.out, "PY rank=") == 2);
  CHECK(py.out.find("[rank1]: PY rank=1 world=2 cmd=python3 -u show.py args=a,b") !=
        std::string::npos);

  // `--` before the program, torchrun's underscore spelling, and -m with the
  // module found through PYTHONPATH.
  dir.write("pkg/__init__.py", "");
  dir.write("pkg/show.py", kShowScript);
  RunResult mod =
      run_spmdrun({"--standalone", "--nproc_per_node=2", "-m", "--", "pkg.show", "--lr", "0.1"},
                  30s, {"PYTHONPATH=" + dir.path.string()});
  INFO(mod.out << mod.err);
  CHECK(mod.exit_code == 0);
  CHECK(mod.out.find("[rank0]: PY rank=0 world=2 cmd=python3 -u -m args=--lr,0.1") !=
        std::string::npos);
  CHECK(mod.out.find("[rank1]: PY rank=1 world=2") != std::string::npos);

  // --no-python executes the program itself: a .py file without the execute
  // bit cannot be, and says so; any other program runs as before.
  RunResult direct = run_spmdrun({"--standalone", "--no-python", script}, 30s);
  CHECK(direct.exit_code == 2);
  CHECK(direct.err.find("is not an executable file") != std::string::npos);
  RunResult echo = run_spmdrun({"--standalone", "--no-python", "--", "echo", "hi"}, 30s);
  CHECK(echo.exit_code == 0);
  CHECK(echo.out.find("[rank0]: hi") != std::string::npos);
}

TEST_CASE("spmdrun: PET_* variables are flag defaults; the command line wins", "[launcher]") {
  RunResult pet = run_spmdrun({"--standalone", "echo", "x"}, 30s, {"PET_NPROC_PER_NODE=2"});
  CHECK(pet.exit_code == 0);
  CHECK(count(pet.out, ": x") == 2);
  RunResult flag = run_spmdrun({"--standalone", "--nproc-per-node", "3", "echo", "x"}, 30s,
                               {"PET_NPROC_PER_NODE=2"});
  CHECK(count(flag.out, ": x") == 3);
  RunResult standalone = run_spmdrun({"echo", "x"}, 30s, {"PET_STANDALONE=1", "PET_NNODES=1:1"});
  CHECK(standalone.exit_code == 0);
  CHECK(count(standalone.out, ": x") == 1);
  RunResult bad = run_spmdrun({"--standalone", "echo"}, 30s, {"PET_NNODES=1:2"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--nnodes 1:2: elastic ranges are not supported") != std::string::npos);
}

TEST_CASE("spmdrun: --rdzv-conf, --nnodes MIN:MAX and --nproc-per-node gpu", "[launcher]") {
  RunResult conf = run_spmdrun(
      {"--standalone", "--rdzv-conf", "join_timeout=5,read_timeout=20,close_timeout=1", "true"},
      30s);
  CHECK(conf.exit_code == 0);
  // join_timeout bounds the rendezvous: a node that waits for a missing
  // other node gives up after it.
  RunResult join =
      run_spmdrun({"--nnodes", "2", "--node-rank", "0", "--master-port",
                   std::to_string(free_port()), "--rdzv-conf", "join_timeout=1", "true"},
                  30s);
  CHECK(join.exit_code == 1);
  CHECK(join.err.find("within 1 s") != std::string::npos);
  CHECK(join.seconds < 10);
  for (auto [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--rdzv-conf", "join_timeout=5,foo=1", "true"}, "unknown key 'foo'"},
           {{"--rdzv-conf", "read_timeout=soon", "true"}, "read_timeout=soon: not a positive"},
           {{"--rdzv-conf", "join_timeout", "true"}, "'join_timeout' is not key=value"},
           {{"--nnodes", "1:2", "true"}, "without elastic membership"},
           {{"-m", "--no-python", "x"}, "give one of them"}}) {
    RunResult r = run_spmdrun(args, 10s);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(message) != std::string::npos);
  }
  RunResult fixed = run_spmdrun({"--nnodes", "1:1", "--standalone", "true"}, 30s);
  CHECK(fixed.exit_code == 0);
  RunResult help = run_spmdrun({"--help"}, 10s);
  for (const char* text : {"--rdzv-conf", "--no-python", "--module", "PET_NPROC_PER_NODE",
                           "python3 -u PROGRAM", "[--] PROGRAM"})
    CHECK(help.out.find(text) != std::string::npos);

  // The GPUs are CUDA_VISIBLE_DEVICES's entries when it is set (no GPU needed
  // to count them), and none is an error that names the variable.
  RunResult gpus = run_spmdrun({"--standalone", "--nproc-per-node", "gpu", "echo", "g"}, 30s,
                               {"CUDA_VISIBLE_DEVICES=0,1"});
  CHECK(gpus.exit_code == 0);
  CHECK(count(gpus.out, ": g") == 2);
  RunResult none = run_spmdrun({"--standalone", "--nproc-per-node", "gpu", "echo", "g"}, 30s,
                               {"CUDA_VISIBLE_DEVICES=-1"});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("no GPU found (CUDA_VISIBLE_DEVICES='-1' names none)") != std::string::npos);
}

TEST_CASE("spmdrun: a worker's TORCHELASTIC_ERROR_FILE is in the failure report", "[launcher]") {
  TempDir dir;
  // Rank 1 writes what torchrun's @record writes for an uncaught exception,
  // by its documented format, and fails, once rank 0 has printed its path (a
  // marker file says so); rank 0 waits to be stopped.
  std::string script = dir.write(
      "fail.py",
      "import json, os, sys, time, traceback\n"
      "path = os.environ['TORCHELASTIC_ERROR_FILE']\n"
      "marker = os.path.join(sys.argv[1], 'rank0_printed')\n"
      "print('ERRFILE', path)\n"
      "if os.environ['RANK'] == '0':\n"
      "    open(marker, 'w').close()\n"
      "    time.sleep(30)\n"
      "    sys.exit(0)\n"
      "deadline = time.time() + 20\n"
      "while not os.path.exists(marker) and time.time() < deadline:\n"
      "    time.sleep(0.01)\n"
      "try:\n"
      "    raise ValueError('loss is nan at step 7')\n"
      "except ValueError as e:\n"
      "    with open(path, 'w') as f:\n"
      "        json.dump({'message': {'message': 'ValueError: ' + str(e), 'extraInfo': {\n"
      "            'py_callstack': traceback.format_exc(), 'timestamp': str(int(time.time()))}}}, "
      "f)\n"
      "    sys.exit(3)\n");
  TempDir logs;
  RunResult r = run_spmdrun({"--standalone", "--nproc-per-node", "2", "--log-dir",
                             logs.path.string(), "--rdzv-id", "job", script, dir.path.string()},
                            30s);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  // One file per worker, under the run's log folder.
  std::string expected0 = (logs.path / "job/attempt_0/rank_0/error.json").string();
  std::string expected1 = (logs.path / "job/attempt_0/rank_1/error.json").string();
  CHECK(r.out.find("[rank0]: ERRFILE " + expected0) != std::string::npos);
  CHECK(r.out.find("[rank1]: ERRFILE " + expected1) != std::string::npos);
  CHECK(r.err.find("error file    : " + expected1) != std::string::npos);
  CHECK(r.err.find("error         : ValueError: loss is nan at step 7") != std::string::npos);
  CHECK(r.err.find("its call stack (from the error file):") != std::string::npos);
  CHECK(r.err.find("| Traceback (most recent call last):") != std::string::npos);

  // A worker that wrote no file: no error-file lines; without --log-dir the
  // files lie in a folder spmdrun removes at the end when no worker wrote one.
  RunResult plain =
      run_spmdrun({"--standalone", "sh", "-c", "echo $TORCHELASTIC_ERROR_FILE; exit 4"}, 30s);
  CHECK(plain.exit_code == 1);
  CHECK(plain.err.find("error file") == std::string::npos);
  std::string file = line_after(plain.out, "[rank0]: ");
  CHECK(file.find("/attempt_0/rank_0/error.json") != std::string::npos);
  CHECK_FALSE(fs::exists(fs::path(file).parent_path()));
}

TEST_CASE("spmdrun: a launcher killed by SIGKILL leaves no error folder behind for long",
          "[launcher]") {
  // It cannot remove its folder itself; the next launcher removes it (its
  // pid is gone and it holds no file).
  LauncherProcess killed(
      {"--standalone", "sh", "-c", "echo FILE $TORCHELASTIC_ERROR_FILE; exec sleep 60"});
  REQUIRE(killed.wait_for_output("FILE ", 20s));
  REQUIRE(killed.wait_for_output("error.json", 20s));
  std::string file = line_after(killed.out(), "FILE ");
  file = file.substr(0, file.find("error.json") + 10);
  const fs::path folder = fs::path(file).parent_path().parent_path().parent_path();
  CHECK(folder.filename().string().rfind("spmdrun_errors_", 0) == 0);
  CHECK(fs::exists(folder));
  killed.send_signal(SIGKILL);
  REQUIRE(killed.wait_exit(20s));
  CHECK(fs::exists(folder));
  RunResult next = run_spmdrun({"--standalone", "true"}, 30s);
  CHECK(next.exit_code == 0);
  CHECK_FALSE(fs::exists(folder));
}
