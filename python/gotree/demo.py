"""Allreduce sweep: gotree and gloo side by side, every result checked.

    torchrun --nproc-per-node 4 -m gotree.demo [--max-bytes 64M] [--iters 10]

Both backends run in the same processes: the default group is gotree, a second
group over the same ranks is gloo. At each size the two alternate (gotree first on
even iterations, gloo first on odd ones) and each reports the median time of its
iterations. Inputs are small integers stored as float32, so every sum is exact and
each result is compared with the expected value exactly. busbw = bytes x 2(n-1)/n
/ time, as nccl-tests reports for allreduce. Exit status 1 if any result was wrong.
"""

import argparse
import os
import statistics
import sys
import time


def parse_size(s):
    s = s.strip().upper().replace("IB", "").replace("B", "")
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if s.endswith(suffix):
            s, mult = s[: -len(suffix)], m
    return int(float(s) * mult)


def human(nbytes):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= m:
            return f"{nbytes / m:g} {unit}"
    return f"{nbytes} B"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m gotree.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--min-bytes", default="4", help="smallest message (default 4 B)")
    ap.add_argument("--max-bytes", default="64M", help="largest message (default 64 MiB)")
    ap.add_argument("--factor", type=int, default=4, help="size step (default x4)")
    ap.add_argument("--iters", type=int, default=10, help="timed iterations per backend at small sizes")
    ap.add_argument("--budget-s", type=float, default=4.0, help="rough time budget per size, both backends")
    ap.add_argument("--no-gloo", action="store_true", help="gotree only")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each size as it finishes")
    args = ap.parse_args(argv)

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("gotree.demo runs under torchrun, e.g.:\n  torchrun --nproc-per-node 4 -m gotree.demo", file=sys.stderr)
        return 2

    import torch
    import torch.distributed as dist

    import gotree

    dist.init_process_group(backend="gotree")
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = [("gotree", dist.group.WORLD)]
    if not args.no_gloo:
        groups.append(("gloo", dist.new_group(backend="gloo")))
    names = [g[0] for g in groups]

    sizes = []
    s = max(4, parse_size(args.min_bytes) // 4 * 4)
    while s <= parse_size(args.max_bytes):
        sizes.append(s)
        s *= args.factor

    if rank == 0:
        print(
            f"# gotree demo: allreduce SUM float32, {n} ranks, torch {torch.__version__}, "
            f"{gotree.load_library()}",
            flush=True,
        )
        print(f"# median of the timed iterations; busbw = size x 2(n-1)/n / time; ratio = gloo time / gotree time", flush=True)

    errors = 0
    checked = 0
    rows = []
    for nbytes in sizes:
        count = nbytes // 4
        idx = torch.arange(count, dtype=torch.int64) % 251
        base = (idx + rank).to(torch.float32)
        expect = (idx * n + n * (n - 1) // 2).to(torch.float32)
        t = torch.empty(count, dtype=torch.float32)
        # warm-up (also decides the iteration count from a rough timing)
        start = time.perf_counter()
        for _, g in groups:
            t.copy_(base)
            dist.all_reduce(t, group=g)
            checked += 1
            if not torch.equal(t, expect):
                errors += 1
        one = (time.perf_counter() - start) / len(groups)
        iters = max(3, min(args.iters, int(args.budget_s / max(one, 1e-6) / len(groups))))
        # every rank must run the same number of iterations: take rank 0's
        it_t = torch.tensor([iters], dtype=torch.int64)
        dist.broadcast(it_t, src=0, group=groups[-1][1])
        iters = int(it_t.item())
        times = {name: [] for name in names}
        for it in range(iters):
            order = groups if it % 2 == 0 else list(reversed(groups))
            for name, g in order:
                t.copy_(base)
                dist.barrier(group=g)
                t0 = time.perf_counter()
                dist.all_reduce(t, group=g)
                times[name].append(time.perf_counter() - t0)
                checked += 1
                if not torch.equal(t, expect):
                    errors += 1
                    if errors <= 5:
                        bad = (t != expect).nonzero()[:3].flatten().tolist()
                        print(f"[rank {rank}] WRONG RESULT {name} {human(nbytes)} at elements {bad}", flush=True)
        med = {name: statistics.median(v) for name, v in times.items()}
        rows.append((nbytes, iters, med))
        if rank == 0 and args.verbose:
            line = f"{human(nbytes):>10}  x{iters:<3}"
            for name in names:
                bw = nbytes * 2 * (n - 1) / n / med[name] / 1e9 if n > 1 else 0.0
                line += f"  {name} {med[name] * 1e6:10.1f} us {bw:7.3f} GB/s"
            if len(names) == 2:
                line += f"  ratio {med['gloo'] / med['gotree']:5.2f}"
            print("# " + line, flush=True)

    # all ranks' verdicts
    err_t = torch.tensor([errors, checked], dtype=torch.int64)
    dist.all_reduce(err_t, group=groups[-1][1])
    total_errors, total_checked = int(err_t[0]), int(err_t[1])

    if rank == 0:
        print()
        hdr = f"{'size':>10} {'iters':>5}"
        for name in names:
            hdr += f" | {name + ' us':>12} {name + ' GB/s':>12}"
        if len(names) == 2:
            hdr += f" | {'gloo/gotree':>11}"
        print(hdr)
        print("-" * len(hdr))
        for nbytes, iters, med in rows:
            line = f"{human(nbytes):>10} {iters:>5}"
            for name in names:
                bw = nbytes * 2 * (n - 1) / n / med[name] / 1e9 if n > 1 else 0.0
                line += f" | {med[name] * 1e6:12.1f} {bw:12.3f}"
            if len(names) == 2:
                line += f" | {med['gloo'] / med['gotree']:11.2f}"
            print(line)
        print()
        verdict = "all correct" if total_errors == 0 else f"{total_errors} WRONG"
        print(f"checked {total_checked} allreduce results on {n} ranks: {verdict}", flush=True)
    dist.destroy_process_group()
    return 0 if total_errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
