"""torchrun worker: GOTREE_CPU_ALLOCATOR=shared,min_bytes:64K,cache_bytes:64M.

Creating the gotree group installs the shared CPU allocator: torch's own
tensors of 64 KiB and more - the model's parameters, DDP's buckets - live in
shared buffers, and (under GOTREE_ALGO=allreduce:direct) the ranks reach
each other's buckets through mappings. DDP's gradients are checked against
a float64 reference that each rank computes for every rank's data itself;
freed buffers come back from the cache; a fork()ed child allocates without
the Go runtime (torch's allocator) and sees its parent's shared tensors;
use_shared_allocator(0) turns it off for later tensors. all_gather_into_tensor
and reduce_scatter_tensor of 64 KiB blocks and more run direct (the
variable's rule), through mappings and then through process_vm_readv/writev."""

import gc
import io
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import gotree  # noqa: E402
from _common import Checker, gen  # noqa: E402
from gotree.explain import format_description  # noqa: E402

MIN = 64 << 10
STEPS = 3


def stats():
    return gotree.describe(sizes=[8])["shared_buffers"]


def make_model(dtype=torch.float32):
    torch.manual_seed(77)
    # weights of 308 KB and 157 KB (shared), biases below 64 KiB (not)
    return torch.nn.Sequential(torch.nn.Linear(257, 300), torch.nn.Tanh(), torch.nn.Linear(300, 131)).to(dtype)


def batch(step, rank, dtype):
    g = gen("shared_allocator", step, rank)
    return torch.randn(23, 257, generator=g).to(dtype), torch.randn(23, 131, generator=g).to(dtype)


def reference_grads(step, n):
    """The mean over all ranks' batches of the float64 model's gradients."""
    model = make_model(torch.float64)
    total = [torch.zeros_like(p) for p in model.parameters()]
    for r in range(n):
        model.zero_grad()
        x, y = batch(step, r, torch.float64)
        torch.nn.functional.mse_loss(model(x), y).backward()
        for t, p in zip(total, model.parameters()):
            t += p.grad
    return [t / n for t in total]


def gather_scatter(c, rank, n, what):
    """all_gather_into_tensor and reduce_scatter_tensor of int64 blocks of
    64 KiB, 64 KiB + 40 B and 192 KiB + 8 B per rank, in place and not,
    against values computed here."""

    def mine(r, count):
        return (torch.arange(count, dtype=torch.int64) * 7 + r * 13) % 1000 - 500

    def whole(r, count):
        return torch.arange(n * count, dtype=torch.int64) * 3 + r * 100003

    for count in (MIN // 8, MIN // 8 + 5, 3 * MIN // 8 + 1):
        for in_place in (False, True):
            out = torch.empty(n * count, dtype=torch.int64)
            inp = out[rank * count:(rank + 1) * count] if in_place else torch.empty(count, dtype=torch.int64)
            inp.copy_(mine(rank, count))
            dist.all_gather_into_tensor(out, inp)
            want = torch.cat([mine(q, count) for q in range(n)])
            c.check(torch.equal(out, want), f"{what}: all_gather_into_tensor of {count} int64 per rank, in place {in_place}")
            full = whole(rank, count).clone()
            o = full[rank * count:(rank + 1) * count] if in_place else torch.empty(count, dtype=torch.int64)
            dist.reduce_scatter_tensor(o, full)
            want = sum(whole(q, count) for q in range(n))[rank * count:(rank + 1) * count]
            c.check(torch.equal(o, want), f"{what}: reduce_scatter_tensor of {count} int64 per rank, in place {in_place}")


def wait_child(pid, seconds):
    """The child's exit code, or None if it did not exit in time (killed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def main():
    dist.init_process_group(backend="gotree")
    c = Checker("shared_allocator")
    rank, n = dist.get_rank(), dist.get_world_size()
    st = stats()
    alloc = st["allocator"]
    c.check(alloc["installed"] and alloc["active"] and alloc["min_bytes"] == MIN, f"allocator after init: {alloc}")
    text = io.StringIO()
    format_description(gotree.describe(sizes=[8]), text)
    c.check("Shared CPU allocator: torch's CPU tensors of" in text.getvalue(), f"explain: {text.getvalue()[:800]}")

    # torch's tensors: 64 KiB and more in shared buffers, smaller not.
    b0 = stats()["buffers"]
    small = torch.empty((MIN - 1) // 4, dtype=torch.float32)
    c.check(stats()["buffers"] == b0, f"a {small.nbytes}-byte tensor is not shared: {stats()}")
    big = torch.ones(MIN // 4 + 13, dtype=torch.float64)
    c.check(stats()["buffers"] == b0 + 1, f"a {big.nbytes}-byte tensor is shared: {stats()}")
    dist.all_reduce(big)
    c.check(torch.equal(big, torch.full_like(big, n)), "allreduce of a torch.ones tensor")

    # Freed, then the same size again: from the cache.
    reused = stats()["reused"]
    del big
    gc.collect()
    c.check(stats()["cached"] >= 1, f"freed buffer cached: {stats()}")
    again = torch.empty(MIN // 4 + 13, dtype=torch.float64)
    c.check(stats()["reused"] == reused + 1, f"reallocation served from the cache: {stats()}")
    del again

    # DDP: its buckets are torch's tensors, so shared; the ranks read and
    # write each other's through mappings.
    before = stats()
    model = make_model()
    ddp = DDP(model, bucket_cap_mb=0.25)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.0)  # lr 0: every step's reference starts from the same weights
    for step in range(STEPS):
        x, y = batch(step, rank, torch.float32)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        ref = reference_grads(step, n)
        for i, (p, r) in enumerate(zip(model.parameters(), ref)):
            err = (p.grad.double() - r).abs().max().item()
            scale = r.abs().max().item()
            c.check(err <= 1e-5 * max(scale, 1.0), f"step {step} parameter {i} {tuple(p.shape)}: gradient off by {err} (scale {scale})")
        opt.step()
    after = stats()
    c.check(after["buffers"] > before["buffers"], f"the model's weights and DDP's buckets are shared: {before} -> {after}")
    c.check(after["peer_buffers_mapped"] >= before["peer_buffers_mapped"] + n - 1, f"the peers' buckets were mapped: {before} -> {after}")
    c.check(after["peer_buffers_copied"] == before["peer_buffers_copied"], f"none had to be copied: {after}")

    # FSDP's collectives: all_gather_into_tensor and reduce_scatter_tensor
    # of blocks of 64 KiB and more run direct (GOTREE_CPU_ALLOCATOR's rule),
    # writing into and reading from the peers' tensors through mappings.
    gather_scatter(c, rank, n, "shared")
    after2 = stats()
    c.check(after2["peer_buffers_mapped"] > after["peer_buffers_mapped"], f"allgather/reduce_scatter mapped the peers' tensors: {after} -> {after2}")
    c.check(after2["peer_buffers_copied"] == before["peer_buffers_copied"], f"none had to be copied: {after2}")
    ops = [o for o in gotree.flight_record()["ops"] if o["desc"].split(" #")[0] in ("allgather", "reducescatter")]
    ran = {o.get("algo") for o in ops[-12:]}  # gather_scatter's 12 (DDP's construction gathered small tensors before)
    c.check(ran == {"direct"}, f"allgather and reduce_scatter ran {ran}, want direct")

    # A fork()ed child: its allocations use torch's allocator (the Go runtime
    # is gone there), freeing an inherited shared tensor does nothing, and
    # its writes into one reach the parent (shared memory stays shared).
    keep = torch.zeros(MIN, dtype=torch.uint8)
    drop = torch.zeros(MIN, dtype=torch.uint8)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            y = torch.empty(4 * MIN, dtype=torch.uint8)
            y.fill_(3)
            if int(y.sum()) != 3 * 4 * MIN:
                code = 4
            keep[7] = 99
            global_drop = [drop]
            del global_drop[0]
        except BaseException:  # noqa: BLE001
            code = 5
        os._exit(code)
    del drop
    code = wait_child(pid, 60)
    c.check(code == 0, f"the forked child exited with {code} (None: hung, killed)")
    c.check(int(keep[7]) == 99, "the child's write reached the parent's shared tensor")

    # Off: later tensors are torch's again; those made before keep working.
    gotree.use_shared_allocator(0)
    b1 = stats()["buffers"]
    later = torch.ones(4 * MIN, dtype=torch.int32)
    c.check(stats()["buffers"] == b1, f"after use_shared_allocator(0) a tensor is not shared: {stats()}")
    dist.all_reduce(later)
    c.check(torch.equal(later, torch.full_like(later, n)), "allreduce after turning it off")
    c.check(stats()["allocator"]["min_bytes"] == 0, f"describe: {stats()['allocator']}")
    # Still direct (the rule is the environment's), now through process_vm_readv/writev.
    gather_scatter(c, rank, n, "ordinary")
    c.expect_raises(lambda: gotree.use_shared_allocator(-1), "must not be negative", "negative min_bytes", (ValueError,))
    c.finish()


if __name__ == "__main__":
    main()
