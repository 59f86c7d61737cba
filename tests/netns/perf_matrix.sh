#!/usr/bin/env bash
# Measures `gotree perf` allreduce across 2..4 network-namespace nodes (one
# rank per namespace) with ring and tree forced, for the simulator
# comparison in docs/crossover/netns/. Uses netns.sh (same namespaces, same
# lock as the Python tests: /tmp/gotree-netns.lock), so it never runs at the
# same time as another netns.sh user, and removes everything it created.
#
#   perf_matrix.sh OUTDIR RATE GOTREE [REPS] [NODES] [ALGOS] [PERF FLAGS...]
#
#   RATE    tbf rate per namespace link and direction (e.g. 1gbit), or "none"
#   GOTREE  the gotree binary
#   REPS    repetitions in fresh namespaces and processes (default 3)
#   NODES   node counts (default "2 3 4"); ALGOS (default "ring tree")
#   PERF FLAGS default: -b 1K -e 16M -f 4 -n 20 -w 5 -c 1
#
# PERF_ENV (e.g. "GOTREE_MIN_NCHANNELS=2") is put in every rank's
# environment. Writes OUTDIR/RATE/n<N>-<algo>-r<rep>.json (rank 0's
# `perf --json`) and OUTDIR/RATE/commands.txt (every command as run, with
# the time and load average). Needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?OUTDIR}; rate=${2:?RATE}; bin=${3:?GOTREE}
reps=${4:-3}; nodes=${5:-"2 3 4"}; algos=${6:-"ring tree"}
shift $(($# < 6 ? $# : 6))
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(-b 1K -e 16M -f 4 -n 20 -w 5 -c 1)
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
dir="$out/$rate"
mkdir -p "$dir"
rate_arg=()
[ "$rate" != none ] && rate_arg=("$rate")
for ((rep = 1; rep <= reps; rep++)); do
  for n in $nodes; do
    for algo in $algos; do
      f="$dir/n$n-$algo-r$rep.json"
      cmd="${PERF_ENV:+env $PERF_ENV }RANK=\$NODE_RANK WORLD_SIZE=\$NNODES MASTER_PORT=29471 $bin perf ${flags[*]} --algo $algo --timeout 300s --json"
      echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg): netns.sh run $n ${rate_arg[*]} -- bash -c '$cmd' > $f (rank 0)" >>"$dir/commands.txt"
      # Rank 0 writes the JSON; the other ranks print nothing.
      flock /tmp/gotree-netns.lock bash "$here/netns.sh" run "$n" "${rate_arg[@]}" -- \
        bash -c "$cmd > $dir/.n$n-$algo-r$rep.\$NODE_RANK.json"
      mv "$dir/.n$n-$algo-r$rep.0.json" "$f"
      rm -f "$dir"/.n"$n"-"$algo"-r"$rep".*.json
      echo "$(date +%T) $rate n=$n $algo rep $rep done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
done
