#!/usr/bin/env python3
"""Fits the latency parameters of `gotree sim` for network namespaces on a
separate calibration measurement (docs/crossover/netns/README.md):

    sim_calibrate.py [--link LINK_DIR] ONE_CHANNEL_DIR TWO_CHANNEL_DIR [OVERSUB_DIR] -- GOTREE SIM-ARGS...

The directories hold perf_matrix.sh output for 2 nodes, ring, small sizes,
once as the communicator runs them (1 channel) and once with
GOTREE_MIN_NCHANNELS=2 (2 channels, whose messages queue for the same
processors). The fit picks --hop-us (latency that occupies no processor) and
--msg-cpu-us (processor time per message at each end) so that
`gotree sim --perf SIM-ARGS` reproduces the median times of those runs
(least squares on the log of the ratio, grid search), and prints
"--hop-us H --msg-cpu-us C".

OVERSUB_DIR, where given, holds perf_matrix.sh output for the ring on more
nodes than the host has cores (n<N>-ring-r*.json, small sizes, 1 channel);
with H and C fixed, the fit then picks --oversub-us (the wait per message
and node beyond the cores) the same way, and prints it too.

LINK_DIR, where given, holds perf_matrix.sh output for 2 nodes, ring, large
sizes, without a rate limit (SIM-ARGS must not limit the NIC either): the
fit first picks --link-gbps, the bandwidth of one connection between the
namespaces (veth pairs through a bridge, which `gotree tune` over loopback
does not measure), on those runs (with H and C fitted once without it), then
fits H and C again with it, and prints it first.
"""

import glob
import json
import math
import os
import re
import statistics
import subprocess
import sys


def medians(d, nodes=2):
    by = {}
    for f in glob.glob(os.path.join(d, f"n{nodes}-ring-r*.json")):
        with open(f) as fh:
            for r in json.load(fh)["rows"]:
                by.setdefault(r["size"], []).append(r["time_us"])
    return {s: statistics.median(v) for s, v in by.items()}


def simulate(cmd, hop, cpu, minch, sizes, extra=()):
    out = subprocess.run(cmd + ["--hop-us", str(hop), "--msg-cpu-us", str(cpu), "--min-channels", str(minch), "--json", *extra],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    rows = {r["size"]: r["time_us"] for r in json.loads(out)["rows"]}
    return [rows[s] for s in sizes]


def main():
    if "--" not in sys.argv:
        sys.exit(__doc__)
    i = sys.argv.index("--")
    dirs = sys.argv[1:i]
    link = None
    if dirs[:1] == ["--link"]:
        link, dirs = dirs[1], dirs[2:]
    if len(dirs) not in (2, 3):
        sys.exit(__doc__)
    sim = sys.argv[i + 1:]
    fit = ""
    hop, cpu = fit_latency(dirs[0], dirs[1], sim, quiet=link is not None)
    if link is not None:
        fit = fit_link(link, sim, hop, cpu)
        sim = sim + fit.split()
        hop, cpu = fit_latency(dirs[0], dirs[1], sim)
        fit += " "
    fit += f"--hop-us {hop} --msg-cpu-us {cpu:g}"
    if len(dirs) == 3:
        fit += " " + fit_oversub(dirs[2], sim, hop, cpu)
    print(fit)


def fit_latency(one, two, sim, quiet=False):
    """--hop-us and --msg-cpu-us fitted on the 1- and 2-channel runs."""
    cmd = sim + ["--perf", "--nodes", "2", "--algos", "ring"]
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
    if not quiet:
        for s, a, b in zip(sizes, s1, s2):
            print(f"# {s} B: 1 channel measured {m1[s]:.0f} us, simulated {a:.0f}; 2 channels measured {m2[s]:.0f} us, simulated {b:.0f}",
                  file=sys.stderr)
    return hop, cpu


def fit_one(sim, nodes, hop, cpu, m, flag, values):
    """The value of flag among values (strings) with which `gotree sim --perf`
    of the ring on nodes nodes best reproduces the medians m (least squares on
    the log of the ratio), and its simulated times."""
    sizes = sorted(m)
    cmd = sim + ["--perf", "--nodes", str(nodes), "--algos", "ring", "-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", "4"]
    best = None
    for v in values:
        s = simulate(cmd, hop, cpu, 1, sizes, [flag, v])
        err = sum(math.log(a / m[z]) ** 2 for a, z in zip(s, sizes))
        if best is None or err < best[0]:
            best = (err, v, s)
    for z, a in zip(sizes, best[2]):
        print(f"# {z} B on {nodes} nodes: measured {m[z]:.0f} us, simulated {a:.0f} with {flag} {best[1]}", file=sys.stderr)
    return f"{flag} {best[1]}"


def fit_link(d, sim, hop, cpu):
    """--link-gbps G fitted on d's 2-node ring runs (0.25-8 GB/s, 2% steps)."""
    m = medians(d)
    if not m:
        sys.exit(f"sim_calibrate.py: no n2-ring-r*.json in {d}")
    values, g = [], 0.25
    while g <= 8:
        values.append(f"{g:.4g}")
        g *= 1.02
    return fit_one(sim, 2, hop, cpu, m, "--link-gbps", values)


def fit_oversub(d, sim, hop, cpu):
    """--oversub-us W fitted on d's ring runs (the most nodes found there)."""
    found = sorted({int(m.group(1)) for f in glob.glob(os.path.join(d, "n*-ring-r*.json"))
                    if (m := re.match(r"n(\d+)-ring-r", os.path.basename(f)))})
    if not found:
        sys.exit(f"sim_calibrate.py: no n<N>-ring-r*.json in {d}")
    return fit_one(sim, found[-1], hop, cpu, medians(d, found[-1]), "--oversub-us", [f"{w2 / 2:g}" for w2 in range(0, 41)])


if __name__ == "__main__":
    main()
