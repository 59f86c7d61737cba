#!/usr/bin/env bash
# The shared CPU allocator against torch's, side by side: for each
# collective, PAIRS pairs of `gotree.bench` jobs (gotree and gloo in one job,
# ordinary torch.empty tensors) with GOTREE_CPU_ALLOCATOR=shared and
# =default alternating, the machine-state probe (`gotree handoff`) before
# each; then PAIRS pairs of `gotree.ddpbench` (DDP, then FSDP2) the same way.
# docs/bench.md, "The shared CPU allocator", reports such runs.
#
#   tests/bench/allocator_ab.sh OUTDIR     (env: PAIRS=2 NPROC=4 SIZES=1M,4M,16M,64M
#                                           COLLS="allreduce allgather reducescatter")
#
# Writes OUTDIR/<coll>-<pair>-<mode>.txt, OUTDIR/ddp-*.txt, OUTDIR/fsdp-*.txt
# and prints each job's table as it ends. Needs `make venv` and a built
# library (python/gotree/libgotree.so: `make build`), and build/gotree for
# the probe.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUTDIR}
pairs=${PAIRS:-2}; nproc=${NPROC:-4}; sizes=${SIZES:-1M,4M,16M,64M}
colls=${COLLS:-allreduce allgather reducescatter}
mkdir -p "$out"
export PYTHONPATH=python OMP_NUM_THREADS=1
run() { # name mode module args...
  local name=$1 mode=$2; shift 2
  local log="$out/$name-$mode.txt"
  echo "=== $name $mode $(date -u +%T) probe: $(build/gotree handoff -n 1 | tail -1)" | tee "$log"
  GOTREE_CPU_ALLOCATOR=$mode timeout 900 .venv/bin/python -m torch.distributed.run --standalone \
    --nproc-per-node "$nproc" -m "$@" 2>&1 | grep -E '^#|^ ' | tee -a "$log"
}
for coll in $colls; do
  for ((i = 1; i <= pairs; i++)); do
    for mode in shared default; do
      run "$coll-$i" "$mode" gotree.bench --coll "$coll" --sizes "$sizes" --budget-s 4 --batch 500 --min-iters 5
    done
  done
done
for what in ddp fsdp; do
  flag=""; [ "$what" = fsdp ] && flag=--fsdp
  for ((i = 1; i <= pairs; i++)); do
    for mode in shared default; do
      run "$what-$i" "$mode" gotree.ddpbench --steps 30 $flag
    done
  done
done
