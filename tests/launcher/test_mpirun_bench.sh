#!/usr/bin/env bash
# spmd under Open MPI's mpirun, with no spmdrun: env:// reads
# OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK and _LOCAL_SIZE, and rank 0 hosts
# the store at the MASTER_ADDR:MASTER_PORT that mpirun passes on (-x).
#   MASTER_ADDR=127.0.0.1 MASTER_PORT=P mpirun -np 2 -x MASTER_ADDR -x MASTER_PORT \
#       spmd-bench all_reduce ...
# spmd-bench checks every value (-c 1) and exits non-zero on a wrong one; its
# JSON lines (--json) must show 2 ranks and #wrong 0 for every size, 8 B to
# 32 KiB.
# Needs Open MPI's mpirun (Debian package openmpi-bin); exits 77 (ctest:
# skipped) without it.
#
# usage: test_mpirun_bench.sh SPMD_BENCH
set -uo pipefail
bench=$1

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

command -v mpirun >/dev/null || skip "no mpirun (Debian package openmpi-bin)"
mpirun --version 2>&1 | grep -q "Open MPI" || skip "mpirun is not Open MPI's"
if [ "$(id -u)" -eq 0 ]; then  # Open MPI refuses root unless told twice
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

export MASTER_ADDR=127.0.0.1
MASTER_PORT=$(python3 -c 'import socket
s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
export MASTER_PORT
# --oversubscribe: two ranks even on a machine with one core.
timeout 90 mpirun -np 2 --oversubscribe -x MASTER_ADDR -x MASTER_PORT \
  "$bench" all_reduce -b 8 -e 32K -f 8 -n 2 -w 1 -c 1 --json "$tmp/rows.json" \
  >"$tmp/out" 2>"$tmp/err" || { rc=$?; cat "$tmp/out" "$tmp/err"; fail "mpirun exited with $rc"; }
cat "$tmp/out"
python3 - "$tmp/rows.json" <<'PY' || fail "the rows are not 2 ranks with every value right"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
sizes = [r["size"] for r in rows]
assert sizes == [8, 64, 512, 4096, 32768], f"sizes {sizes}"
for r in rows:
    assert r["op"] == "all_reduce" and r["nranks"] == 2 and r["wrong"] == 0, r
print(f"{len(rows)} rows of all_reduce on 2 ranks, no wrong value")
PY
echo "PASSED"
