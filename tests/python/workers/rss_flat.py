"""torchrun worker: memory stays flat over many calls (issue 5: "RSS flat over
10,000 calls"). Each rank runs allreduces of 4 KiB and 1 MiB,
all_gather_into_tensor and reduce_scatter_tensor in turn, 10,000 calls after
2,000 warm-up calls, and reads its resident set size before, halfway and
after. Every result is checked
exactly on a sample of calls."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from _common import Checker  # noqa: E402

CALLS = int(os.environ.get("RSS_CALLS", "10000"))
WARMUP = 2000
# Allowed growth. The test runs with GOGC=20: with Go's default of 100 the
# garbage awaiting collection adds about 4 MiB over the first tens of
# thousands of calls (it levels off: +4 MiB after 10,000 calls and after
# 30,000), which is headroom, not a leak; with 20 it stays within 0.6 MiB
# here. A leak of 300 bytes per call adds 1.5 MiB to the second half alone.
SLACK_ALL = 3 << 20
SLACK_SECOND_HALF = 3 << 19


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main():
    dist.init_process_group(backend="gotree")
    c = Checker("rss_flat")
    rank, n = dist.get_rank(), dist.get_world_size()
    small = torch.zeros(1024, dtype=torch.int32)
    big = torch.zeros(1 << 18, dtype=torch.int32)
    gathered = torch.zeros(n * 1024, dtype=torch.int32)
    scattered = torch.zeros(1024, dtype=torch.int32)
    want_sum = n * (n + 1) // 2  # ranks contribute rank + 1

    def call(i, check):
        kind = i % 4
        if kind == 0:
            small.fill_(rank + 1)
            dist.all_reduce(small)
            if check:
                c.check(bool((small == want_sum).all()), f"call {i}: 4 KiB allreduce")
        elif kind == 1:
            big.fill_(rank + 1)
            dist.all_reduce(big)
            if check:
                c.check(bool((big == want_sum).all()), f"call {i}: 1 MiB allreduce")
        elif kind == 2:
            small.fill_(rank + 1)
            dist.all_gather_into_tensor(gathered, small)
            if check:
                expect = torch.arange(1, n + 1, dtype=torch.int32).repeat_interleave(1024)
                c.check(torch.equal(gathered, expect), f"call {i}: all_gather")
        else:
            gathered.fill_(rank + 1)
            dist.reduce_scatter_tensor(scattered, gathered)
            if check:
                c.check(bool((scattered == want_sum).all()), f"call {i}: reduce_scatter")

    for i in range(WARMUP):
        call(i, i % 97 == 0)
    before = rss_bytes()
    for i in range(CALLS // 2):
        call(i, i % 97 == 0)
    mid = rss_bytes()
    for i in range(CALLS // 2, CALLS):
        call(i, i % 97 == 0)
    after = rss_bytes()
    print(f"[rank {rank}] RSS {before / 2**20:.1f} MiB after {WARMUP} warm-up calls, then "
          f"{(mid - before) / 2**20:+.2f} MiB over {CALLS // 2} calls and "
          f"{(after - mid) / 2**20:+.2f} MiB over the next {CALLS - CALLS // 2}", flush=True)
    c.check(after - before < SLACK_ALL, f"RSS grew by {after - before} bytes over {CALLS} calls (allowed {SLACK_ALL})")
    c.check(after - mid < SLACK_SECOND_HALF,
            f"RSS grew by {after - mid} bytes over the last {CALLS - CALLS // 2} calls (allowed {SLACK_SECOND_HALF}): a leak")
    c.finish()


if __name__ == "__main__":
    main()
