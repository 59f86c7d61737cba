"""Collective sweep through torch.distributed: gotree and gloo side by side, results checked.

    torchrun --nproc-per-node 4 -m gotree.bench [--sizes 4,4K,64K,1M,64M] [--iters 20]
        [--coll allreduce|allgather|reducescatter|alltoall|broadcast]
        [--dtype float32] [--op sum] [--backends gotree,gloo] [--json FILE]

Sizes follow nccl-tests: the allreduce and broadcast buffer, the allgather output,
the reducescatter input and the alltoall buffer (n blocks of one rank's share; at least
one element per rank). alltoall is all_to_all_single with equal splits.

Both backends run in the same processes of one torchrun job: the default group is
gotree, a second group over the same ranks uses gloo. At every size each iteration
runs both, alternating which goes first (gotree first on even iterations, gloo first
on odd ones), so drifting machine load hits both alike.

Timing: before each timed iteration the ranks meet in a barrier of the same group; each
rank times its own call(s); per iteration the slowest rank's time counts (they are
combined with a MAX allreduce after the size is done, outside the timing). With
--batch K an iteration is K back-to-back calls on K separate buffers (fewer where K
buffers would exceed 64 MiB per backend; one call from 64 MiB up) and the time per call
is reported, which takes the barrier's exit skew out of
small-message latency (nccl-tests style); the default is K = 1. Reported per backend
and size: median, P95 and the interquartile range (IQR, P75 - P25) of those iteration
times, busbw = bytes x factor / median with nccl-tests' factors (allreduce 2(n-1)/n,
allgather, reducescatter and alltoall (n-1)/n, broadcast 1), and the ratio gloo median / gotree
median (> 1: gotree is faster).

Machine state: on a machine whose memory speed changes over time (a small VM's
shared-memory hand-offs run 3-7x slower for seconds to minutes at a time), rank 0 runs
gotree.probe_handoff just before and just after each size's timed iterations while the
other ranks wait in a barrier, and the "state(us)" column shows both (--no-probe: off).
A size whose probes differ a lot ran partly in each state.

Checks: inputs are small integers in the chosen dtype, so every sum (and min/max/prod)
has one exact answer; each call's result is compared exactly and the run exits with
status 1 if any was wrong.
"""

import argparse
import json
import os
import statistics
import sys
import time

DTYPES = ["float32", "float64", "bfloat16", "float16", "int8", "uint8", "int16", "int32", "int64"]
OPS = ["sum", "max", "min", "prod", "avg"]
COLLS = ["allreduce", "allgather", "reducescatter", "alltoall", "broadcast"]


def parse_size(s):
    s = s.strip().upper().replace("IB", "").rstrip("B")
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if s.endswith(suffix):
            s, mult = s[: -len(suffix)], m
    return int(float(s) * mult)


def human(nbytes):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= m and nbytes % m == 0:
            return f"{nbytes // m} {unit}"
    return f"{nbytes} B"


def percentile(xs, p):
    """Linear-interpolated percentile of a non-empty list (p in [0, 100])."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def destroy_groups():
    """dist.destroy_process_group() for a job with a gloo group: gloo's worker
    thread frees each finished work's tensors, which needs the GIL, and torch
    destroys a gloo group holding the GIL while it joins that thread, so the
    thread runs first (a 3-rank ddpbench hung there once, torch 2.11)."""
    import torch.distributed as dist

    time.sleep(0.2)
    dist.destroy_process_group()


def default_sizes():
    return [4 << (2 * i) for i in range(13)]  # 4 B, 16 B, ..., 64 MiB (x4)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m gotree.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", help="comma-separated message sizes in bytes (K/M/G suffixes); default 4 B..64 MiB x4")
    ap.add_argument("--min-bytes", help="smallest size of a geometric sweep (with --max-bytes, --factor)")
    ap.add_argument("--max-bytes", help="largest size of a geometric sweep")
    ap.add_argument("--factor", type=int, default=4, help="sweep step (default x4)")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations per backend and size (at most; see --budget-s)")
    ap.add_argument("--min-iters", type=int, default=5, help="timed iterations at least, whatever the budget")
    ap.add_argument("--warmup", type=int, default=3, help="untimed iterations per backend and size")
    ap.add_argument("--budget-s", type=float, default=6.0, help="rough time budget per size for both backends (caps iterations at large sizes)")
    ap.add_argument("--batch", type=int, default=1, help="back-to-back calls per timed iteration, at most 64 MiB of buffers per backend (default 1)")
    ap.add_argument("--dtype", default="float32", choices=DTYPES)
    ap.add_argument("--op", default="sum", choices=OPS, help="reduction of allreduce and reducescatter")
    ap.add_argument("--coll", default="allreduce", choices=COLLS, help="the collective (broadcast from rank 0)")
    ap.add_argument("--backends", default="gotree,gloo", help="comma-separated, in the order of the first iteration")
    ap.add_argument("--settle-s", type=float, default=0.05,
                    help="wait this long after init_process_group before the first size (default 0.05: on a 2-CPU VM the first "
                         "~15 ms after init run 2-4x slower, and gotree's autotuning would measure the first size's candidates "
                         "in them, where a training job's first allreduce comes later; gotree perf --settle does the same)")
    ap.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True,
                    help="record the machine state before and after each size's timed iterations: rank 0 runs "
                         "gotree.probe_handoff (512 KiB from one CPU to another, median us) while the other ranks wait "
                         "(default on; --no-probe turns it off)")
    ap.add_argument("--shm-buffers", action="store_true",
                    help="gotree's tensors from gotree.empty (memory the host's ranks map: single-copy plans read and write "
                         "each other's tensors with loads and stores); gloo's stay ordinary")
    ap.add_argument("--json", help="also write the results to this file (rank 0)")
    ap.add_argument("--no-check", action="store_true", help="skip the exact result checks")
    a = ap.parse_args(argv)
    if a.sizes:
        a.size_list = [parse_size(x) for x in a.sizes.split(",") if x.strip()]
    elif a.min_bytes or a.max_bytes:
        lo, hi = parse_size(a.min_bytes or "4"), parse_size(a.max_bytes or "64M")
        a.size_list = []
        s = lo
        while s <= hi:
            a.size_list.append(s)
            s *= a.factor
    else:
        a.size_list = default_sizes()
    a.backend_list = [b.strip() for b in a.backends.split(",") if b.strip()]
    if not a.backend_list or any(b not in ("gotree", "gloo") for b in a.backend_list):
        ap.error("--backends: gotree and/or gloo")
    if a.iters < 1 or a.min_iters < 1 or a.warmup < 0 or a.batch < 1 or a.settle_s < 0:
        ap.error("--iters, --min-iters and --batch >= 1, --warmup and --settle-s >= 0")
    return a


# Batched iterations use at most this many bytes of buffers per backend.
BATCH_BYTES = 64 << 20

# gotree's autotuning times up to this many allreduce calls of a new size
# (pg/autotune.go: tuneRounds x tuneMaxCands x (tuneWarmups + tuneMaxTimed),
# fewer for sizes with fewer candidates or longer calls (tuneTimedFor),
# tuneMaxCands counting one-shot and shared where the model cannot predict
# them; a Go test holds the two equal); gotree's allreduce warm-up runs
# them first, and stops early once gotree.describe says that size no
# longer explores.
AUTOTUNE_CALLS = 255


def exploring(group, nbytes):
    """Whether gotree's next allreduce of nbytes on group still explores
    (the same answer on every rank after the same calls)."""
    import gotree

    return any(c["coll"] == "allreduce" and c["by"] == "exploring" for c in gotree.describe(group, sizes=[nbytes])["choices"])


def main(argv=None):
    args = parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("gotree.bench runs under torchrun, e.g.:\n  torchrun --nproc-per-node 4 -m gotree.bench", file=sys.stderr)
        return 2

    import torch
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    import gotree

    torch.set_num_threads(1)
    dist.init_process_group(backend="gotree")
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = {"gotree": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    groups = {b: groups[b] for b in args.backend_list}
    ctl = groups.get("gloo") or dist.new_group(backend="gloo")  # bookkeeping (MAX of times, flags)
    time.sleep(args.settle_s)

    dtype = getattr(torch, args.dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    small = esize <= 2  # 8/16-bit types: keep every sum exact and in range
    mod = 7 if small else 251
    op = {"sum": ReduceOp.SUM, "max": ReduceOp.MAX, "min": ReduceOp.MIN, "prod": ReduceOp.PRODUCT, "avg": ReduceOp.AVG}[args.op]
    if args.op == "prod":
        mod = 2  # values 1..2: 2^n stays exact

    def inputs(count, rank=rank):
        base = torch.arange(count, dtype=torch.int64) % mod
        if args.op == "prod":
            x = base + 1
            want = (base + 1) ** n
        elif args.op in ("max", "min"):
            x = base + rank
            want = base + ((n - 1) if args.op == "max" else 0)
        elif args.op == "avg":
            x = base * n + 2 * rank  # sum = n*(base*n) + n(n-1): divisible by n
            want = base * n + (n - 1)
        else:
            x = base + rank
            want = base * n + n * (n - 1) // 2
        return x.to(dtype), want.to(dtype)

    # One case per collective: (per-call element count of the input, the
    # input, the expected output, a function that makes an output buffer
    # for an input, and the call). In-place collectives write their input.
    def case(nbytes):
        if args.coll == "allgather":
            c = max(1, nbytes // esize // n)
            x = inputs(c)[0]
            want = torch.cat([inputs(c, r)[0] for r in range(n)])
            return n * c, x, want, lambda t: torch.empty(n * c, dtype=dtype), lambda t, o, g: dist.all_gather_into_tensor(o, t, group=g)
        if args.coll == "reducescatter":
            c = max(1, nbytes // esize // n)
            x, full = inputs(n * c)
            return n * c, x, full[rank * c:(rank + 1) * c].clone(), lambda t: torch.empty(c, dtype=dtype), \
                lambda t, o, g: dist.reduce_scatter_tensor(o, t, op=op, group=g)
        if args.coll == "alltoall":
            # block p of rank r's input goes to rank p: rank r receives block r
            # of every rank's input, in rank order
            c = max(1, nbytes // esize // n)
            x = inputs(n * c)[0]
            want = torch.cat([inputs(n * c, p)[0][rank * c:(rank + 1) * c] for p in range(n)])
            return n * c, x, want, lambda t: torch.empty(n * c, dtype=dtype), \
                lambda t, o, g: dist.all_to_all_single(o, t, group=g)
        count = max(1, nbytes // esize)
        if args.coll == "broadcast":
            want = inputs(count, 0)[0]
            x = want if rank == 0 else torch.full((count,), 3, dtype=torch.int64).to(dtype)
            return count, x, want, None, lambda t, o, g: dist.broadcast(t, src=0, group=g)
        x, want = inputs(count)
        return count, x, want, None, lambda t, o, g: dist.all_reduce(t, op=op, group=g)

    factor = {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n, "reducescatter": (n - 1) / n, "alltoall": (n - 1) / n, "broadcast": 1.0}[args.coll]

    def log(*a):
        if rank == 0:
            print(*a, flush=True)

    probe_failed = []

    def probe():
        """Rank 0's machine-state probe while the others wait (µs, or None)."""
        if not args.probe:
            return None
        dist.barrier(group=ctl)
        us = None
        if rank == 0 and not probe_failed:
            try:
                us = gotree.probe_handoff()
            except (NotImplementedError, RuntimeError) as e:
                probe_failed.append(str(e))
                log(f"# machine-state probe unavailable: {e}")
        dist.barrier(group=ctl)
        return us

    load = os.getloadavg()
    what = f"{args.coll} {args.op}" if args.coll in ("allreduce", "reducescatter") else args.coll
    log(
        f"# gotree.bench: {what} {args.dtype}, {n} ranks, torch {torch.__version__}, "
        f"{gotree.load_library()}, backends {' + '.join(groups)}"
        + (" (gotree's tensors from gotree.empty)" if args.shm_buffers else "")
        + gotree.shared_allocator_note()
    )
    log(f"# load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)")
    log(
        "# per iteration: slowest rank's time after a barrier"
        + (f" / up to {args.batch} back-to-back calls (at most {BATCH_BYTES >> 20} MiB of buffers)" if args.batch > 1 else "")
        + f"; median / P95 / IQR over iterations; busbw = bytes x {factor:.3g} / median; ratio = gloo median / gotree median"
    )
    if args.probe:
        log("# state(us): gotree.probe_handoff on rank 0 before / after the timed iterations (512 KiB from one CPU to another)")
    cols = ["size", "count", "iters"]
    for b in groups:
        cols += [f"{b} med(us)", f"{b} p95(us)", f"{b} iqr(us)", f"{b} busbw(GB/s)"]
    if len(groups) == 2:
        cols.append("ratio")
    widths = [10, 10, 5] + [12, 12, 12, 14] * len(groups) + ([7] if len(groups) == 2 else [])
    if args.probe:
        cols.append("state(us)")
        widths.append(11)
    if "gotree" in groups:
        cols.append("gotree ran")
        widths.append(11)
    log("  ".join(c.rjust(w) for c, w in zip(cols, widths)))

    def ran(calls):
        """The algorithms of gotree's last `calls` operations of the
        collective, most frequent first (its flight record; "-" for
        point-to-point plans, which have none)."""
        ops = [o for o in gotree.flight_record(groups["gotree"])["ops"] if o["desc"].startswith(args.coll + " #")]
        seen = {}
        for o in ops[-calls:]:
            a = o.get("algo") or "-"
            seen[a] = seen.get(a, 0) + 1
        return "/".join(sorted(seen, key=seen.get, reverse=True)) or "-"

    def copies(backend, t, k):
        """k copies of t; for gotree with --shm-buffers views of one
        gotree.empty tensor (one shared buffer, one file descriptor, for
        up to 500 calls' tensors)."""
        if not (args.shm_buffers and backend == "gotree"):
            return [t.clone() for _ in range(k)]
        m = t.numel()
        flat = gotree.empty(k * m, dtype=t.dtype)
        return [flat[i * m:(i + 1) * m].view(t.shape).copy_(t) for i in range(k)]

    wrong = 0
    rows = []
    for nbytes in args.size_list:
        count, src, want, make_out, call = case(nbytes)
        nbytes = count * esize
        batch = min(args.batch, max(1, BATCH_BYTES // nbytes))
        bufs = {b: copies(b, src, batch) for b in groups}
        outs = {b: copies(b, make_out(src), batch) if make_out else bufs[b] for b in groups}
        # warm-up, and a first estimate of the time per call for the budget:
        # whole batches as the timed iterations run them (inputs written
        # first, then the calls back to back: what autotuning measures
        # during gotree's first calls then matches the timed ones)
        t_est = {}
        for b, g in groups.items():
            explore = b == "gotree" and args.coll == "allreduce"
            left = max(1, args.warmup) + (AUTOTUNE_CALLS if explore else 0)
            while left > 0:
                k = min(batch, left)
                for x in bufs[b][:k]:
                    x.copy_(src)
                t0 = time.perf_counter()
                for x, o in zip(bufs[b][:k], outs[b][:k]):
                    call(x, o, g)
                t_est[b] = (time.perf_counter() - t0) / k
                left -= k
                if explore and not exploring(g, nbytes):
                    explore, left = False, min(left, max(1, args.warmup))
        est = torch.tensor([sum(t_est.values()) * batch], dtype=torch.float64)
        dist.all_reduce(est, op=ReduceOp.MAX, group=ctl)
        iters = int(min(args.iters, max(args.min_iters, args.budget_s / max(est.item(), 1e-6))))
        times = {b: torch.zeros(iters, dtype=torch.float64) for b in groups}
        bad = {b: 0 for b in groups}
        order = list(groups)
        before = probe()
        for it in range(iters):
            for b in order if it % 2 == 0 else order[::-1]:
                g, xs, os_ = groups[b], bufs[b], outs[b]
                for x in xs:
                    x.copy_(src)
                dist.barrier(group=g)
                t0 = time.perf_counter()
                for x, o in zip(xs, os_):
                    call(x, o, g)
                times[b][it] = (time.perf_counter() - t0) / batch
                if not args.no_check:
                    bad[b] += sum(not torch.equal(o, want) for o in os_)
        after = probe()
        for b in groups:
            dist.all_reduce(times[b], op=ReduceOp.MAX, group=ctl)
        flags = torch.tensor([bad[b] for b in groups], dtype=torch.int64)
        dist.all_reduce(flags, op=ReduceOp.SUM, group=ctl)
        row = {"bytes": nbytes, "count": count, "iters": iters, "batch": batch}
        cells = [human(nbytes), str(count), str(iters)]
        for i, b in enumerate(groups):
            us = [t * 1e6 for t in times[b].tolist()]
            med = statistics.median(us)
            p25, p75, p95 = percentile(us, 25), percentile(us, 75), percentile(us, 95)
            busbw = nbytes * factor / (med * 1e-6) / 1e9 if n > 1 else 0.0
            row[b] = {"median_us": med, "p95_us": p95, "iqr_us": p75 - p25, "busbw_gbps": busbw, "wrong": int(flags[i])}
            wrong += int(flags[i])
            cells += [f"{med:.1f}", f"{p95:.1f}", f"{p75 - p25:.1f}", f"{busbw:.3f}" + ("!" if flags[i] else "")]
        if len(groups) == 2:
            row["ratio"] = row["gloo"]["median_us"] / row["gotree"]["median_us"]
            cells.append(f"{row['ratio']:.2f}")
        if args.probe:
            row["probe_us"] = [before, after]
            cells.append("-" if before is None or after is None else f"{before:.0f}/{after:.0f}")
        if "gotree" in groups:
            row["gotree_algo"] = ran(iters * batch)
            cells.append(row["gotree_algo"])
        rows.append(row)
        log("  ".join(c.rjust(w) for c, w in zip(cells, widths)))

    load = os.getloadavg()
    log(f"# load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    log(f"# wrong results: {wrong}" + (" (marked !)" if wrong else " (every call checked exactly)" if not args.no_check else " (checks off)"))
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"nranks": n, "coll": args.coll, "dtype": args.dtype, "op": args.op, "torch": torch.__version__, "rows": rows}, f, indent=1)
    destroy_groups()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
