"""gotree perf against Open MPI's allreduce, side by side in one run.

    python3 tests/bench/vs_openmpi.py [--nproc 2,4] [--sizes 4,1K,...] [-n 200] [-w 20] [--cycles 2]

For each rank count, each cycle runs `build/gotree perf --json` and
`mpirun ... tests/bench/mpi_allreduce.py` (mpi4py) over the same sizes,
alternating which goes first (gotree first in even cycles). Both time
float32 SUM allreduce out of place the same way: blocking calls back to
back, each from the last rank's end of the call before to the last rank's
end of it (the host's clock), median over the calls. Per size the
table shows each side's median over cycles (of per-cycle medians), the
spread (min-max of the per-cycle medians), busbw = bytes x 2(n-1)/n /
median, and ratio = Open MPI time / gotree time (> 1: gotree faster).
Needs Debian's openmpi-bin and python3-mpi4py (the CI image installs
them only for this benchmark; the test suite does not use it).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B")
    if s and s[-1] in mult:
        return int(s[:-1]) * mult[s[-1]]
    return int(s)


def run_gotree(n, sizes, iters, warm):
    rows = {}
    for size in sizes:  # one size per run: perf's -b/-e/-f walk needs a constant factor
        out = subprocess.run(
            [os.path.join(ROOT, "build", "gotree"), "perf", "--nproc", str(n), "-b", str(size), "-e", str(size),
             "-n", str(iters), "-w", str(warm), "--json"],
            check=True, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1")).stdout
        for r in json.loads(out)["rows"]:
            rows[r["size"]] = (r["median_us"], r["wrong"] + r["inplace_wrong"])
    return rows


def run_mpi(n, sizes, iters, warm):
    out = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "/usr/bin/python3",
         os.path.join(ROOT, "tests", "bench", "mpi_allreduce.py"), "--sizes", ",".join(map(str, sizes)),
         "-n", str(iters), "-w", str(warm)],
        check=True, capture_output=True, text=True).stdout
    doc = json.loads(out.strip().splitlines()[-1])
    return doc["library"], {r["size"]: (r["median_us"], r["wrong"]) for r in doc["rows"]}


def human(b: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k} {unit}"
    return f"{b} B"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", default="2,4")
    ap.add_argument("--sizes", default="4,64,1K,4K,64K,256K,1M,4M,64M")
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("-w", type=int, default=200)
    ap.add_argument("--cycles", type=int, default=2)
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    bad = 0
    for n in [int(x) for x in a.nproc.split(",")]:
        got, mpi = {s: [] for s in sizes}, {s: [] for s in sizes}
        lib = "?"
        for cyc in range(a.cycles):
            order = ["gotree", "mpi"] if cyc % 2 == 0 else ["mpi", "gotree"]
            for who in order:
                # big sizes: fewer calls, so one cycle stays within seconds
                if who == "gotree":
                    rows = {}
                    for s in sizes:
                        it = a.n if s <= (1 << 20) else max(10, a.n // 100)
                        rows.update(run_gotree(n, [s], it, min(a.w, it)))
                    for s in sizes:
                        got[s].append(rows[s])
                else:
                    small = [s for s in sizes if s <= (1 << 20)]
                    big = [s for s in sizes if s > (1 << 20)]
                    rows = {}
                    if small:
                        lib, r = run_mpi(n, small, a.n, a.w)
                        rows.update(r)
                    if big:
                        lib, r = run_mpi(n, big, max(10, a.n // 100), min(a.w, max(10, a.n // 100)))
                        rows.update(r)
                    for s in sizes:
                        mpi[s].append(rows[s])
        print(f"# allreduce float32 sum, {n} ranks on this host; gotree perf vs {lib} (mpi4py), {a.cycles} cycles in alternating order")
        print(f"# per cycle: median over calls, each from the last rank's end of the one before to the last end; shown: median over cycles [min-max]; ratio = Open MPI / gotree time")
        print(f"{'size':>9} {'gotree us':>10} {'spread':>17} {'busbw':>7} {'openmpi us':>11} {'spread':>17} {'busbw':>7} {'ratio':>6} {'wrong':>5}")
        fac = 2 * (n - 1) / n
        for s in sizes:
            g = [t for t, _ in got[s]]
            m = [t for t, _ in mpi[s]]
            wrong = sum(w for _, w in got[s]) + sum(w for _, w in mpi[s])
            bad += wrong
            gm, mm = statistics.median(g), statistics.median(m)
            print(f"{human(s):>9} {gm:10.1f} {f'[{min(g):.1f}-{max(g):.1f}]':>17} {s * fac / gm / 1e3:7.3f} "
                  f"{mm:11.1f} {f'[{min(m):.1f}-{max(m):.1f}]':>17} {s * fac / mm / 1e3:7.3f} {mm / gm:6.2f} {wrong:5d}")
        print(flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
