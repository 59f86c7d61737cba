#!/usr/bin/env bash
# Autotuning that measures decided sizes again (GOTREE_AUTOTUNE=again)
# against autotuning that decides once (GOTREE_AUTOTUNE=1, the default), side
# by side: PAIRS
# pairs of long `gotree perf` runs of one size, the two modes alternating,
# each run with the machine-state probe (`gotree handoff`) before and after,
# its wall time, perf's medians and every decision rank 0 logged.
#
#   tests/bench/autotune_ab.sh OUTDIR [GOTREE]     (env: PAIRS=8 NPROC=2 SIZE=1M ITERS=60000)
#
# Writes OUTDIR/summary.txt (one line per run) and OUTDIR/<pair>-<mode>.log
# (perf's output with GOTREE_DEBUG_SUBSYS=TUNING). docs/crossover/reexplore/
# has the runs of 2026-12-05 (made when measuring again was the build's
# GOTREE_AUTOTUNE=1 and deciding once was `once`).
set -euo pipefail
out=${1:?OUTDIR}; bin=${2:-build/gotree}
pairs=${PAIRS:-8}; nproc=${NPROC:-2}; size=${SIZE:-1M}; iters=${ITERS:-60000}
mkdir -p "$out"
probe() { "$bin" handoff -n 1 | awk '{print $(NF-3)}'; }
for ((i = 1; i <= pairs; i++)); do
  for mode in again 1; do
    log="$out/$i-$mode.log"
    before=$(probe)
    t0=$(date +%s.%N)
    GOTREE_AUTOTUNE=$mode GOTREE_DEBUG=INFO GOTREE_DEBUG_SUBSYS=TUNING \
      "$bin" perf --nproc "$nproc" -b "$size" -e "$size" -n "$iters" -w 10 >"$log" 2>&1
    t1=$(date +%s.%N)
    after=$(probe)
    kept=$(grep "bytes: measured" "$log" | grep '\[0\]' | sed -E 's/.*\): ([a-z]+)( instead|, the model).*/\1/' | paste -sd' ' -)
    row=$(grep -E "^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+ " "$log" | awk '{print "oop " $6 " us, ip " $10 " us"}')
    echo "$(date -u +%T) pair $i GOTREE_AUTOTUNE=$mode probe ${before}->${after} us wall $(echo "$t1 - $t0" | bc) s perf $row kept: $kept" | tee -a "$out/summary.txt"
  done
done
