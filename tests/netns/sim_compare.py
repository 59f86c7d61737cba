#!/usr/bin/env python3
"""Compares `gotree sim --perf --json` with `gotree perf --json` measurements
written by perf_matrix.sh, and prints a Markdown table (docs/crossover/netns/).

    sim_compare.py MEASURED_DIR[,DIR...] SIM_JSON [--title TEXT] [--tol 0.2]
                   [--again MEASURED_DIR[,DIR...]]

MEASURED_DIR holds n<N>-<algo>-r<rep>.json (rank 0's perf --json per
repetition); several directories (comma-separated) pool their repetitions. Per (N, algorithm, size): the measured value is the median over
repetitions of perf's median (out-of-place `time_us`); the spread is the
smallest and largest repetition median and the largest P95; the error is
simulated / measured - 1.

--again names a second, independent measurement of the same points (another
sim_validate.sh run of the same binary): the table gains its median, and a
paragraph says how often the two measurements agree within the tolerance, at
how many points they differ by more than (1 + tol) / (1 - tol) — where no
prediction can be within the tolerance of both — and how the simulator fares
where they agree. That is the ceiling the machine puts on any model. Given
more than once, each gets that paragraph (the table shows the first), and one
more says at how many points every measurement lies within the tolerance of
their median, and how the simulator fares there.
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


def load(spec):
    """(nodes, algo, size) -> rank 0's perf rows of every repetition, pooled
    over the comma-separated directories of spec."""
    meas = collections.defaultdict(list)
    files = [f for d in spec.split(",") for f in glob.glob(os.path.join(d, "n*-*-r*.json"))]
    for f in sorted(files):
        m = re.match(r"n(\d+)-(\w+)-r(\d+)\.json", os.path.basename(f))
        if not m:
            continue
        with open(f) as fh:
            rep = json.load(fh)
        for row in rep["rows"]:
            meas[(int(m.group(1)), m.group(2), row["size"])].append(row)
    return meas


def median_of(rows):
    return statistics.median(r["time_us"] for r in rows)


def within(value, ref, tol):
    return abs(value / ref - 1) <= tol


def reproducibility(first, again, simulated, tol):
    """How two measurements of the same points (medians by key) agree, and
    how the simulated times (by key) agree with each where they do.

    Returns a dict: points (keys in all three), agree (the second within tol
    of the first), apart (the two further apart than (1 + tol) / (1 - tol):
    no single value is within tol of both), sim_first and sim_again (of the
    agreeing points, those where the simulation is within tol of the first,
    of the second measurement), sim_both (of both)."""
    keys = [k for k in first if k in again and k in simulated]
    agree = [k for k in keys if within(again[k], first[k], tol)]
    span = (1 + tol) / (1 - tol)
    apart = [k for k in keys if max(first[k], again[k]) > span * min(first[k], again[k])]
    return {
        "points": len(keys),
        "agree": len(agree),
        "apart": len(apart),
        "sim_first": sum(within(simulated[k], first[k], tol) for k in agree),
        "sim_again": sum(within(simulated[k], again[k], tol) for k in agree),
        "sim_both": sum(within(simulated[k], first[k], tol) and within(simulated[k], again[k], tol) for k in agree),
    }


def agreement(runs, simulated, tol):
    """How several measurements of the same points (a list of medians by
    key) agree: points (keys in all of them and the simulation), agree (every
    measurement within tol of their median), apart (the largest more than
    (1 + tol) / (1 - tol) times the smallest), sim_median and sim_every (of
    the agreeing points, those where the simulation is within tol of the
    measurements' median, of every measurement)."""
    keys = [k for k in runs[0] if k in simulated and all(k in r for r in runs)]
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    agree = [k for k in keys if all(within(r[k], med[k], tol) for r in runs)]
    span = (1 + tol) / (1 - tol)
    return {
        "points": len(keys),
        "agree": len(agree),
        "apart": sum(max(r[k] for r in runs) > span * min(r[k] for r in runs) for k in keys),
        "sim_median": sum(within(simulated[k], med[k], tol) for k in agree),
        "sim_every": sum(all(within(simulated[k], r[k], tol) for r in runs) for k in agree),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("measured")
    ap.add_argument("sim")
    ap.add_argument("--title", default="")
    ap.add_argument("--tol", type=float, default=0.2)
    ap.add_argument("--again", action="append", default=[],
                    help="another measurement of the same points (directories as MEASURED); may be repeated")
    a = ap.parse_args()

    meas = load(a.measured)
    first = {k: median_of(v) for k, v in meas.items()}
    agains = [{k: median_of(v) for k, v in load(d).items()} for d in a.again]
    again = agains[0] if agains else None
    with open(a.sim) as fh:
        sim = json.load(fh)
    simv = {(r["nodes"], r["algo"], r["size"]): r for r in sim["rows"]}

    if a.title:
        print(f"### {a.title}\n")
    print(f"Model: {sim['model']}\n")
    extra = " second run |" if again is not None else ""
    print("| nodes | algo | size | measured median | spread (rep medians; max P95) | CV |" + extra + " simulated | first call alone | error |")
    print("|---:|---|---:|---:|---|---:|" + ("---:|" if extra else "") + "---:|---:|---:|")
    out, n = [], 0
    for key in sorted(meas, key=lambda k: (k[0], k[1], k[2])):
        rows = meas[key]
        s = simv.get(key)
        if s is None:
            continue
        med = first[key]
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
              f"{100 * cv:.0f}% |{again_cell(again, key)} {fmt_us(s['time_us'])} | {fmt_us(s.get('first_call_us', 0))} | {100 * err:+.0f}%{flag} |")
    print(f"\n{n - len(out)} of {n} points within {100 * a.tol:.0f}%.", end="")
    if out:
        print(" Outside: " + ", ".join(f"{k[0]} nodes {k[1]} {fmt_size(k[2])} ({100 * e:+.0f}%)" for k, e in out) + ".")
    else:
        print()
    simt = {k: v["time_us"] for k, v in simv.items()}
    pct = f"{100 * a.tol:.0f}%"
    for d, other in zip(a.again, agains):
        r = reproducibility(first, other, simt, a.tol)
        print(f"\nAgainst the second measurement ({d}): its medians are within {pct} of these at "
              f"{r['agree']} of {r['points']} points; at {r['apart']} the two differ by more than "
              f"{(1 + a.tol) / (1 - a.tol):.2f}x, so that no prediction can be within {pct} of both. "
              f"Where the two agree ({r['agree']} points), the simulator is within {pct} of this measurement "
              f"at {r['sim_first']}, of the second at {r['sim_again']}, of both at {r['sim_both']}.")
    if len(agains) > 1:
        r = agreement([first] + agains, simt, a.tol)
        print(f"\nAll {len(agains) + 1} measurements: every one within {pct} of their median at {r['agree']} of "
              f"{r['points']} points; at {r['apart']} the largest is more than {(1 + a.tol) / (1 - a.tol):.2f}x the "
              f"smallest. Where all agree ({r['agree']} points), the simulator is within {pct} of their median "
              f"at {r['sim_median']} and of every one at {r['sim_every']}.")


def again_cell(again, key):
    if again is None:
        return ""
    v = again.get(key)
    return f" {fmt_us(v)} |" if v is not None else " – |"


if __name__ == "__main__":
    main()
