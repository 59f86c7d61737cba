"""Open MPI's allreduce, timed the way `gotree perf` times gotree's.

Run under mpirun (see vs_openmpi.py), on one host. For each size: float32
SUM over a buffer of small integers, out of place, -w warm-up calls, then
-n calls back to back; every rank notes when each call ended on the
host's monotonic clock, and a call lasts from the moment the last rank
ended the one before to the moment the last rank ended it (a MAX
reduction of the moments after the size, untimed), as `gotree perf` does
on one host. The first call of each size is checked exactly. Prints one JSON object: {"rows": [{"size",
"median_us", "p95_us", "cv", "wrong"}]}. Needs only mpi4py (no numpy).
"""

import argparse
import array
import json
import statistics
import sys
import time

from mpi4py import MPI


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", required=True, help="comma-separated byte sizes")
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    rows = []
    for size in [int(s) for s in a.sizes.split(",")]:
        count = max(size // 4, 1)
        send = array.array("f", ((i + rank) % 5 - 2 for i in range(count)))
        recv = array.array("f", bytes(4 * count))
        comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], op=MPI.SUM)
        wrong = sum(
            1 for i in range(count) if recv[i] != sum((i + r) % 5 - 2 for r in range(n))
        )
        for _ in range(a.w):
            comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], op=MPI.SUM)
        ends = array.array("d", bytes(8 * (a.n + 1)))
        ends[0] = time.clock_gettime_ns(time.CLOCK_MONOTONIC) / 1e3
        for i in range(a.n):
            comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], op=MPI.SUM)
            ends[i + 1] = time.clock_gettime_ns(time.CLOCK_MONOTONIC) / 1e3
        last = array.array("d", bytes(8 * (a.n + 1)))
        comm.Allreduce([ends, MPI.DOUBLE], [last, MPI.DOUBLE], op=MPI.MAX)
        wrong = comm.allreduce(wrong, op=MPI.SUM)
        ts = sorted(last[i + 1] - last[i] for i in range(a.n))
        med = statistics.median(ts)
        mean = statistics.fmean(ts)
        cv = statistics.pstdev(ts) / mean if mean > 0 else 0.0
        rows.append({"size": count * 4, "median_us": med, "p95_us": ts[min(len(ts) - 1, int(0.95 * len(ts)))], "cv": cv, "wrong": wrong})
    if rank == 0:
        json.dump({"nranks": n, "library": MPI.Get_library_version().replace("\0", "").strip().splitlines()[0], "rows": rows}, sys.stdout)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
