"""How many sizes would fail issue 9's 5% rule by noise alone, with more cycles?

    python3 tests/bench/aa_projection.py docs/crossover/aa-hd/raw.csv [--a auto --b hd]

Reads the raw.csv of an A/A `gotree sweep -paired` (the same plan timed twice in the
same processes, e.g. `GOTREE_ALGO=allreduce:hd gotree sweep -paired -algos hd,auto`),
and per (ranks, size, placement) compares the median over cycles of algorithm A with
that of B, as the sweep's auto check does. It prints how many groups have A more than
5% slower, and how many such groups noise alone would give with the sweep's cycles
and with M times as many: a bootstrap (resampling each side's cycle medians, fixed
seed) gives the spread of log(median A / median B); it shrinks as 1/sqrt(M), and a
true ratio of 1 exceeds 1.05 with the normal tail's probability. The sum of those
probabilities over the groups is the expected count of false failures.
"""

import argparse
import csv
import math
import random
import statistics
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw")
    ap.add_argument("--a", default="auto", help="the algorithm checked (default auto)")
    ap.add_argument("--b", default="hd", help="the one it is checked against (default hd)")
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--boot", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    cycles = defaultdict(list)
    with open(args.raw) as fh:
        for r in csv.DictReader(fh):
            cycles[(int(r["nranks"]), int(r["bytes"]), r["placement"], r["algo"])].append(float(r["median_us"]))
    groups = sorted({k[:3] for k in cycles if (k[:3] + (args.a,)) in cycles and (k[:3] + (args.b,)) in cycles})
    if not groups:
        raise SystemExit(f"{args.raw}: no group has both {args.a} and {args.b}")
    rng = random.Random(args.seed)
    limit = math.log(1 + args.tol)
    failed, sds = 0, []
    for g in groups:
        a, b = cycles[g + (args.a,)], cycles[g + (args.b,)]
        if statistics.median(a) > (1 + args.tol) * statistics.median(b):
            failed += 1
        logs = []
        for _ in range(args.boot):
            ra = statistics.median(rng.choice(a) for _ in a)
            rb = statistics.median(rng.choice(b) for _ in b)
            logs.append(math.log(ra / rb))
        sds.append(statistics.pstdev(logs))
    n_cycles = statistics.median(len(cycles[g + (args.a,)]) for g in groups)
    print(f"{args.raw}: {len(groups)} groups, {n_cycles:g} cycles each (median); {args.a} more than {100 * args.tol:g}% slower than {args.b} at {failed}")
    print("cycles   expected false failures (noise alone)")
    for m in (1, 2, 4, 8, 16):
        exp = sum(0.5 * math.erfc(limit / (sd / math.sqrt(m)) / math.sqrt(2)) if sd > 0 else 0.0 for sd in sds)
        print(f"{m * n_cycles:6g}   {exp:.1f}")


if __name__ == "__main__":
    main()
