# Sourced by bench/compare_collectives.sh and bench/compare_shm.sh: the loop
# that runs every implementation side by side, round by round, so that all
# meet the same noise.
#
#   interleave NAME ROUNDS "RANKS" "SWEEPS" IMPL...
#
# For each round and each rank count, every IMPL in an order that rotates by
# one each round (so none always runs first), and for each sweep named in
# SWEEPS ("small", "medium", "large") one call of the caller's function
#   run IMPL P SWEEP OPS ROUND FLAGS...
# with all_reduce and the caller's small_flags array (small), or the caller's
# large_ops and medium_flags (medium) or large_flags (large). NAME prefixes
# the progress lines.
interleave() {
  local name=$1 rounds=$2 ranks=$3 sweeps=$4
  shift 4
  local impls=("$@")
  local n=${#impls[@]} round p k impl
  for round in $(seq 1 "$rounds"); do
    for p in $ranks; do
      for k in $(seq 0 $((n - 1))); do
        impl=${impls[$(( (k + round) % n ))]}
        echo "$name: round $round/$rounds, $p ranks, $impl" >&2
        case " $sweeps " in *" small "*) run "$impl" "$p" small all_reduce "$round" "${small_flags[@]}" ;; esac
        case " $sweeps " in *" medium "*) run "$impl" "$p" medium "$large_ops" "$round" "${medium_flags[@]}" ;; esac
        case " $sweeps " in *" large "*) run "$impl" "$p" large "$large_ops" "$round" "${large_flags[@]}" ;; esac
      done
    done
  done
}
