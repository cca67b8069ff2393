#!/usr/bin/env bash
# Installs the Debian packages spmd needs to build, test and benchmark, and only
# the ones that are missing, so running it twice costs nothing the second time.
# Works as root, or through sudo for an ordinary user. Then the test peers from
# npm (tests/peers/package.json, pinned by its package-lock.json) into
# .peers/npm/, again only when that lock changed since the last install;
# SPMD_SKIP_NPM_PEERS=1 leaves them out (their tests then report skipped).
#   scripts/setup.sh          everything: build, tests, benchmarks (scripts/test.sh)
#   scripts/setup.sh --job    only what the default job needs (scripts/run.sh):
#                             the build's packages and matplotlib for its plot
set -euo pipefail
cd "$(dirname "$0")/.."
job_only=0
case "${1:-}" in
  --job) job_only=1 ;;
  "") ;;
  *) echo "setup: unknown argument '$1' (none, or --job)" >&2; exit 2 ;;
esac

build_packages=(
  cmake g++ make pkg-config
  ccache                   # the CPU-only check of test.sh reuses the first build's objects
  libeigen3-dev            # CPU tensor kernels
  libopenblas-openmp-dev   # Eigen's products go to OpenBLAS (its OpenMP build)
  catch2                   # unit tests (v2, header only)
  libcli11-dev             # every binary's flags
  libtomlplusplus-dev      # TOML parsing (the spmd::toml target)
  nlohmann-json3-dev       # JSON lines for metrics and bench results
  libdnnl2                 # bf16 products on CPUs with AVX512_BF16 (tensor/cpu/bf16_gemm.h), opened at run time
)
test_packages=(
  python3 python3-numpy    # safetensors files read back by numpy
  python3-torch            # the independent reference for autograd and training
  python3-matplotlib       # bench plots
  procps psmisc iproute2   # process-table and network-namespace checks of the launcher
  slurm-wlm munge          # a one-node Slurm that tests/launcher/test_slurm_real.sh starts
  openmpi-bin libopenmpi-dev  # the OpenMPI peer of spmd-bench
  libgloo-dev              # the Gloo peer of spmd-bench (bench/peers/gloo_bench.cpp): every Gloo algorithm
  libblis4-openmp          # a GEMM peer of spmd-bench-ops (bench/gemm_libraries.h; oneDNN the other), opened at run time
)
# node and npm run the npm peers (GPT-2's vocabulary, tiktoken's two forms): Debian's,
# unless this machine already has a node with its own npm.
command -v npm >/dev/null || test_packages+=(nodejs npm)

install_debian_packages() {
  local missing=() sudo=""
  for p in "${build_packages[@]}" "${test_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all packages present"
    return
  fi

  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup: done"
}

# npm ci from the committed lock, so every machine gets the same versions;
# the copy of the lock beside node_modules says what is installed.
install_npm_peers() {
  local lock=tests/peers/package-lock.json dest=.peers/npm
  if [ "${SPMD_SKIP_NPM_PEERS:-0}" = 1 ]; then
    echo "setup: npm test peers left out (SPMD_SKIP_NPM_PEERS=1)"
    return
  fi
  if [ -d "$dest/node_modules" ] && cmp -s "$lock" "$dest/installed-lock.json"; then
    echo "setup: npm test peers present"
    return
  fi
  echo "setup: installing the npm test peers into $dest"
  rm -rf "$dest"
  mkdir -p "$dest"
  cp tests/peers/package.json "$lock" "$dest/"
  (cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$lock" "$dest/installed-lock.json"
}

if [ $job_only = 1 ]; then
  test_packages=(python3-matplotlib)  # runs/default/loss.png
  install_debian_packages
else
  install_debian_packages
  install_npm_peers
fi
