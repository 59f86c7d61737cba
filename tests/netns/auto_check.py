#!/usr/bin/env python3
"""Is auto within 5% of the best forced algorithm across namespace nodes?
(issue 9, point 4; docs/crossover/netns/).

    auto_check.py DIR [--forced DIR2] [--tol 0.05]

DIR holds n<N>-<algo>-r<rep>.json (rank 0's `gotree perf --json`, written by
perf_matrix.sh) for algo in ring, tree and auto; with --forced, the ring and
tree runs come from DIR2 (another tuning's auto against the same forced runs). Per (N, size) the value of
an algorithm is the median over repetitions of perf's out-of-place median.
Two judgements, as `gotree sweep` makes them within a node:

- directly: auto's value against the best forced value;
- the choice alone: the forced value of the algorithm auto ran (perf's
  plan_algo) against the best forced value. Auto runs exactly the plan of
  the algorithm it chose, so this separates a wrong choice from two runs of
  the same plan timed apart.

Prints a Markdown table and the counts.
"""

import argparse
import collections
import glob
import json
import os
import re
import statistics

from sim_compare import fmt_size  # this directory: size labels as in the simulator tables


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--forced", help="directory of the forced ring and tree runs (default: DIR)")
    ap.add_argument("--tol", type=float, default=0.05)
    a = ap.parse_args()
    files = [(f, "auto") for f in glob.glob(os.path.join(a.dir, "n*-auto-r*.json"))]
    for algo in ("ring", "tree"):
        files += [(f, algo) for f in glob.glob(os.path.join(a.forced or a.dir, f"n*-{algo}-r*.json"))]
    vals = collections.defaultdict(list)  # (n, algo, size) -> [median per rep]
    chosen = collections.defaultdict(collections.Counter)  # (n, size) -> plan_algo counts of the auto runs
    for f, algo in sorted(files):
        m = re.match(r"n(\d+)-(\w+)-r(\d+)\.json$", os.path.basename(f))
        if not m or m.group(2) != algo:
            continue
        n = int(m.group(1))
        with open(f) as fh:
            doc = json.load(fh)
        for row in doc["rows"]:
            if row["wrong"] or row["inplace_wrong"]:
                raise SystemExit(f"{f}: {row['size']} B: wrong elements")
            vals[(n, algo, row["size"])].append(row["median_us"])
            if algo == "auto":
                if "plan_algo" not in row:
                    raise SystemExit(f"{f}: no plan_algo (a gotree perf older than the auto check)")
                chosen[(n, row["size"])][row["plan_algo"]] += 1
    points = sorted({(n, s) for (n, algo, s) in vals if algo == "auto"})
    if not points:
        raise SystemExit(f"{a.dir}: no auto runs")
    print("| N | size | ring µs | tree µs | auto µs | auto ran | auto vs best | choice vs best |")
    print("|---:|---:|---:|---:|---:|---|---:|---:|")
    direct = choice = 0
    wrong = []
    for n, s in points:
        med = {algo: statistics.median(vals[(n, algo, s)]) for algo in ("ring", "tree", "auto") if vals.get((n, algo, s))}
        if "ring" not in med or "tree" not in med:
            raise SystemExit(f"N={n} {s} B: need forced ring and tree runs")
        best = min(med["ring"], med["tree"])
        ran = chosen[(n, s)].most_common(1)[0][0]
        d = med["auto"] / best - 1
        c = med[ran] / best - 1
        direct += d <= a.tol
        choice += c <= a.tol
        if c > a.tol:
            wrong.append(f"N={n} {fmt_size(s)} ({ran}, {c:+.1%})")
        runs = "/".join(f"{k}×{v}" for k, v in sorted(chosen[(n, s)].items())) if len(chosen[(n, s)]) > 1 else ran
        mark = lambda x: f"{x:+.1%}" + ("" if x <= a.tol else " **✗**")
        print(f"| {n} | {fmt_size(s)} | {med['ring']:.1f} | {med['tree']:.1f} | {med['auto']:.1f} | {runs} | {mark(d)} | {mark(c)} |")
    print()
    print(f"Auto within {a.tol:.0%} of the best forced algorithm: directly at {direct} of {len(points)} points, "
          f"by its choice alone at {choice} of {len(points)}.")
    if wrong:
        print("Choices more than the tolerance slower than the best forced algorithm: " + ", ".join(wrong) + ".")


if __name__ == "__main__":
    main()
