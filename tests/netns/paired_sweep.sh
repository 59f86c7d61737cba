#!/usr/bin/env bash
# The auto check across 2..4 network-namespace nodes (one rank per
# namespace), paired: `gotree sweep -join` in every namespace times the
# forced algorithms and auto in the same processes, alternating cycles, so
# that they share the machine's state and the links' token buckets; then
# one report over all node counts (`sweep -from`). Uses netns.sh under its
# lock (/tmp/gotree-netns.lock), like perf_matrix.sh. Needs root.
#
#   paired_sweep.sh OUTDIR RATE GOTREE [NODES] [SWEEP FLAGS...]
#
#   RATE    tbf rate per namespace link and direction (e.g. 1gbit), or "none"
#   GOTREE  the gotree binary
#   NODES   node counts (default "2 3 4")
#   SWEEP FLAGS default: -b 4 -e 4M -algos ring,tree,hd,auto -cycles 11 -w 1
#
# Writes OUTDIR/raw-n<N>.csv (rank 0's raw.csv of each node count), the
# pooled report (crossover.md, groups.csv, busbw.png) and OUTDIR/commands.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?OUTDIR}; rate=${2:?RATE}; bin=${3:?GOTREE}
nodes=${4:-"2 3 4"}
shift $(($# < 4 ? $# : 4))
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(-b 4 -e 4M -algos ring,tree,hd,auto -cycles 11 -w 1)
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
mkdir -p "$out"
out=$(cd "$out" && pwd)
rate_arg=()
[ "$rate" != none ] && rate_arg=("$rate")
raws=()
for n in $nodes; do
  tmp="$out/.n$n"
  cmd="RANK=\$NODE_RANK WORLD_SIZE=\$NNODES MASTER_PORT=29471 $bin sweep -join ${flags[*]} -out $tmp"
  echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg): netns.sh run $n ${rate_arg[*]} -- bash -c '$cmd'" >>"$out/commands.txt"
  flock /tmp/gotree-netns.lock bash "$here/netns.sh" run "$n" "${rate_arg[@]}" -- \
    bash -c "$cmd > $out/.n$n.\$NODE_RANK.log 2>&1" || { cat "$out"/.n"$n".*.log >&2; exit 1; }
  mv "$tmp/raw.csv" "$out/raw-n$n.csv"
  rm -rf "$tmp" "$out"/.n"$n".*.log
  raws+=("$out/raw-n$n.csv")
  echo "$(date +%T) $rate n=$n done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
from=$(IFS=,; echo "${raws[*]}")
echo "$(date -u +%FT%TZ): $bin sweep -from $from -out $out" >>"$out/commands.txt"
"$bin" sweep -from "$from" -out "$out"
