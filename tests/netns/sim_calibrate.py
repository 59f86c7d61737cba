#!/usr/bin/env python3
"""Fits the two latency parameters of `gotree sim` for network namespaces on
a separate calibration measurement (docs/crossover/netns/README.md):

    sim_calibrate.py ONE_CHANNEL_DIR TWO_CHANNEL_DIR -- GOTREE SIM-ARGS...

The directories hold perf_matrix.sh output for 2 nodes, ring, small sizes,
once as the communicator runs them (1 channel) and once with
GOTREE_MIN_NCHANNELS=2 (2 channels, whose messages queue for the same
processors). The fit picks --hop-us (latency that occupies no processor) and
--msg-cpu-us (processor time per message at each end) so that
`gotree sim --perf SIM-ARGS` reproduces the median times of those runs
(least squares on the log of the ratio, grid search), and prints
"--hop-us H --msg-cpu-us C".
"""

import glob
import json
import math
import os
import statistics
import subprocess
import sys


def medians(d):
    by = {}
    for f in glob.glob(os.path.join(d, "n2-ring-r*.json")):
        with open(f) as fh:
            for r in json.load(fh)["rows"]:
                by.setdefault(r["size"], []).append(r["time_us"])
    return {s: statistics.median(v) for s, v in by.items()}


def simulate(cmd, hop, cpu, minch, sizes):
    out = subprocess.run(cmd + ["--hop-us", str(hop), "--msg-cpu-us", str(cpu), "--min-channels", str(minch), "--json"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    rows = {r["size"]: r["time_us"] for r in json.loads(out)["rows"]}
    return [rows[s] for s in sizes]


def main():
    if "--" not in sys.argv:
        sys.exit(__doc__)
    i = sys.argv.index("--")
    one, two = sys.argv[1:i]
    cmd = sys.argv[i + 1:] + ["--perf", "--nodes", "2", "--algos", "ring"]
    m1, m2 = medians(one), medians(two)
    sizes = sorted(set(m1) & set(m2))
    lo, hi = min(sizes), max(sizes)
    cmd += ["-b", str(lo), "-e", str(hi), "-f", "4"]
    best = None
    for hop in range(0, 62, 2):
        for cpu2 in range(0, 81):  # 0.5 µs steps
            cpu = cpu2 / 2
            s1 = simulate(cmd, hop, cpu, 1, sizes)
            s2 = simulate(cmd, hop, cpu, 2, sizes)
            err = sum(math.log(a / m1[s]) ** 2 for a, s in zip(s1, sizes)) + sum(math.log(b / m2[s]) ** 2 for b, s in zip(s2, sizes))
            if best is None or err < best[0]:
                best = (err, hop, cpu, s1, s2)
            if s1[0] > 3 * m1[sizes[0]]:
                break
    err, hop, cpu, s1, s2 = best
    for s, a, b in zip(sizes, s1, s2):
        print(f"# {s} B: 1 channel measured {m1[s]:.0f} us, simulated {a:.0f}; 2 channels measured {m2[s]:.0f} us, simulated {b:.0f}",
              file=sys.stderr)
    print(f"--hop-us {hop} --msg-cpu-us {cpu:g}")


if __name__ == "__main__":
    main()
