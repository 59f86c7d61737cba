"""Synchronous against asynchronous-then-wait allreduces through torch.distributed.

    OMP_NUM_THREADS=1 PYTHONPATH=python torchrun --standalone --nproc-per-node 4 \
        tests/bench/async_calls.py [--bytes 4,64K] [--reps 7] [--calls 200]

`dist.all_reduce(t)` tells the backend that the caller waits at once;
`dist.all_reduce(t, async_op=True).wait()` (FSDP's and many training loops'
pattern: issue, then wait) does not, and `work.wait()` comes later. Per size, each
backend (gotree and gloo, groups of the same ranks, their order alternating per
repetition) runs, per repetition, a barrier and CALLS back-to-back calls of either
kind. Rank 0 prints the median over repetitions of the slowest rank's time per
call, with the spread (min-max). Every call's result is checked exactly: integers
summed in float32.
"""

import argparse
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", default="4,64K", help="comma-separated sizes (K/M suffixes)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()

    import torch
    import torch.distributed as dist

    import gotree  # noqa: F401  (registers the backend)
    from gotree.bench import parse_size

    torch.set_num_threads(1)
    dist.init_process_group(backend="gotree")
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = {"gotree": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    kinds = ["sync", "async+wait"]
    wrong = 0

    def run(group, kind, buf, calls):
        nonlocal wrong
        t0 = time.perf_counter()
        for i in range(calls):
            buf.fill_(float(rank + i % 7))
            if kind == "sync":
                dist.all_reduce(buf, group=group)
            else:
                dist.all_reduce(buf, group=group, async_op=True).wait()
            if buf[0].item() != n * (n - 1) / 2 + n * (i % 7):
                wrong += 1
        return (time.perf_counter() - t0) / calls * 1e6

    for size in [parse_size(s) for s in a.bytes.split(",")]:
        buf = torch.zeros(max(1, size // 4))
        times = {(b, k): [] for b in groups for k in kinds}
        for rep in range(a.reps + 1):
            order = list(groups) if rep % 2 == 0 else list(reversed(groups))
            for b in order:
                for k in kinds:
                    dist.barrier(group=groups[b])
                    us = run(groups[b], k, buf, a.calls if rep else 20)
                    if rep:  # the first repetition warms up
                        times[(b, k)].append(us)
        t = torch.tensor([times[key] for key in sorted(times)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            for key, row in zip(sorted(times), t):
                print(
                    f"{n} ranks {size:>8} B  {key[0]:6s} {key[1]:10s} "
                    f"{row.median().item():8.1f} us/call  [{row.min().item():.1f}-{row.max().item():.1f}]",
                    flush=True,
                )
    bad = torch.tensor([wrong], dtype=torch.int64)
    dist.all_reduce(bad)
    if rank == 0:
        print(f"wrong results: {int(bad)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
