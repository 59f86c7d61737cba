"""Open MPI's allreduce, timed the way `gotree perf` times gotree's.

Run under mpirun (see vs_openmpi.py). For each size: float32 SUM over a
buffer of small integers, out of place, -w warm-up calls, then -n calls
back to back, each timed on every rank; per call the slowest rank's time
counts (a MAX reduction after the size, untimed). The first call of each
size is checked exactly. Prints one JSON object: {"rows": [{"size",
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
        times = array.array("d", bytes(8 * a.n))
        for i in range(a.n):
            t0 = time.perf_counter_ns()
            comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], op=MPI.SUM)
            times[i] = (time.perf_counter_ns() - t0) / 1e3
        slow = array.array("d", bytes(8 * a.n))
        comm.Allreduce([times, MPI.DOUBLE], [slow, MPI.DOUBLE], op=MPI.MAX)
        wrong = comm.allreduce(wrong, op=MPI.SUM)
        ts = sorted(slow)
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
