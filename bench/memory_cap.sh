#!/usr/bin/env bash
# The chapter's thesis on the CPU: a model whose f32 parameters alone are more
# than a rank may hold trains fully sharded over 8 ranks, each under that cap,
# while one process under the same cap is refused before it allocates.
#
#   bench/memory_cap.sh [BUILD_DIR]      (default: build)
#
# The model: GPT-2's shape, 32 blocks of 512 (about 101 M parameters, 385 MiB
# in f32; 16 bytes a parameter of f32 training state, 1.5 GiB). The cap: 360
# MiB per rank, less than the parameters alone and a quarter of the state.
#
# As root, each rank runs in a memory cgroup of its own with that limit (v1
# memory.limit_in_bytes, or v2 memory.max), and its peak is the cgroup's
# (memory.max_usage_in_bytes, or memory.peak): everything the kernel charged
# to it, page cache and shared memory included. Otherwise the cap is the
# trainer's own training.memory_limit_gb, and the peak rank 0's peak RSS.
# Prints one table; exits non-zero when a claim fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
TRAIN=$BUILD/train/spmd-train
SPMDRUN=$BUILD/launcher/spmdrun
RANKS=8
CAP_MIB=360
MODEL=(--model.preset=custom --model.d_model=512 --model.n_layers=32 --model.n_heads=8
       --model.seq_len=256 --training.global_batch=8 --training.steps=3
       --schedule.warmup_steps=0 --metrics.eval_every=0 --training.activation_checkpointing=full)
WORK=$(mktemp -d /tmp/spmd_memory_cap.XXXXXX)
CAP=$((CAP_MIB << 20))
# The shared-memory rings and slots, 256 KiB in place of 1 MiB: each group
# of the mesh has its own, and the kernel charges a ring to the rank that
# made it (rank 0 makes the most), so with the defaults rank 0 carries about
# 170 MiB more than rank 7 (docs/memory.md).
RING=$((256 << 10))

# --- The cgroups (root only) -----------------------------------------------------
CG=""
LIMIT_FILE="" PEAK_FILE=""
if [[ $(id -u) == 0 ]]; then
  v1=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
  if [[ -n $v1 && -d /sys/fs/cgroup/memory$v1 ]]; then
    CG=/sys/fs/cgroup/memory$v1/spmd_memory_cap_$$
    LIMIT_FILE=memory.limit_in_bytes PEAK_FILE=memory.max_usage_in_bytes
  elif [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    v2=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
    parent=/sys/fs/cgroup$v2
    if grep -qw memory "$parent/cgroup.subtree_control" 2>/dev/null ||
       echo +memory > "$parent/cgroup.subtree_control" 2>/dev/null; then
      CG=$parent/spmd_memory_cap_$$
      LIMIT_FILE=memory.max PEAK_FILE=memory.peak
    fi
  fi
fi
cleanup() {
  [[ -n $CG && -d $CG ]] && find "$CG" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null
  [[ -n $CG && -d $CG ]] && rmdir "$CG" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
make_cgroup() {  # make_cgroup NAME: a child cgroup with the cap
  mkdir -p "$CG/$1"
  echo "$CAP" > "$CG/$1/$LIMIT_FILE"
}

# A worker: joins cgroup <name><LOCAL_RANK> (if any), then runs spmd-train.
cat > "$WORK/worker.sh" <<'EOF'
#!/usr/bin/env bash
if [[ -n ${CAP_CGROUP:-} ]]; then echo $$ > "$CAP_CGROUP${LOCAL_RANK:-}/cgroup.procs"; fi
exec "$@"
EOF
chmod +x "$WORK/worker.sh"

if [[ -n $CG ]]; then
  mkdir -p "$CG"
  how="a memory cgroup per rank ($CG, $LIMIT_FILE)"
  CAP_FLAGS=()
else
  how="training.memory_limit_gb (not root, or no memory cgroup to make)"
  CAP_FLAGS=(--training.memory_limit_gb=$(python3 -c "print($CAP / 2**30)"))
fi

# --- One process under the cap: refused before it allocates --------------------
[[ -n $CG ]] && make_cgroup single
start=$(date +%s.%N)
set +e
CAP_CGROUP=${CG:+$CG/single} "$WORK/worker.sh" "$TRAIN" "${MODEL[@]}" "${CAP_FLAGS[@]}" \
  --metrics.run_folder="$WORK/single" > "$WORK/single.log" 2>&1
single_rc=$?
set -e
single_s=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")
single_peak=""
[[ -n $CG ]] && single_peak=$(cat "$CG/single/$PEAK_FILE")
refusal=$(grep -m1 "the job needs" "$WORK/single.log" || true)

# --- FSDP over 8 ranks, each under the cap -------------------------------------
if [[ -n $CG ]]; then for r in $(seq 0 $((RANKS - 1))); do make_cgroup "rank$r"; done; fi
set +e
CAP_CGROUP=${CG:+$CG/rank} OMP_NUM_THREADS=1 SPMD_SHM_RING_BYTES=$RING SPMD_SHM_SLOT_BYTES=$RING "$SPMDRUN" --standalone --nproc-per-node $RANKS \
  "$WORK/worker.sh" "$TRAIN" "${MODEL[@]}" "${CAP_FLAGS[@]}" --parallel.dp_shard=$RANKS \
  --metrics.run_folder="$WORK/fsdp" > "$WORK/fsdp.log" 2>&1
fsdp_rc=$?
set -e
plan_peak=$(grep -m1 "peak (a step)" "$WORK/fsdp.log" | awk '{print $(NF-1), $NF}' || true)
steps=$(grep -c "^\[rank0\]: step" "$WORK/fsdp.log" || true)
measured=$(grep -m1 "memory of rank 0" "$WORK/fsdp.log" | sed 's/.*measured: //' || true)
peaks=() worst=0
if [[ -n $CG ]]; then
  for r in $(seq 0 $((RANKS - 1))); do
    p=$(cat "$CG/rank$r/$PEAK_FILE")
    peaks+=("$((p >> 20))")
    if ((p > worst)); then worst=$p; fi
  done
fi
params=$(grep -m1 "parameters" "$WORK/single.log" | awk '{print $2, $3}' || true)

mib() { python3 -c "print(f'{$1 / 2**20:.1f} MiB')"; }
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
family=$(grep -m1 "cpu family" /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
model=$(grep -m1 "^model\s" /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
echo "cpu: $cpu (family $family, model $model); load average $(cut -d' ' -f1 /proc/loadavg)"
echo "cap: $CAP_MIB MiB per rank, by $how"
echo
echo "| run | result | peak per rank | the plan's peak |"
echo "|---|---|---|---|"
if [[ $single_rc != 0 && -n $refusal ]]; then
  single_result="refused in $single_s s (exit $single_rc)"
else
  single_result="NOT refused (exit $single_rc)"
fi
echo "| 1 process, the whole model ($params of f32 parameters alone) | $single_result | ${single_peak:+$(mib "$single_peak")} | (in the message) |"
if [[ $fsdp_rc == 0 && $steps -ge 3 ]]; then fsdp_result="trained $steps steps"; else fsdp_result="FAILED (exit $fsdp_rc)"; fi
if [[ -n $CG ]]; then
  peak_text="$(mib "$worst") at most (cgroup; MiB by rank: ${peaks[*]})"
else
  peak_text="rank 0: $measured"
fi
echo "| FSDP over $RANKS ranks | $fsdp_result | $peak_text | $plan_peak |"
echo
echo "the refusal: ${refusal#*spmd-train: }"
ok=1
[[ $single_rc != 0 && -n $refusal ]] || ok=0
[[ $fsdp_rc == 0 && $steps -ge 3 ]] || ok=0
[[ -z $CG || $worst -le $CAP ]] || ok=0
if [[ $ok == 1 ]]; then echo "claims: met"; else
  echo "claims: NOT met"; tail -n 20 "$WORK/fsdp.log"; exit 1
fi
