#!/usr/bin/env bash
# Configures spmd with CUDA on and NCCL hidden (SPMD_NCCL_ROOT names a folder
# that does not exist) in a fresh build folder: the configure must succeed,
# print cmake's note, and decide SPMD_WITH_CUDA ON, SPMD_WITH_NCCL OFF. And
# the build this test belongs to, configured without SPMD_NCCL_ROOT, must
# have found the NCCL the CUDA toolkit holds. Skipped (77) without nvcc.
# Usage: test_configure_without_nccl.sh CMAKE SOURCE_DIR DEPS_DIR THIS_BUILD_WITH_NCCL
set -euo pipefail
cmake=$1 src=$2 deps=$3 this_with_nccl=$4

nvcc=$(command -v nvcc || true)
[[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
if [[ -z $nvcc ]]; then
  echo "no nvcc: skipping"
  exit 77
fi

# NCCL where the CUDA toolkit keeps it: this build must have found it.
if compgen -G "$(dirname "$(dirname "$nvcc")")/lib64/libnccl*" > /dev/null ||
   compgen -G "/usr/lib/x86_64-linux-gnu/libnccl*" > /dev/null; then
  if [[ $this_with_nccl != ON ]]; then
    echo "FAIL: libnccl is installed but this build has SPMD_WITH_NCCL=$this_with_nccl"
    exit 1
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(-S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DSPMD_CUDA=AUTO
      -DSPMD_BUILD_TESTS=OFF -DSPMD_NCCL_ROOT=/nonexistent/nccl)
[[ -n $deps ]] && args+=("-DSPMD_DEPS_DIR=$deps")
if ! "$cmake" "${args[@]}" > "$work/out.txt" 2>&1; then
  cat "$work/out.txt"
  echo "FAIL: the configure without NCCL failed"
  exit 1
fi
fail=0
grep -q "spmd: note: NCCL (nccl.h, libnccl) was not found (looked in SPMD_NCCL_ROOT=/nonexistent/nccl); building the CUDA tensor backend without the NCCL backend" "$work/out.txt" ||
  { echo "FAIL: no note about the missing NCCL"; fail=1; }
grep -q "spmd: CUDA ON .*NCCL OFF" "$work/out.txt" || { echo "FAIL: not CUDA ON, NCCL OFF"; fail=1; }
if (( fail )); then
  cat "$work/out.txt"
  exit 1
fi
grep "spmd: note: NCCL\|spmd: CUDA" "$work/out.txt"
echo "PASS: configured CUDA without NCCL"
