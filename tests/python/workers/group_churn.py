"""torchrun worker: groups created and destroyed again and again leave nothing behind.

Each cycle makes a gotree group of every rank (and one of the even ranks), runs an
allreduce and an async allreduce whose future has a callback, and destroys the groups.
File descriptors and /dev/shm mappings after cycle 10 and after the last one must be
equal, and threads within two (jobs that build sub-groups per phase, or tools that probe with a short-lived
group, would otherwise run out of one of them)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from _common import Checker  # noqa: E402

CYCLES = 40


def resources():
    fds = len(os.listdir("/proc/self/fd"))
    threads = len(os.listdir("/proc/self/task"))
    with open("/proc/self/maps") as f:
        shm = sum(1 for line in f if "/dev/shm/" in line)
    return fds, threads, shm


def main():
    dist.init_process_group(backend="gotree")
    c = Checker("group_churn")
    rank, n = dist.get_rank(), dist.get_world_size()
    evens = list(range(0, n, 2))
    seen = {}
    for cycle in range(CYCLES):
        g = dist.new_group(list(range(n)), backend="gotree")
        sub = dist.new_group(evens, backend="gotree")
        x = torch.full((1000 + cycle,), float(rank + cycle))
        dist.all_reduce(x, group=g)
        c.check(torch.all(x == n * cycle + n * (n - 1) / 2).item(), f"cycle {cycle}: allreduce gave {x[0].item()}")
        y = torch.ones(7) * (rank + 1)
        got = dist.all_reduce(y, group=g, async_op=True).get_future().then(lambda f: f.value()[0] * 2).wait()
        c.check(torch.all(got == n * (n + 1)).item(), f"cycle {cycle}: future callback gave {got[0].item()}")
        if rank in evens:
            z = torch.ones(3)
            dist.all_reduce(z, group=sub)
            c.check(torch.all(z == len(evens)).item(), f"cycle {cycle}: sub-group allreduce gave {z[0].item()}")
        dist.destroy_process_group(sub)
        dist.destroy_process_group(g)
        if cycle in (9, CYCLES - 1):
            seen[cycle] = resources()
    before, after = seen[9], seen[CYCLES - 1]
    # CI once saw one more mapping on one rank here, cause not proven: a shared-memory
    # link closed while its liveness watch was failing it unmapped its segment when
    # that watch left, after destroy returned. shmConn.Close now waits for that (up to
    # 1 s), so the release should be done by now; a late one is still given up to 2 s
    # (and printed below), a leak stays and still fails.
    first = after
    deadline = time.monotonic() + 2
    while after[2] > before[2] and time.monotonic() < deadline:
        time.sleep(0.05)
        after = after[:2] + resources()[2:]
    if after != first:
        print(f"[rank {rank}] /dev/shm mappings after cycle {CYCLES}: {first[2]}, then {after[2]}", flush=True)
    print(f"[rank {rank}] fds, threads, shm mappings after cycle 10: {before}, after {CYCLES}: {after}", flush=True)
    # Threads may grow by a few that are no group's: the Go runtime keeps the OS
    # threads it starts for blocking calls. A leak per group would add 30 or more.
    for what, a, b, slack in zip(("file descriptors", "threads", "/dev/shm mappings"), before, after, (0, 2, 0)):
        c.check(b <= a + slack, f"{what}: {a} after cycle 10, {b} after cycle {CYCLES}")
    c.finish()


if __name__ == "__main__":
    main()
