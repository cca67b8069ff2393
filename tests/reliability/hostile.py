#!/usr/bin/env python3
"""Hostile but fair input to spmd's binaries, as a user would give it.

Each case starts real processes (spmdrun, the examples, spmd-bench) with a
bad flag, a bad file, an exhausted limit or an awkward signal, and checks
three things: the exit status, the text of the message, and that no process
of the case is left behind (every process of a case carries a marker in its
environment, and /proc is searched for it afterwards). Every case is bounded
in time; the memory cases run under `prlimit --as` and must end with a
message, not a kill.

  hostile.py BUILD_DIR SOURCE_DIR GROUP
      GROUP: flags, files, launcher, ranks, lifetime, habits, hang, train
"""
import json
import os
import re
import select
import shutil
import socket
import signal
import subprocess
import sys
import tempfile
import time
import uuid

BUILD, SOURCE, GROUP = sys.argv[1], sys.argv[2], sys.argv[3]
SPMDRUN = os.path.join(BUILD, "launcher", "spmdrun")
EX = os.path.join(BUILD, "examples")
BENCH = os.path.join(BUILD, "bench", "spmd-bench")
TEXT = os.path.join(SOURCE, "docs", "architecture.md")
PY = "/usr/bin/python3"
FAILURES = []


def processes_with(marker):
    """Pids whose environment holds the case's marker."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


class Case:
    """One run: start it, let `act` poke it, collect status and output."""

    def __init__(self, name, argv, env=None, limit_s=20, prlimit=None):
        self.name, self.argv, self.limit_s = name, argv, limit_s
        self.marker = "SPMD_HOSTILE_CASE=" + uuid.uuid4().hex
        self.env = dict(os.environ, **(env or {}))
        self.env["SPMD_HOSTILE_CASE"] = self.marker.split("=", 1)[1]
        self.env.setdefault("OMP_NUM_THREADS", "1")
        if prlimit:
            self.argv = ["prlimit"] + prlimit + ["--"] + argv

    def start(self, **kw):
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, env=self.env, start_new_session=True,
                                     stdin=subprocess.DEVNULL, **kw)
        return self.proc

    def run(self):
        p = self.start(stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = p.communicate(timeout=self.limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            self.fail(f"still running after {self.limit_s} s")
        return self.finish(p.returncode, out.decode(errors="replace"))

    def finish(self, code, out):
        self.code, self.out = code, out
        self.seconds = time.monotonic() - self.started
        deadline = time.monotonic() + 3  # the parent-death signal takes a moment
        left = processes_with(self.marker)
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = processes_with(self.marker)
        if left:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.fail(f"processes left behind: {left}")
        return self

    def fail(self, why):
        FAILURES.append(f"{self.name}: {why}")
        print(f"FAIL {self.name}: {why}", flush=True)

    def expect(self, code=None, says=(), not_says=(), signal_free=True, within_s=None):
        if code is not None and self.code != code:
            self.fail(f"exit status {self.code}, wanted {code}\n{self.out[-2000:]}")
        if signal_free and self.code is not None and self.code < 0:
            self.fail(f"killed by signal {-self.code}\n{self.out[-2000:]}")
        if self.code == 0 and code is None:
            self.fail(f"exit status 0 for a bad input\n{self.out[-2000:]}")
        for text in [says] if isinstance(says, str) else says:
            if not re.search(text, self.out):
                self.fail(f"output lacks /{text}/:\n{self.out[-2000:]}")
        for text in [not_says] if isinstance(not_says, str) else not_says:
            if re.search(text, self.out):
                self.fail(f"output has /{text}/:\n{self.out[-2000:]}")
        if within_s is not None and self.seconds > within_s:
            self.fail(f"took {self.seconds:.1f} s, more than {within_s} s")
        print(f"ok   {self.name} ({self.seconds:.2f} s, exit {self.code})", flush=True)


def flag(binary, args, says, **kw):
    Case(f"{os.path.basename(binary)} {' '.join(args)}", [binary] + args, **kw).run().expect(
        says=says, not_says=["not in range", "1797693"], within_s=5)


# ---- numeric flags: zero, negative, nan, inf, fractions, absurd ----

def group_flags():
    single = os.path.join(EX, "01_train_single")
    ddp = os.path.join(EX, "05_ddp")
    d = ["--data", TEXT]
    flag(single, d + ["--steps", "0"], r"--steps: must be at least 1, got 0")
    flag(single, d + ["--steps", "-3"], r"--steps: must be at least 1, got -3")
    flag(single, d + ["--steps", "1.5"], r"--steps: must be a whole number, got '1.5'")
    flag(single, d + ["--lr", "nan"], r"--lr: must be a number, got nan")
    flag(single, d + ["--lr", "inf"], r"--lr: must be finite, got inf")
    flag(single, d + ["--lr", "0"], r"--lr: must be positive, got 0")
    flag(single, d + ["--threads", "100000"], r"--threads: must be at most 1024, got 100000")
    flag(single, d + ["--grad-clip", "-1"], r"--grad-clip: must be at least 0, got -1")
    flag(single, d + ["--eval-batches", "0"], r"--eval-batches: must be at least 1, got 0")
    flag(ddp, d + ["--eval-batches", "0"], r"--eval-batches: must be at least 1, got 0")
    flag(ddp, d + ["--bucket-cap-mb", "inf"], r"--bucket-cap-mb: must be finite, got inf")
    flag(BENCH, ["all_reduce", "-n", "0"], r"--iters: must be at least 1, got 0")
    flag(BENCH, ["all_reduce", "-T", "inf"], r"--timeout: must be a whole number, got 'inf'")
    flag(BENCH, ["all_reduce", "-f", "nan"], r"--stepfactor: must be a number, got nan")
    flag(BENCH, ["all_reduce", "-b", "0", "-f", "2"], r"-b 0 with -f 2 never grows")
    flag(SPMDRUN, ["--rdzv-timeout", "inf", "--standalone", "true"],
         r"--rdzv-timeout: must be finite, got inf \(seconds")
    flag(SPMDRUN, ["--rdzv-timeout", "0", "--standalone", "true"],
         r"--rdzv-timeout: must be positive, got 0")
    flag(SPMDRUN, ["--stop-grace", "nan", "--standalone", "true"],
         r"--stop-grace: must be a number, got nan")
    flag(SPMDRUN, ["--max-restarts", "-1", "--standalone", "true"],
         r"--max-restarts: must be at least 0, got -1")
    flag(SPMDRUN, ["--nproc-per-node", "0", "--standalone", "true"],
         r"--nproc-per-node must be at least 1, not 0")
    # A sweep that measures nothing is an error, not an empty table.
    Case("spmd-bench -b 1 -e 3 (no element per rank)",
         [SPMDRUN, "--standalone", "--nproc-per-node", "2", BENCH, "all_reduce", "-b", "1",
          "-e", "3"]).run().expect(says=r"nothing to measure", within_s=15)
    # The process-group timeout from the environment, checked like a flag.
    Case("SPMD_PG_TIMEOUT_S=abc", [SPMDRUN, "--standalone", "--nproc-per-node", "2", BENCH,
                                   "all_reduce", "-b", "8", "-e", "8"],
         env={"SPMD_PG_TIMEOUT_S": "abc"}).run().expect(
        says=r"SPMD_PG_TIMEOUT_S must be a number, got 'abc'", within_s=15)
    # ... and honoured: a rank that never joins is reported after 2 s, not 5 minutes;
    # spmd-bench's -T says the same as a flag.
    late = "if [ $RANK = 1 ]; then sleep 30; else exec {} all_reduce -b 8 -e 8 {}; fi"
    for env, extra in (({"SPMD_PG_TIMEOUT_S": "2"}, ""), ({}, "-T 2")):
        Case(f"a rank that never joins, {env or extra}",
             [SPMDRUN, "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c",
              late.format(BENCH, extra)], env=env).run().expect(
            code=1, says=r"only 1 of 2 ranks arrived within 2000 ms; missing rank\(s\) 1",
            within_s=10)


# ---- files and memory ----

def group_files():
    single = os.path.join(EX, "01_train_single")
    cap = ["--as=4294967296"]  # 4 GiB of address space
    Case("--data /dev/zero", [single, "--data", "/dev/zero"], prlimit=cap).run().expect(
        code=1, says=r"/dev/zero is not a regular file and gave more than .* give a file",
        within_s=15)
    with tempfile.TemporaryDirectory() as d:
        Case("--data DIR", [single, "--data", d]).run().expect(
            code=1, says=re.escape(d) + r" is a directory; give a file", within_s=5)
        # A held-out text too short for one batch: an error, not "val loss 0.0000".
        small = os.path.join(d, "small.txt")
        with open(small, "w") as f:
            f.write("tiny text " * 400)  # 400 held-out bytes: 3 windows of 129, a batch is 4
        Case("05_ddp with no held-out batch",
             [SPMDRUN, "--standalone", "--nproc-per-node", "2", os.path.join(EX, "05_ddp"),
              "--data", small, "--steps", "2", "--batch", "4"], limit_s=60).run().expect(
            code=1, says=r"the held-out text is shorter than one batch of 4 x 129 tokens",
            not_says=r"val loss 0\.0000", within_s=60)
    Case("--data missing", [single, "--data", "/nonexistent/text"]).run().expect(
        code=1, says=r"/nonexistent/text: No such file or directory", within_s=5)
    Case("--batch 100000", [single, "--data", TEXT, "--batch", "100000"], prlimit=cap).run().expect(
        code=1, says=r"--batch 100000 .* needs about [0-9.]+ GiB, but only [0-9.]+ [GM]iB can be "
                     r"allocated \(RLIMIT_AS", within_s=15)
    Case("--batch 100000 uncapped", [single, "--data", TEXT, "--batch", "100000"]).run().expect(
        code=1, says=r"needs about [0-9.]+ GiB, but only", within_s=15)
    tokenize = os.path.join(BUILD, "train", "spmd-tokenize")
    Case("spmd-tokenize --input /dev/zero",
         [tokenize, "--input", "/dev/zero", "--vocab-size", "300", "--out", "/tmp/spmd_hostile_tok"],
         prlimit=cap).run().expect(code=1, says=r"--input /dev/zero is not a regular file", within_s=30)
    Case("spmd-tokenize --input DIR",
         [tokenize, "--input", SOURCE, "--vocab-size", "300", "--out", "/tmp/spmd_hostile_tok"]
         ).run().expect(code=1, says=r"--input .* is a directory", within_s=5)
    Case("spmd-tokenize --vocab-size 100",
         [tokenize, "--input", TEXT, "--vocab-size", "100", "--out", "/tmp/spmd_hostile_tok"]
         ).run().expect(code=1, says=r"--vocab-size must be an integer in \[256, 65536\]",
                        within_s=5)
    # Every example that trains refuses a batch that cannot fit, on 2 ranks.
    for example, extra in [("06_model_parallel", []), ("07_pipeline", []),
                           ("08_tensor_parallel", []), ("09_device_mesh", ["--dp", "1", "--tp", "2"]),
                           ("10_fsdp", []), ("11_context_parallel", []),
                           ("12_expert_parallel", [])]:
        Case(f"{example} --batch 10000000",
             [SPMDRUN, "--standalone", "--nproc-per-node", "2", os.path.join(EX, example),
              "--data", TEXT, "--batch", "10000000"] + extra, limit_s=60).run().expect(
            code=1, says=r"training with --batch 10000000 .*needs about [0-9.]+ [GT]iB, but only",
            within_s=60)


# ---- the launcher: limits, signals, its own output ----

def group_launcher():
    Case("--nproc-per-node 10000 at ulimit -n 1024",
         [SPMDRUN, "--standalone", "--nproc-per-node", "10000", "true"],
         prlimit=["--nofile=1024"]).run().expect(
        code=2, says=r"--nproc-per-node 10000 needs about \d+ open files .* the limit is 1024 "
                     r"\(ulimit -n\)", within_s=3)
    # The process limit binds users other than root: as root, checked as `nobody`.
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] \
        if os.getuid() == 0 else []
    Case("--nproc-per-node 300 at ulimit -u 100",
         nobody + [SPMDRUN, "--standalone", "--nproc-per-node", "300", "true"],
         prlimit=["--nproc=100"]).run().expect(
        code=2, says=r"starts 300 processes, but this user may run at most 100 \(ulimit -u\) "
                     r"and runs \d+ already", within_s=3)

    # stdout (then stderr) piped to a reader that never reads: SIGTERM still
    # stops the job, and the launcher's own messages do not block it either.
    for stream, worker in (("stdout", ["yes"]), ("stderr", ["/bin/sh", "-c", "yes >&2"])):
        c = Case(f"SIGTERM with a {stream} that does not read",
                 [SPMDRUN, "--standalone", "--nproc-per-node", "2", "--stop-grace", "2"] + worker,
                 env={"SPMD_LOG_LEVEL": "info"})
        r, w = os.pipe()
        kw = {"stdout": w, "stderr": subprocess.PIPE} if stream == "stdout" else \
            {"stdout": subprocess.PIPE, "stderr": w}
        p = c.start(**kw)
        os.close(w)
        time.sleep(1.5)  # the pipe (64 KiB) is long full by now
        p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            c.fail(f"spmdrun ignored SIGTERM for 10 s while its {stream} was full")
        os.close(r)
        c.finish(p.returncode, (err or out or b"").decode(errors="replace")).expect(
            code=128 + signal.SIGTERM, within_s=14)

    # A line over 64 KiB reaches the log file whole.
    with tempfile.TemporaryDirectory() as d:
        c = Case("a 200 KB line", [SPMDRUN, "--standalone", "--nproc-per-node", "1",
                                   "--log-dir", d, "--redirects", "3", "--run-id", "long",
                                   PY, "-c", "print('x' * 200000); print('end')"]).run()
        c.expect(code=0, within_s=15)
        with open(os.path.join(d, "long", "attempt_0", "rank_0", "stdout.log")) as f:
            lines = f.read().split("\n")
        if lines[:2] != ["x" * 200000, "end"]:
            c.fail(f"log lines of {[len(x) for x in lines]} characters, wanted [200000, 3, 0]")

    # A second SIGINT cuts the grace short, and the message says how long it was.
    ignore = ("import signal, time\n"
              "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "print('ready', flush=True)\ntime.sleep(60)\n")
    c = Case("second SIGINT", [SPMDRUN, "--standalone", "--nproc-per-node", "1",
                               "--stop-grace", "30", PY, "-c", ignore])
    p = c.start(stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = b""
    while b"ready" not in out:  # the worker is up, its handlers set (EOF: it never came)
        chunk = p.stdout.read1(4096)
        if not chunk:
            break
        out += chunk
    p.send_signal(signal.SIGINT)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    try:
        rest, _ = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        rest, _ = p.communicate()
    c.finish(p.returncode, (out + rest).decode(errors="replace"))
    c.expect(code=128 + signal.SIGINT, says=r"still running after \d+ ms \(asked again to stop\)",
             within_s=8)
    m = re.search(r"still running after (\d+) ms", c.out)
    if m and not 300 <= int(m.group(1)) <= 5000:
        c.fail(f"says {m.group(1)} ms for about 500 ms")

    store_out_of_descriptors()


def store_out_of_descriptors():
    """A client holds more idle connections to the launcher's store than the
    launcher has descriptors: the store backs off (no spinning core), says so
    once, and the job still ends normally once the client lets go."""
    hog = (
        "import os, resource, socket, time\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))\n"
        "host, port = os.environ['SPMD_AGENT_STORE'].rsplit(':', 1)\n"
        "socks = []\n"
        "for _ in range(300):\n"
        "    s = socket.socket(); s.settimeout(5); s.connect((host, int(port))); socks.append(s)\n"
        "def cpu(pid):\n"
        "    f = open(f'/proc/{pid}/stat').read().split(') ')[1].split()\n"
        "    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')\n"
        "a = cpu(os.getppid()); time.sleep(1.5); b = cpu(os.getppid())\n"
        "print(f'launcher cpu {b - a:.2f} s in 1.5 s', flush=True)\n"
        "for s in socks: s.close()\n"
        "time.sleep(0.5)\n")
    c = Case("store at ulimit -n 128 with 300 idle clients",
             [SPMDRUN, "--standalone", "--nproc-per-node", "1", PY, "-c", hog],
             prlimit=["--nofile=128:4096"]).run()
    c.expect(code=0, says=[r"cannot accept a client \(Too many open files", r"launcher cpu"],
             within_s=20)
    if len(re.findall(r"cannot accept a client", c.out)) != 1:
        c.fail("the out-of-descriptors warning is not said exactly once:\n" + c.out[-2000:])
    m = re.search(r"launcher cpu ([0-9.]+) s", c.out)
    if m and float(m.group(1)) > 0.5:
        c.fail(f"the launcher used {m.group(1)} s of CPU in 1.5 s while out of descriptors")


# ---- nothing outlives the job ----

def read_until(proc, pattern, limit_s, seen=b""):
    """Reads proc's stdout until `pattern` matches what was read (or `limit_s`
    passes, or end-of-file); returns everything read."""
    deadline = time.monotonic() + limit_s
    while not re.search(pattern, seen) and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        seen += chunk
    return seen


def end_of(c, p, out, limit_s=10):
    """Waits for the launcher to end, then judges the case."""
    try:
        rest, _ = p.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        rest, _ = p.communicate()
        c.fail(f"still running {limit_s} s later")
    return c.finish(p.returncode, (out + rest).decode(errors="replace"))


def group_lifetime():
    # spmdrun killed with SIGKILL: its workers die of their parent-death
    # signal, and what they started (a shell running sleep, a sleep) dies with
    # them through the guardian; finish() finds no process of the case left.
    spawner = "sleep 1000 & sh -c 'sleep 1000' & echo ready; wait"
    c = Case("spmdrun killed with SIGKILL, workers with children",
             [SPMDRUN, "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c", spawner])
    p = c.start(stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = read_until(p, rb"ready[\s\S]*ready", 15)
    if out.count(b"ready") < 2:
        c.fail(f"the workers did not start their children:\n{out.decode(errors='replace')}")
    time.sleep(0.2)  # the second shell's sleep is started too
    p.send_signal(signal.SIGKILL)
    end_of(c, p, out).expect(
        code=-signal.SIGKILL, signal_free=False, within_s=20,
        says=r"the launcher is gone; its guardian killed \(SIGKILL\) 2 worker process group")

    # A worker that ends leaving a child in its process group, and one in a
    # session of its own: both are killed with it, and the launcher says so.
    Case("workers that end leaving children",
         [SPMDRUN, "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c",
          "sleep 1000 & setsid sleep 1000 & sleep 0.5; echo started"]).run().expect(
        code=0, within_s=5,
        says=[r"rank [01] \(pid \d+\) ended and left 1 process\(es\) in its process group "
              r"\(\d+ sleep\): killed \(SIGKILL\)",
              r"every worker has ended, but 2 process\(es\) they started outside their process "
              r"groups still ran \(\d+ sleep, \d+ sleep\): killed"])

    # An idle client of the launcher's store (here this script, which is no
    # part of the job) holds the launcher's exit 1 s at most, and is named.
    worker = ("import os, time\n"
              "print('store', os.environ['SPMD_AGENT_STORE'], flush=True)\n"
              "time.sleep(1.0)\nprint('bye', flush=True)\n")
    c = Case("an idle client of the store at the job's end",
             [SPMDRUN, "--standalone", "--nproc-per-node", "1", PY, "-c", worker])
    p = c.start(stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = read_until(p, rb"store \S+:\d+\n", 15)
    m = re.search(rb"store (\S+):(\d+)\n", out)
    client = None
    if m:
        client = socket.create_connection((m.group(1).decode(), int(m.group(2))), timeout=5)
    else:
        c.fail(f"the worker did not say where the store is:\n{out.decode(errors='replace')}")
    out = read_until(p, rb"bye", 15, out)
    last_worker_line = time.monotonic()
    c = end_of(c, p, out)
    held = time.monotonic() - last_worker_line
    if client:
        client.close()
    c.expect(code=0, within_s=10,
             says=r"TCPStoreServer: 1 client still connected 1000 ms after the store began to "
                  r"stop \(127\.0\.0\.1:\d+\); closing its connection")
    if held > 2.5:
        c.fail(f"the launcher exited {held:.1f} s after its worker's last line, not about 1 s")


# ---- habits of neighbouring tools (torchrun, nccl-tests) ----

def group_habits():
    show_role = ["/bin/sh", "-c", "echo role=$ROLE_NAME"]
    Case("spmdrun --role trainer", [SPMDRUN, "--standalone", "--role", "trainer"] + show_role
         ).run().expect(code=0, says=r"\[rank0\]: role=trainer", within_s=5)
    Case("spmdrun without --role", [SPMDRUN, "--standalone"] + show_role).run().expect(
        code=0, says=r"\[rank0\]: role=default", within_s=5)
    Case("spmdrun --role ''", [SPMDRUN, "--standalone", "--role", "", "true"]).run().expect(
        code=2, says=r"--role: give the role a name", within_s=5)
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "hello.py")
        with open(script, "w") as f:
            f.write("import os\nprint('python says', os.environ['RANK'])\n")
        wrapper = os.path.join(d, "mypython")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\necho via mypython \"$@\"\nexec {PY} \"$@\"\n")
        os.chmod(wrapper, 0o755)
        Case("PYTHON_EXEC names the interpreter", [SPMDRUN, "--standalone", script],
             env={"PYTHON_EXEC": wrapper}).run().expect(
            code=0, says=[r"via mypython -u .*hello\.py", r"python says 0"], within_s=10)
        Case("PYTHON_EXEC missing", [SPMDRUN, "--standalone", script],
             env={"PYTHON_EXEC": os.path.join(d, "nopython")}).run().expect(
            code=2, says=r"PYTHON_EXEC='.*nopython': program '.*nopython' not found \(PYTHON_EXEC "
                         r"names the interpreter of \.py programs", within_s=5)
        Case("PYTHON_EXEC not executable", [SPMDRUN, "--standalone", script],
             env={"PYTHON_EXEC": script}).run().expect(
            code=2, says=r"PYTHON_EXEC='.*hello\.py': program .* is not an executable file",
            within_s=5)
    # nccl-tests' flags spmd-bench has no counterpart for: each refused with
    # what it does there, exit 2 (CLI11's generic refusal was exit 109).
    for args, says in ((["-G", "1"], r"-G/--cudagraph 1: nccl-tests captures the timed calls"),
                       (["-C", "1"], r"-C/--report_cputime 1: nccl-tests then reports the host"),
                       (["-p", "1"], r"-p/--parallel_init 1: nccl-tests then initialises"),
                       (["-N", "3"], r"-N/--run_cycles 3: nccl-tests repeats the whole sweep"),
                       (["-u", "1"], r"-u/--unalign 1: nccl-tests offsets its send and receive"),
                       (["-R", "1"], r"-R/--local_register 1: nccl-tests registers its buffers"),
                       (["-S", "1"], r"-S/--report_timestamps 1: nccl-tests adds a timestamp"),
                       (["--stream_null", "1"], r"-y/--stream_null 1: nccl-tests then issues")):
        Case(f"spmd-bench {' '.join(args)}", [BENCH, "all_reduce"] + args).run().expect(
            code=2, says=[says, r": pass -[A-Za-z] [01]$"], within_s=5)


# ---- ranks that must agree ----

def group_ranks():
    ddp = os.path.join(EX, "05_ddp")
    # Two processes given the same rank: refused on both, naming both pids.
    worker = os.path.join(BUILD, "tests", "launcher", "spmd_test_comm_worker")
    Case("two processes say they are rank 0",
         [SPMDRUN, "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c",
          f"RANK=0 exec {worker} --timeout-ms 10000"], limit_s=30).run().expect(
        code=1, says=[r"\[rank0\]: FAILED: barrier 'spmd/init': two processes say they are rank 0 "
                      r"of 2: pid \d+ on host \S+, and pid \d+ on host",
                      r"\[rank1\]: FAILED: barrier 'spmd/init': two processes say they are rank 0"],
        within_s=10)
    # Two jobs pointed at one checkpoint folder: the second refused at start,
    # naming the first (runtime/folder_lock.h).
    train = os.path.join(BUILD, "train", "spmd-train")
    d = tempfile.mkdtemp(prefix="spmd_lock_")
    first = Case("a first job holding a checkpoint folder",
                 [train, "--training.steps", "100000", "--checkpoint.folder",
                  os.path.join(d, "ck"), "--metrics.run_folder", os.path.join(d, "run1")])
    p = first.start(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock = os.path.join(d, "ck", ".spmd-lock")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (os.path.exists(lock) and os.path.getsize(lock)):
        time.sleep(0.05)
    Case("a second job into a held checkpoint folder",
         [train, "--training.steps", "2", "--checkpoint.folder", os.path.join(d, "ck"),
          "--metrics.run_folder", os.path.join(d, "run2")]).run().expect(
        code=1, says=rf'checkpoint.folder = "{re.escape(os.path.join(d, "ck"))}" is in use by '
                     rf"another job \(pid {p.pid} on host \S+ since .*spmd-train", within_s=10)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    first.finish(p.returncode, "")
    # Its holder killed, the folder is free at once.
    Case("the folder of a killed job",
         [train, "--training.steps", "2", "--checkpoint.folder", os.path.join(d, "ck"),
          "--metrics.run_folder", os.path.join(d, "run2")], limit_s=60).run().expect(code=0)
    shutil.rmtree(d, ignore_errors=True)
    # Each rank adds its own --seed: the sampler's shards would overlap.
    script = f'exec {ddp} --data {TEXT} --steps 2 --batch 2 --seed $((RANK + 1))'
    Case("ranks with different --seed",
         [SPMDRUN, "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c", script],
         limit_s=40).run().expect(
        code=1, says=r"DataLoader: the ranks disagree on seed: rank 0 has 1, rank 1 has 2",
        within_s=40)
    # spmd-train: one rank's override changes the config the strategies rely on.
    train = os.path.join(BUILD, "train", "spmd-train")
    config = os.path.join(SOURCE, "configs", "ddp.toml")
    script = f"exec {train} --config {config} --training.steps=1 --training.seed=$((RANK + 1))"
    Case("spmd-train ranks with different configs",
         [SPMDRUN, "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c", script],
         limit_s=40).run().expect(
        code=1, says=r"the config differs between ranks: rank 0 has 'seed = 1', rank 1 has "
                     r"'seed = 2'", within_s=40)
    # A root that is not a rank: refused from the environment, before connecting.
    Case("spmd-bench -r 5 on 2 ranks",
         [SPMDRUN, "--standalone", "--nproc-per-node", "2", BENCH, "all_reduce", "-r", "5",
          "-b", "8", "-e", "8"]).run().expect(
        code=1, says=r"spmd-bench: -r/--root 5 is not a rank of the 2 ranks", within_s=15)


# ---- hangs: a rank frozen or busy while the others wait on it ----

def worker_pid(marker, program, rank, limit_s=30):
    """The pid of `program`'s rank `rank` among the case's processes."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for pid in processes_with(marker):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv0 = f.read().split(b"\0")[0]
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if argv0.endswith(program.encode()) and f"RANK={rank}".encode() in env:
                return pid
        time.sleep(0.05)
    return None


def stop_rank_when(case, program, rank, ready, limit_s, ends_within_s, cwd=None):
    """Runs the case (in `cwd`), SIGSTOPs `program`'s rank `rank` once the
    output matches `ready`, and fails it unless the job ends within
    `ends_within_s` of the stop."""
    with tempfile.TemporaryFile() as out:
        p = case.start(stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
        deadline = time.monotonic() + limit_s
        stopped_at = None
        while p.poll() is None and time.monotonic() < deadline:
            out.seek(0)
            if stopped_at is None and re.search(ready, out.read().decode(errors="replace")):
                pid = worker_pid(case.marker, program, rank)
                if pid:
                    os.kill(pid, signal.SIGSTOP)
                    stopped_at = time.monotonic()
            time.sleep(0.05)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            case.fail(f"still running after {limit_s} s")
        p.wait()
        ended = time.monotonic()
        out.seek(0)
        case.finish(p.returncode, out.read().decode(errors="replace"))
    if stopped_at is None:
        case.fail(f"never saw /{ready}/ to stop rank {rank} at")
    elif ended - stopped_at > ends_within_s:
        case.fail(f"ended {ended - stopped_at:.1f} s after the stop, more than {ends_within_s} s")


def group_hang():
    train = os.path.join(BUILD, "train", "spmd-train")
    fsdp = os.path.join(SOURCE, "configs", "fsdp.toml")
    ddp = os.path.join(SOURCE, "configs", "ddp.toml")
    run = tempfile.mkdtemp(prefix="spmd_hang_")
    many = ["--training.steps", "100000", "--checkpoint.folder", os.path.join(run, "ckpt")]
    # --hang-timeout over the trainer's mesh subgroups: the stopped rank
    # named, SIGKILLed at once (it cannot act on SIGTERM), the job ended
    # within the timeout and 5 s.
    c = Case("spmd-train fsdp, rank 1 stopped, --hang-timeout 3",
             [SPMDRUN, "--standalone", "--nproc-per-node", "2", "--hang-timeout", "3", train,
              "--config", fsdp] + many)
    stop_rank_when(c, "spmd-train", 1, r"step +3 ", 60, ends_within_s=3 + 5, cwd=run)
    c.expect(code=1, says=[r"spmdrun: hang: rank 1's process is stopped \(state T: SIGSTOP",
                           r"rank 0 waits for it in collective #\d+ of group world/split",
                           r"rank 1 \(pid \d+\) is stopped and cannot act on SIGTERM: SIGKILL"],
             not_says=[r"for \d{6,}\.\d s", r"every rank is inside"])
    # No --hang-timeout: the collective's own timeout, whose message must not
    # say that the stopped rank never called what it may have called.
    c = Case("spmd-train ddp, rank 1 stopped, SPMD_PG_TIMEOUT_S=4",
             [SPMDRUN, "--standalone", "--nproc-per-node", "2", train, "--config", ddp] + many,
             env={"SPMD_PG_TIMEOUT_S": "4"})
    stop_rank_when(c, "spmd-train", 1, r"step +3 ", 60, ends_within_s=4 + 5, cwd=run)
    c.expect(code=1, says=[r"timed out after 4000 ms",
                           r"stuck: rank 1 has been silent for \d+\.\d s \(no heartbeat: its "
                           r"process is stopped or frozen, or its host cannot reach the store\)",
                           r"whether it called #\d+ is unknown",
                           # ended at once, not after --stop-grace (the bound above): SIGKILL
                           # for a worker seen stopped, or the kernel ending a stopped process
                           # at a fatal SIGTERM when it has no handler
                           r"the others +: rank 1 was killed by signal (9 \(SIGKILL\)|15 \(SIGTERM\))"],
             not_says=[r"has not called", r"desync:"])
    # spmd-bench in the world group, a queue of collectives deeper than the
    # ledger keeps: true durations, the stopped rank in the headline.
    c = Case("spmd-bench all_reduce, rank 1 stopped, --hang-timeout 3",
             [SPMDRUN, "--standalone", "--nproc-per-node", "2", "--hang-timeout", "3", BENCH,
              "all_reduce", "-b", "1M", "-e", "1M", "-n", "1000000", "-w", "1"])
    stop_rank_when(c, "spmd-bench", 1, r"nThread|#", 30, ends_within_s=3 + 5)
    c.expect(code=1, says=[r"spmdrun: hang: rank 1's process is stopped \(state T",
                           r"rank 0 waits for it in collective #\d+ of group world",
                           r"in the collective for \d\.\d s"],
             not_says=[r"for \d{4,}\.\d s", r"every rank is inside"])
    shutil.rmtree(run, ignore_errors=True)


# ---- spmd-train: values refused before any work, steps that go non-finite ----

def group_train():
    train = os.path.join(BUILD, "train", "spmd-train")
    default = os.path.join(SOURCE, "configs", "default.toml")
    cap = ["--as=4294967296"]  # 4 GiB of address space
    late = [r"step\s+0\s+loss", "filesystem error"]  # refused before the first step, in its words
    with tempfile.TemporaryDirectory() as d:
        # The built-in defaults (the tiny GPT-2 on the embedded text), one step.
        one = [train, "--metrics.run_folder=" + os.path.join(d, "runs"), "--training.steps=1",
               "--schedule.warmup_steps=0"]

        def refused(name, args, says, **kw):
            Case(f"spmd-train {name}", one + args, **kw).run().expect(
                code=1, says=says, not_says=late + ["cannot allocate"], within_s=15)

        # Sizes the config implies: refused from the memory plan, before any allocation.
        refused("model.seq_len 10^7", ["--model.seq_len=10000000"],
                r"the job needs [0-9.]+ TiB per rank .*model.seq_len = 10000000 makes most of it",
                prlimit=cap)
        refused("model.vocab_size 10^9", ["--model.vocab_size=1000000000"],
                r"the job needs [0-9.]+ TiB per rank .*model.vocab_size = 1000000000 makes most",
                prlimit=cap)
        refused("training.global_batch 100000",
                ["--config", default, "--parallel.dp_shard=1", "--training.global_batch=100000",
                 "--checkpoint.folder=" + os.path.join(d, "ck")],
                r"the job needs [0-9.]+ [GT]iB per rank on 1 rank \(rank 0: .*activations "
                r"[0-9.]+ [GT]iB.*\); the limit is [0-9.]+ [GM]iB", prlimit=cap)
        refused("training.threads 100000", ["--training.threads=100000"],
                r"training.threads = 100000 is more than 1024")
        cpus = len(os.sched_getaffinity(0))
        refused(f"training.threads {cpus + 1}", [f"--training.threads={cpus + 1}"],
                rf"training.threads = {cpus + 1} is more than the {cpus} CPUs this process may "
                r"run on")
        # Folders it cannot write: refused at start, naming the key.
        afile = os.path.join(d, "afile")
        open(afile, "w").close()
        refused("checkpoint.folder a file", ["--checkpoint.folder=" + afile],
                re.escape(f'checkpoint.folder = "{afile}" names a file, not a folder'))
        refused("checkpoint.folder in /proc", ["--checkpoint.folder=/proc/spmd_hostile"],
                r'checkpoint.folder = "/proc/spmd_hostile": cannot make the folder \(No such file')
        refused("metrics.run_folder in /proc", ["--metrics.run_folder=/proc/spmd_hostile"],
                r'metrics.run_folder = "/proc/spmd_hostile": cannot make the folder')
        refused("metrics.run_folder under a file", ["--metrics.run_folder=" + afile + "/runs"],
                re.escape(f'metrics.run_folder = "{afile}/runs" lies under {afile}, a file'))
        # The command line.
        refused("--config twice", ["--config", default, "--config", default],
                r"--config given twice \(.*default.toml and another\)")
        refused("--config ''", ["--config", ""], r'--config needs a file, got ""')
        Case("spmd-train with no --config", one).run().expect(
            code=0, says=r"no --config: training the built-in defaults \(the tiny GPT-2 on the "
                         r"text embedded in the binary", within_s=60)
        # A text shorter than a batch of sequences: the file, its tokens, those needed.
        short = os.path.join(d, "short.txt")
        with open(short, "w") as f:
            f.write("abcdefghij")
        refused("data.path too short", ["--data.path=" + short],
                re.escape(f'data.path = "{short}" leaves 9 tokens to train on') +
                r".* 0 windows of model.seq_len \+ 1 = 129 tokens: fewer than "
                r"training.global_batch = 8 \(it needs at least 1025 tokens")
        refused("metrics.eval_every with no held-out batch",
                ["--data.eval_fraction=0.0001", "--metrics.eval_every=1"],
                r"metrics.eval_every = 1 asks for held-out evals, but data.eval_fraction = "
                r"0.0001 holds out \d+ tokens, fewer than one eval batch")
        gpt2_vocab_cases(refused, d)
        resume_cases(one, os.path.join(d, "ck"), late)
        nonfinite_cases(one, train, default, d)


def gpt2_vocab_cases(refused, d):
    """data.tokenizer = "gpt2": a folder without GPT-2's files, a malformed
    encoder.json, and a vocabulary (the 256 bytes and one merge, written here
    in GPT-2's format) larger than the built-in model's 256 tokens."""
    gpt2 = ["--data.tokenizer=gpt2"]
    refused("data.gpt2_vocab without encoder.json", gpt2 + ["--data.gpt2_vocab=" + d],
            re.escape(f"Gpt2Tokenizer: cannot open {d}/encoder.json"))
    # GPT-2's map: printable bytes stand for themselves, the others for
    # U+0100, U+0101, ... in byte order.
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    others = [b for b in range(256) if b not in printable]
    char = {b: chr(b) for b in printable} | {b: chr(256 + k) for k, b in enumerate(others)}
    vocab = os.path.join(d, "gpt2")
    os.makedirs(vocab)
    with open(os.path.join(vocab, "encoder.json"), "w") as f:
        json.dump({**{char[b]: b for b in range(256)}, "ab": 256}, f)
    with open(os.path.join(vocab, "vocab.bpe"), "w") as f:
        f.write("#version: 0.2\na b\n")
    refused("a GPT-2 vocabulary larger than model.vocab_size", gpt2 + ["--data.gpt2_vocab=" + vocab],
            re.escape(f"data.gpt2_vocab: {vocab}/encoder.json holds 257 tokens, more than "
                      "model.vocab_size 256"))
    with open(os.path.join(vocab, "encoder.json"), "w") as f:
        f.write('{"a" 0}')
    refused("a malformed encoder.json", gpt2 + ["--data.gpt2_vocab=" + vocab],
            re.escape(f"{vocab}/encoder.json:1:6: expected ':' after a token"))


def resume_cases(one, ck, late):
    """A checkpoint's files, damaged by hand: refused naming the file."""
    finished = one + ["--checkpoint.folder=" + ck]
    Case("spmd-train to its last step", finished).run().expect(code=0, says=r"step\s+0")
    Case("spmd-train resumed past training.steps", finished).run().expect(
        code=0, says=r"resumed at step 1, and training.steps = 1: nothing left to train",
        within_s=30)
    more = one[:-2] + ["--training.steps=2", "--checkpoint.folder=" + ck]
    state = os.path.join(ck, "step_00000001", "train_state.json")
    with open(state) as f:
        saved = f.read()
    for text, says in [('{"step": ', r" is not a train state \(.*parse error"),
                       ('{"step": -7, "samples_consumed": 8, "lr": 0.001}',
                        r': "step" is -7: it must be a whole number, at least 0'),
                       ('{"step": 2.5, "samples_consumed": 8, "lr": 0.001}',
                        r': "step" is 2.5: it must be a whole number')]:
        with open(state, "w") as f:
            f.write(text)
        Case(f"spmd-train resuming from train_state.json {text}", more).run().expect(
            code=1, says=re.escape(state) + says, not_says=late, within_s=15)
    with open(state, "w") as f:
        f.write(saved)
    with open(os.path.join(ck, "latest"), "w") as f:
        f.write("step_00000009\n")
    Case("spmd-train with latest naming no folder", more).run().expect(
        code=1, says=re.escape(os.path.join(ck, "latest")) + r" names step_00000009, which is not "
                                                            r"a folder in", within_s=15)


def nonfinite_cases(one, train, default, d):
    """optimizer.lr = 1e30: the second step's loss is NaN."""
    nf = os.path.join(d, "nonfinite")
    blow_up = ["--training.steps=6", "--optimizer.lr=1e30", "--checkpoint.folder=" + nf,
               "--checkpoint.interval=1"]
    c = Case("spmd-train optimizer.lr 1e30", one + blow_up).run()
    c.expect(code=1, says=r"spmd-train: step 1: the loss is nan and the gradient norm nan; the "
                          r"first non-finite tensor is the (gradient of|parameter) \S+ on rank 0 "
                          r"\(element \d+ is nan\); the run stops before the optimizer step, and "
                          r"the checkpoint \S+step_00000001 stays the last", within_s=30)
    if sorted(os.listdir(nf)) != [".spmd-lock", "latest", "step_00000001"]:  # folder_lock.h
        c.fail(f"the checkpoint folder holds {sorted(os.listdir(nf))} after the stop at step 1")
    shutil.rmtree(nf)
    Case("spmd-train optimizer.lr 1e30, training.skip_nonfinite_steps 2",
         one + blow_up + ["--training.skip_nonfinite_steps=2"]).run().expect(
        code=1, says=[r"warning: step 1: the loss is nan .* the step is skipped, without an update "
                      r"\(1 of training.skip_nonfinite_steps = 2\)", r"warning: step 2: ",
                      r"spmd-train: step 3: .*\(training.skip_nonfinite_steps = 2: steps 1, 2 "
                      r"skipped already\)"], within_s=30)
    shutil.rmtree(nf)
    # Two ranks under FSDP: both stop at the same step with the same words; none hangs.
    Case("spmd-train optimizer.lr 1e30 on 2 ranks",
         [SPMDRUN, "--standalone", "--nproc-per-node", "2", train, "--config", default,
          "--metrics.run_folder=" + os.path.join(d, "runs2"), "--schedule.warmup_steps=0"] +
         blow_up[:3],
         limit_s=60).run().expect(
        code=1, says=[rf"\[rank{r}\]: spmd-train: step 1: the loss is nan .* on rank 0" for r in (0, 1)],
        within_s=60)

{"flags": group_flags, "files": group_files, "launcher": group_launcher,
 "ranks": group_ranks, "lifetime": group_lifetime, "habits": group_habits,
 "hang": group_hang, "train": group_train}[GROUP]()
if FAILURES:
    print(f"\n{len(FAILURES)} case(s) failed:\n" + "\n".join(FAILURES))
    sys.exit(1)
print("all cases passed")
