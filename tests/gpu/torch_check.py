"""CUDA tensors through torch.distributed with backend "gotree", one process
per rank (the case torch runs): tests/gpu/device_check.sh starts the ranks
with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and, to emulate several
nodes on one machine, a GOTREE_HOST_ID per rank (then ranks on different
"hosts" talk through the host-staged proxies over loopback TCP).

Every rank uses cuda:(rank % device count): with one GPU all ranks share
it (their kernels time-slice unless MPS runs). Checks, with exact expected
values computed here: all_reduce (sum, avg, max), broadcast, reduce,
all_gather_into_tensor, reduce_scatter_tensor at awkward sizes, in place
and through async work; all_to_all_single (equal and uneven), gather and
scatter, send and recv (batch_isend_irecv), which run through host memory;
that a collective waits for the caller's stream
(the input is written by a long kernel just before) and that work.wait()
orders later kernels after it. Then times float32 all_reduce with CUDA
events. Prints one line per rank; exit status 1 on any mismatch.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import gotree  # noqa: F401  registers the backend


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)

    def step(msg):
        # progress on stderr: where a run that dies stopped
        print(f"torch_check rank {rank}: {msg}", file=sys.stderr, flush=True)

    if os.environ.get("TORCH_CHECK_SYNC") == "1":
        # Each collective synchronises the device and says what it was, so
        # that an asynchronous fault (an illegal address) names its call.
        def synced(name, fn):
            def call(t, *args, **kwargs):
                step(f"{name} {tuple(t.shape)} {t.dtype} {kwargs.get('op', '')}")
                out = fn(t, *args, **kwargs)
                torch.cuda.synchronize()
                return out
            return call
        for name in ["all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "reduce_scatter_tensor"]:
            setattr(dist, name, synced(name, getattr(dist, name)))

    step("init_process_group")
    dist.init_process_group("gotree", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=90))
    fails = []
    # A CPU tensor first: the library itself, before any CUDA path.
    step("all_reduce of a CPU tensor")
    x = torch.full((5,), float(rank + 1))
    dist.all_reduce(x)
    if not torch.equal(x, torch.full((5,), float(world * (world + 1) // 2))):
        fails.append(f"all_reduce of a CPU tensor: got {x.tolist()}")

    def check(name, got, want):
        if not torch.equal(got.cpu(), want.cpu()):
            bad = (got.cpu() != want.cpu()).nonzero()
            fails.append(f"{name}: {bad.numel()} elements differ, first at {bad[0].tolist()}: "
                         f"got {got.flatten()[bad[0][0]].item()} want {want.flatten()[bad[0][0]].item()}")

    def pattern(n, r, dtype, mod):
        # small integers: every sum below is exact in every dtype checked
        return ((torch.arange(n, device=dev) % mod) + r).to(dtype)

    sizes = [1, 7, 1000, 65537, (1 << 20) + 3, 1 << 22]
    for dtype, mod in [(torch.float32, 97), (torch.int64, 97), (torch.bfloat16, 13), (torch.float16, 13), (torch.int32, 97)]:
        for n in sizes:
            if dtype != torch.float32 and n > (1 << 20) + 3:
                continue
            tag = f"{dtype} n={n}"
            step(tag)
            idx = torch.arange(n, device=dev) % mod
            rsum = world * (world - 1) // 2
            want_sum = (idx * world + rsum).to(dtype)
            x = pattern(n, rank, dtype, mod)
            dist.all_reduce(x)
            check(f"all_reduce sum {tag}", x, want_sum)
            x = pattern(n, rank, dtype, mod)
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
            check(f"all_reduce max {tag}", x, (idx + world - 1).to(dtype))
            x = pattern(n, rank, dtype, mod) if rank == world - 1 else torch.full((n,), -1, device=dev).to(dtype)
            dist.broadcast(x, src=world - 1)
            check(f"broadcast {tag}", x, pattern(n, world - 1, dtype, mod))
            x = pattern(n, rank, dtype, mod)
            dist.reduce(x, dst=0)
            if rank == 0:
                check(f"reduce {tag}", x, want_sum)
            if n <= (1 << 20) + 3:
                out = torch.full((n * world,), -1, device=dev).to(dtype)
                dist.all_gather_into_tensor(out, pattern(n, rank, dtype, mod))
                want = torch.cat([pattern(n, r, dtype, mod) for r in range(world)])
                check(f"all_gather {tag}", out, want)
                inp = torch.cat([pattern(n, r * 3 + rank, dtype, mod) for r in range(world)])
                out = torch.full((n,), -1, device=dev).to(dtype)
                dist.reduce_scatter_tensor(out, inp)
                want = (idx * world + world * rank * 3 + rsum).to(dtype)
                check(f"reduce_scatter {tag}", out, want)
        if dtype == torch.float32:
            x = pattern(4099, rank, dtype, 97) * world
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
            check("all_reduce avg float32 n=4099", x, (torch.arange(4099, device=dev) % 97 * world + rsum).to(dtype))

    step("unsigned")
    # Unsigned orderings and division: rank 1 holds small values, the others
    # values above 2^31, where the signed order would disagree.
    n = 1001
    idx = torch.arange(n, device=dev, dtype=torch.int64)
    vals = [idx if r == 1 else (1 << 32) - 1 - idx * r for r in range(world)]
    for op, want in [(dist.ReduceOp.MIN, torch.stack(vals).min(0).values),
                     (dist.ReduceOp.MAX, torch.stack(vals).max(0).values),
                     (dist.ReduceOp.AVG, torch.stack(vals).sum(0) % (1 << 32) // world)]:
        x = vals[rank].to(torch.uint32)
        dist.all_reduce(x, op=op)
        check(f"all_reduce {op} uint32 n={n}", x.to(torch.int64), want)
    step("float8")
    # float8: 1s and 2s, so every partial sum (an integer <= 2 * world <= 16)
    # is exact in both formats, whatever the order of the plan.
    for dtype in [torch.float8_e4m3fn, torch.float8_e5m2]:
        if world > 4 and dtype == torch.float8_e5m2:
            continue  # integers above 8 are not all exact in e5m2
        ones = [((idx * r + idx) % 2 + 1).float() for r in range(world)]
        x = ones[rank].to(dtype)
        dist.all_reduce(x)
        check(f"all_reduce sum {dtype} n={n}", x.float(), torch.stack(ones).sum(0))
        x = ones[rank].to(dtype)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        check(f"all_reduce max {dtype} n={n}", x.float(), torch.stack(ones).max(0).values)

    step("host-staged collectives")
    # Host-staged collectives (all-to-all, gather, scatter run through host
    # memory): exact values; the input is written just after a long kernel
    # on the current stream, so a call that read it early sees -7s.
    def late(t):
        torch.cuda._sleep(20_000_000)
        x = torch.full_like(t, -7)
        x.copy_(t)
        return x

    ar = lambda n: torch.arange(n, device=dev, dtype=torch.int64)  # noqa: E731
    for n in [0, 1, 13, 4099]:
        tag = f"n={n}"
        inp = late(torch.cat([ar(n) + 1000 * rank + 100_000 * p for p in range(world)]))
        out = torch.full((n * world,), -1, device=dev, dtype=torch.int64)
        dist.all_to_all_single(out, inp)
        check(f"all_to_all_single {tag}", out, torch.cat([ar(n) + 1000 * p + 100_000 * rank for p in range(world)]))
        # uneven: rank r sends (r + p) % 3 + n elements to rank p
        sizes_to = [(rank + p) % 3 + n for p in range(world)]
        sizes_from = [(r + rank) % 3 + n for r in range(world)]
        inp = late(torch.cat([ar(sizes_to[p]) + 1000 * rank + 100_000 * p for p in range(world)]))
        out = torch.full((sum(sizes_from),), -1, device=dev, dtype=torch.int64)
        dist.all_to_all_single(out, inp, output_split_sizes=sizes_from, input_split_sizes=sizes_to)
        check(f"all_to_all_single uneven {tag}", out, torch.cat([ar(sizes_from[r]) + 1000 * r + 100_000 * rank for r in range(world)]))
        x = late(ar(n) + 1000 * rank)
        dst = world - 1
        outs = [torch.full((n,), -1, device=dev, dtype=torch.int64) for _ in range(world)] if rank == dst else None
        dist.gather(x, gather_list=outs, dst=dst)
        if rank == dst:
            check(f"gather {tag}", torch.cat(outs), torch.cat([ar(n) + 1000 * r for r in range(world)]))
        ins = [late(ar(n) + 1000 * r + 7) for r in range(world)] if rank == 0 else None
        out = torch.full((n,), -1, device=dev, dtype=torch.int64)
        dist.scatter(out, scatter_list=ins, src=0)
        check(f"scatter {tag}", out, ar(n) + 1000 * rank + 7)

    step("point to point")
    # Point-to-point on CUDA tensors (through host memory): a ring shift as
    # batch_isend_irecv with the receive listed first on every rank (the
    # extension issues the batch's receives after its sends), then plain
    # isend/recv; 2^21 int64 (16 MiB) is more than a link holds in flight.
    if world > 1:
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        for n in [0, 1, 13, 1 << 21]:
            tag = f"n={n}"
            x = late(ar(n) + 1000 * rank)
            out = torch.full((n,), -1, device=dev, dtype=torch.int64)
            ops = [dist.P2POp(dist.irecv, out, prv), dist.P2POp(dist.isend, x, nxt)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            check(f"batch_isend_irecv ring {tag}", out, ar(n) + 1000 * prv)
            x = late(ar(n) + 7 * rank)
            w = dist.isend(x, nxt)
            out = torch.full((n,), -1, device=dev, dtype=torch.int64)
            dist.recv(out, prv)
            w.wait()
            check(f"isend/recv {tag}", out, ar(n) + 7 * prv)

    step("sparse")
    # Sparse COO allreduce (SUM) of CUDA tensors, through host memory: rank r
    # holds value r+1 at indices r..r+9 (one duplicate at r), so index i sums
    # the ranks r with r <= i <= r+9, and index r also gets r+1 once more.
    idx = torch.tensor([list(range(rank, rank + 10)) + [rank]], device=dev)
    sp = torch.sparse_coo_tensor(idx, torch.full((11,), float(rank + 1), device=dev), (world + 10,))
    dist.all_reduce(sp)
    want = torch.zeros(world + 10)
    for r in range(world):
        want[r:r + 10] += r + 1
        want[r] += r + 1
    if not (sp.is_sparse and sp.device == dev):
        fails.append(f"sparse all_reduce: result is sparse={sp.is_sparse} on {sp.device}, want sparse on {dev}")
    check("sparse all_reduce cuda", sp.to_dense(), want.to(dev))

    step("stream semantics")
    # Stream semantics: the input is written by a slow kernel on the current
    # stream just before the call; async work, then a kernel after wait().
    n = 1 << 24
    for it in range(3):
        a = torch.randn(2048, 2048, device=dev)
        for _ in range(20):
            a = a @ a / 2048.0  # keeps the stream busy for a while
        x = torch.full((n,), float(rank + it), device=dev) + 0 * a[0, 0]
        work = dist.all_reduce(x, async_op=True)
        work.wait()
        y = x * 2
        want = 2.0 * (world * it + world * (world - 1) / 2)
        if not torch.all(y == want).item():
            fails.append(f"stream order iteration {it}: got {y[0].item()} .. {y[-1].item()}, want {want}")

    step("timing")
    # Timing: float32 all_reduce, median of 20 with CUDA events.
    lines = []
    for n in [1024, 1 << 16, 1 << 20, 1 << 24]:
        x = torch.ones(n, device=dev)
        for _ in range(3):
            dist.all_reduce(x)
        ts = []
        for _ in range(20):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            dist.all_reduce(x)
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) * 1000)
        ts.sort()
        t = ts[len(ts) // 2]
        bus = 4 * n / (t * 1e-6) * 2 * (world - 1) / world / 1e9 if world > 1 else 0
        lines.append(f"{4 * n:>11} B {t:10.1f} us busbw {bus:7.2f} GB/s")
    dist.barrier()
    host = os.environ.get("GOTREE_HOST_ID", "one host")
    status = "ok" if not fails else f"{len(fails)} FAILED"
    print(f"torch_check rank {rank}/{world} ({host}) on {dev}: {status}", flush=True)
    for f in fails[:10]:
        print(f"  rank {rank}: {f}", flush=True)
    if rank == 0:
        for line in lines:
            print(f"  rank 0 all_reduce {line}", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
