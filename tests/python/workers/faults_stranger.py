"""Fault worker: collectives keep running, exactly, while strangers hit the listening ports.

After init each rank writes FAULT_DIR/ready.<rank> (its pid) and loops collectives with
exact checks (allreduce of several sizes, broadcast, all_gather_into_tensor) until the
test creates FAULT_DIR/stop; rank 0 broadcasts the stop decision so every rank leaves
the loop at the same iteration. Then point-to-point send/recv between every pair of
ranks opens fresh links through the very listeners that were attacked, and a last
allreduce checks the group once more. GOTREE_DEBUG=WARN makes the refusals visible.
"""

import os
import time
from pathlib import Path

from faults_common import init_group, Checker, report, timeout_s

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

MAX_S = 60


def main():
    T = timeout_s()
    d = Path(os.environ["FAULT_DIR"])
    init_group(T)
    rank, n = dist.get_rank(), dist.get_world_size()
    c = Checker("faults-stranger")
    t = torch.ones(4)
    dist.all_reduce(t)
    (d / f"ready.{rank}.tmp").write_text(str(os.getpid()))
    os.rename(d / f"ready.{rank}.tmp", d / f"ready.{rank}")
    t0 = time.monotonic()
    it = 0
    wrong = 0
    sizes = [1, 1000, 65536 + 3, 1 << 20]
    while True:
        flag = torch.tensor([int((d / "stop").exists() or time.monotonic() - t0 > MAX_S)])
        dist.broadcast(flag, src=0)
        if flag.item():
            break
        numel = sizes[it % len(sizes)]
        x = torch.arange(numel, dtype=torch.int64) + rank * it
        dist.all_reduce(x)
        ok = torch.equal(x, torch.arange(numel, dtype=torch.int64) * n + it * n * (n - 1) // 2)
        b = torch.full((257,), rank + it, dtype=torch.int32)
        dist.broadcast(b, src=it % n)
        ok &= torch.equal(b, torch.full((257,), it % n + it, dtype=torch.int32))
        g = torch.empty(n * 33, dtype=torch.float64)
        dist.all_gather_into_tensor(g, torch.full((33,), float(rank * 1000 + it), dtype=torch.float64))
        ok &= torch.equal(g, torch.cat([torch.full((33,), float(r * 1000 + it), dtype=torch.float64) for r in range(n)]))
        c.check(ok, f"iteration {it} exact")
        wrong += not ok
        it += 1
    # fresh point-to-point links: the lower rank dials the higher one's data listener
    for a in range(n):
        for b in range(a + 1, n):
            if rank == a:
                dist.send(torch.full((5,), float(a * 10 + b)), dst=b)
            elif rank == b:
                y = torch.zeros(5)
                dist.recv(y, src=a)
                c.check(torch.equal(y, torch.full((5,), float(a * 10 + b))), f"send/recv {a}->{b} after the attack")
    z = torch.ones(3)
    dist.all_reduce(z)
    c.check(torch.equal(z, torch.full((3,), float(n))), "allreduce after the attack")
    c.check(it >= 10, f"enough iterations ran during the attack ({it})")
    report("stranger", iterations=it, wrong=wrong, took_s=round(time.monotonic() - t0, 2), error="")
    c.finish()


if __name__ == "__main__":
    main()
