"""DDP (or FSDP2) training steps: gotree and gloo side by side in one run.

    torchrun --nproc-per-node N -m gotree.ddpbench [--width 1024] [--depth 4] \
        [--batch 32] [--steps 30] [--warmup 20] [--bucket-mb 25] [--fsdp] [--json out.json]

Both backends train their own copy of the same MLP (same initial weights) in the
same processes: DistributedDataParallel over the default group (gotree) and over a
gloo group of the same ranks, or with --fsdp FSDP2 (fully_shard on every Linear
layer and on the whole model) on a CPU DeviceMesh of each group. Every step both
take one SGD step on the same batch, alternating which goes first (gotree first on
even steps). Timed per step: forward (FSDP2: all-gathering each layer's
parameters), backward with the gradients' reduction (DDP: bucketed allreduce; FSDP2:
reduce-scatter per layer; both overlap backward), optimizer step; per step the
slowest rank counts (a MAX allreduce after the run). Reported: median, P95 and IQR
of the step times, and ratio = gloo median / gotree median.

Checks: after the run each backend's (full) weights must be bitwise identical on
every rank, and the two backends' weights must agree to within a small relative
error (their reductions may add the ranks' gradients in different orders). Exit
status 1 if a check fails.
"""

import argparse
import json
import os
import statistics
import sys
import time

from gotree.bench import destroy_groups


def percentile(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m gotree.ddpbench", description=__doc__.split("\n")[0])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=50, help="untimed steps (gotree's autotuning measures each bucket size during its first calls: 48 at most for buckets of 1 MiB and more here, fewer for large ones, up to 255 for small ones)")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (default 25, DDP's)")
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard per Linear layer and on the whole model) instead of DDP")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if min(args.width, args.depth, args.batch, args.steps) < 1 or args.warmup < 0:
        ap.error("--width, --depth, --batch and --steps >= 1, --warmup >= 0")

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import gotree  # registers the backend

    dist.init_process_group(backend="gotree")
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    def model():
        torch.manual_seed(1234)
        layers = []
        for _ in range(args.depth):
            layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
        layers.append(torch.nn.Linear(args.width, 1))
        return torch.nn.Sequential(*layers)

    if args.fsdp:
        from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
        from torch.distributed.fsdp import fully_shard

        def sharded(mesh):
            m = model()
            for layer in m:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=mesh)
            return fully_shard(m, mesh=mesh)

        nets = {"gotree": sharded(init_device_mesh("cpu", (n,))), "gloo": sharded(DeviceMesh.from_group(gloo, "cpu"))}
        wrap = "FSDP2 per layer"
    else:
        nets = {
            "gotree": DDP(model(), bucket_cap_mb=args.bucket_mb),
            "gloo": DDP(model(), process_group=gloo, bucket_cap_mb=args.bucket_mb),
        }
        wrap = f"DDP, bucket {args.bucket_mb:g} MB"
    opts = {b: torch.optim.SGD(m.parameters(), lr=1e-3) for b, m in nets.items()}
    nparams = sum(p.numel() for p in nets["gotree"].parameters())
    log(f"# gotree.ddpbench: {n} ranks, torch {torch.__version__}, MLP {args.depth} x {args.width} "
        f"({nparams / 1e6:.2f} M parameters, {nparams * 4 / 2**20:.1f} MiB of gradients per step), "
        f"batch {args.batch} per rank, {wrap}, {args.steps} timed steps after {args.warmup}"
        + gotree.shared_allocator_note())
    load = os.getloadavg()
    log(f"# load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)")

    def step(b, x, y):
        t0 = time.perf_counter()
        opts[b].zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(nets[b](x), y)
        loss.backward()
        opts[b].step()
        return time.perf_counter() - t0

    times = {b: [] for b in nets}
    order = list(nets)
    for s in range(args.warmup + args.steps):
        g = torch.Generator().manual_seed(1000 * s + rank)
        x = torch.randn(args.batch, args.width, generator=g)
        y = torch.randn(args.batch, 1, generator=g)
        for b in order if s % 2 == 0 else order[::-1]:
            t = step(b, x, y)
            if s >= args.warmup:
                times[b].append(t)
    slow = {}
    for b in nets:
        t = torch.tensor(times[b], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        slow[b] = [v * 1e3 for v in t.tolist()]

    # Checks: identical weights across ranks per backend; the two backends close.
    failures = []

    def weights(m):  # FSDP2's parameters are shards: gathered whole
        return torch.cat([(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().reshape(-1) for p in m.parameters()])

    for b, m in nets.items():
        flat = weights(m)
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=gloo)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=gloo)
        if not torch.equal(lo, hi):
            failures.append(f"{b}: weights differ across ranks (max spread {(hi - lo).abs().max().item():.3g})")
    a, c = weights(nets["gotree"]), weights(nets["gloo"])
    rel = ((a - c).abs().max() / c.abs().max().clamp_min(1e-30)).item()
    if rel > 1e-4:
        failures.append(f"gotree and gloo weights differ by {rel:.3g} (relative, max)")

    log(f"{'backend':>8} {'median(ms)':>11} {'p95(ms)':>9} {'iqr(ms)':>9}")
    rows = {}
    for b in nets:
        med = statistics.median(slow[b])
        rows[b] = {"median_ms": med, "p95_ms": percentile(slow[b], 95),
                   "iqr_ms": percentile(slow[b], 75) - percentile(slow[b], 25)}
        log(f"{b:>8} {med:11.2f} {rows[b]['p95_ms']:9.2f} {rows[b]['iqr_ms']:9.2f}")
    ratio = rows["gloo"]["median_ms"] / rows["gotree"]["median_ms"]
    log(f"# ratio gloo/gotree (step time): {ratio:.2f}")
    log(f"# weights: identical across ranks for each backend: {'yes' if not any('ranks' in f for f in failures) else 'NO'}; "
        f"gotree vs gloo max relative difference {rel:.2g}")
    load = os.getloadavg()
    log(f"# load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for f in failures:
        log(f"# FAILED: {f}")
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"nranks": n, "params": nparams, "rows": rows, "ratio": ratio, "rel_diff": rel,
                       "failures": failures}, f, indent=1)
    destroy_groups()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
