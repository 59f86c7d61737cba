"""Allreduce sweep: gotree and gloo side by side, every result checked (`make demo`).

    torchrun --nproc-per-node 4 -m gotree.demo [--max-bytes 64M] [--iters 10] [--batch 50]

The Quick start's job: `gotree.bench` with settings that finish in about a minute on
a small machine. Both backends run in the same processes (the default group is
gotree, a second group over the same ranks is gloo) and alternate at every size.
Each timed iteration is `--batch` back-to-back calls on separate buffers after a
barrier, and the time per call counts: timing one call right after a barrier would
mostly time how late the slowest rank leaves the barrier (milliseconds when ranks
share CPUs), not the allreduce. Per size: median, P95 and IQR over iterations (the
slowest rank's time each), busbw = bytes x 2(n-1)/n / median as nccl-tests reports
it, and ratio = gloo median / gotree median. Inputs are small integers stored as
float32, so every sum is exact and every result is compared exactly; the exit
status is 1 if any was wrong. `python -m gotree.bench -h` has every option.
"""

import argparse
import sys

from gotree import bench


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m gotree.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--min-bytes", default="4", help="smallest message (default 4 B)")
    ap.add_argument("--max-bytes", default="64M", help="largest message (default 64 MiB)")
    ap.add_argument("--factor", type=int, default=4, help="size step (default x4)")
    ap.add_argument("--iters", type=int, default=10, help="timed iterations per backend and size, at most")
    ap.add_argument("--batch", type=int, default=50, help="back-to-back calls per timed iteration (default 50)")
    ap.add_argument("--budget-s", type=float, default=2.0, help="rough time budget per size, both backends")
    ap.add_argument("--no-gloo", action="store_true", help="gotree only")
    a = ap.parse_args(argv)
    return bench.main([
        "--min-bytes", a.min_bytes, "--max-bytes", a.max_bytes, "--factor", str(a.factor),
        "--iters", str(a.iters), "--min-iters", str(min(3, a.iters)), "--batch", str(a.batch),
        "--budget-s", str(a.budget_s), "--backends", "gotree" if a.no_gloo else "gotree,gloo",
    ])


if __name__ == "__main__":
    sys.exit(main())
