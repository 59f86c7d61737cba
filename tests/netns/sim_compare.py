#!/usr/bin/env python3
"""Compares `gotree sim --perf --json` with `gotree perf --json` measurements
written by perf_matrix.sh, and prints a Markdown table (docs/crossover/netns/).

    sim_compare.py MEASURED_DIR[,DIR...] SIM_JSON [--title TEXT] [--tol 0.2]

MEASURED_DIR holds n<N>-<algo>-r<rep>.json (rank 0's perf --json per
repetition); several directories (comma-separated) pool their repetitions. Per (N, algorithm, size): the measured value is the median over
repetitions of perf's median (out-of-place `time_us`); the spread is the
smallest and largest repetition median and the largest P95; the error is
simulated / measured - 1.
"""

import argparse
import collections
import glob
import json
import os
import re
import statistics


def fmt_size(b):
    for unit, s in ((1 << 20, "M"), (1 << 10, "K")):
        if b >= unit and b % unit == 0:
            return f"{b // unit}{s}"
    return str(b)


def fmt_us(us):
    if us >= 10000:
        return f"{us / 1000:.1f} ms"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.0f} µs"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("measured")
    ap.add_argument("sim")
    ap.add_argument("--title", default="")
    ap.add_argument("--tol", type=float, default=0.2)
    a = ap.parse_args()

    meas = collections.defaultdict(list)
    files = [f for d in a.measured.split(",") for f in glob.glob(os.path.join(d, "n*-*-r*.json"))]
    for f in sorted(files):
        m = re.match(r"n(\d+)-(\w+)-r(\d+)\.json", os.path.basename(f))
        if not m:
            continue
        with open(f) as fh:
            rep = json.load(fh)
        for row in rep["rows"]:
            meas[(int(m.group(1)), m.group(2), row["size"])].append(row)
    with open(a.sim) as fh:
        sim = json.load(fh)
    simv = {(r["nodes"], r["algo"], r["size"]): r for r in sim["rows"]}

    if a.title:
        print(f"### {a.title}\n")
    print(f"Model: {sim['model']}\n")
    print("| nodes | algo | size | measured median | spread (rep medians; max P95) | CV | simulated | first call alone | error |")
    print("|---:|---|---:|---:|---|---:|---:|---:|---:|")
    out, n = [], 0
    for key in sorted(meas, key=lambda k: (k[0], k[1], k[2])):
        rows = meas[key]
        s = simv.get(key)
        if s is None:
            continue
        med = statistics.median(r["time_us"] for r in rows)
        lo = min(r["time_us"] for r in rows)
        hi = max(r["time_us"] for r in rows)
        p95 = max(r["p95_us"] for r in rows)
        cv = statistics.median(r["cv"] for r in rows)
        err = s["time_us"] / med - 1
        n += 1
        flag = ""
        if abs(err) > a.tol:
            flag = " **✗**"
            out.append((key, err))
        print(f"| {key[0]} | {key[1]} | {fmt_size(key[2])} | {fmt_us(med)} | {fmt_us(lo)} – {fmt_us(hi)}; {fmt_us(p95)} | "
              f"{100 * cv:.0f}% | {fmt_us(s['time_us'])} | {fmt_us(s.get('first_call_us', 0))} | {100 * err:+.0f}%{flag} |")
    print(f"\n{n - len(out)} of {n} points within {100 * a.tol:.0f}%.", end="")
    if out:
        print(" Outside: " + ", ".join(f"{k[0]} nodes {k[1]} {fmt_size(k[2])} ({100 * e:+.0f}%)" for k, e in out) + ".")
    else:
        print()


if __name__ == "__main__":
    main()
