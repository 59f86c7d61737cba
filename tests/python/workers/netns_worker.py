"""torchrun worker for tests/python/test_netns.py: collectives across emulated nodes.

Started by torchrun in each network namespace of tests/netns/netns.sh (2 namespaces x
2 ranks). Ranks on one namespace-node share a GOTREE_HOST_ID, so gotree links them by
shared memory; ranks on different nodes talk TCP over the veth pairs. Which rank lives
where comes from the host ids themselves (all_gather_object), not from the rank
numbers, since c10d rendezvous may order nodes either way.

Every result is exact: integer-valued inputs (int64, int32, and float32/float64 holding
small integers), so sums, products, min and max have one right answer.
Groups: the world (mixed shm + TCP), each node's pair (shm only), a cross-node pair (TCP
only) and a 3-rank group (mixed, uneven).
"""

import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed import ReduceOp  # noqa: E402

from _common import Checker  # noqa: E402

SIZES = [1, 7, 4099, (1 << 20) + 3]


def exercise(c, g, label):
    """Every collective on group g; exact checks. Ranks are group ranks."""
    gr, gn = dist.get_rank(g), dist.get_world_size(g)
    for numel in SIZES:
        for dt in (torch.int64, torch.float32, torch.int32, torch.float64):
            x = torch.arange(numel, dtype=dt) % 1000 + gr
            dist.all_reduce(x, group=g)
            want = (torch.arange(numel, dtype=dt) % 1000) * gn + gn * (gn - 1) // 2
            c.check(torch.equal(x, want), f"{label}: allreduce SUM {numel} x {dt}")
    for op, ref in ((ReduceOp.MAX, max), (ReduceOp.MIN, min)):
        x = torch.full((1000,), float(gr * 3 - 2))
        dist.all_reduce(x, op=op, group=g)
        c.check(torch.equal(x, torch.full((1000,), float(ref(r * 3 - 2 for r in range(gn))))), f"{label}: allreduce {op}")
    x = torch.full((513,), 2, dtype=torch.int64)
    dist.all_reduce(x, op=ReduceOp.PRODUCT, group=g)
    c.check(torch.equal(x, torch.full((513,), 2**gn, dtype=torch.int64)), f"{label}: allreduce PRODUCT")
    for root in range(gn):
        b = torch.arange(70001, dtype=torch.int32) * (gr + 1)
        dist.broadcast(b, src=dist.get_global_rank(g, root), group=g)
        c.check(torch.equal(b, torch.arange(70001, dtype=torch.int32) * (root + 1)), f"{label}: broadcast from group rank {root}")
    m = 33333
    out = torch.empty(gn * m, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.arange(m, dtype=torch.int64) + gr * 10**6, group=g)
    c.check(torch.equal(out, torch.cat([torch.arange(m, dtype=torch.int64) + r * 10**6 for r in range(gn)])), f"{label}: all_gather_into_tensor")
    lst = [torch.empty(5) for _ in range(gn)]
    dist.all_gather(lst, torch.full((5,), float(gr)), group=g)
    c.check(all(torch.equal(t, torch.full((5,), float(r))) for r, t in enumerate(lst)), f"{label}: all_gather (list)")
    if hasattr(dist, "reduce_scatter_tensor"):
        try:
            inp = torch.arange(gn * 1001, dtype=torch.int64) + gr
            o = torch.empty(1001, dtype=torch.int64)
            dist.reduce_scatter_tensor(o, inp, group=g)
            want = torch.arange(gr * 1001, (gr + 1) * 1001, dtype=torch.int64) * gn + gn * (gn - 1) // 2
            c.check(torch.equal(o, want), f"{label}: reduce_scatter_tensor")
        except (RuntimeError, NotImplementedError) as e:
            if "does not support" not in str(e):
                raise
    try:
        inp = torch.arange(gn * 257, dtype=torch.int64) + gr * 10**6
        o = torch.empty(gn * 257, dtype=torch.int64)
        dist.all_to_all_single(o, inp, group=g)
        want = torch.cat([torch.arange(gr * 257, (gr + 1) * 257, dtype=torch.int64) + r * 10**6 for r in range(gn)])
        c.check(torch.equal(o, want), f"{label}: all_to_all_single")
    except (RuntimeError, NotImplementedError) as e:
        if "does not support" not in str(e):
            raise
    dist.barrier(group=g)


def main():
    dist.init_process_group(backend="gotree", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    c = Checker("netns")
    host = os.environ.get("GOTREE_HOST_ID", "")
    hosts = [None] * n
    dist.all_gather_object(hosts, host)
    nodes = sorted(set(hosts))
    by_node = {h: [r for r in range(n) if hosts[r] == h] for h in nodes}
    c.check(len(nodes) == 2 and all(len(v) == 2 for v in by_node.values()), f"2 nodes x 2 ranks: {by_node}")
    if rank == 0:
        print(f"[netns] ranks by node: {by_node}", flush=True)

    exercise(c, dist.group.WORLD, "world (shm + tcp)")

    # sub-groups: every rank creates every group, in the same order
    pairs = [by_node[h] for h in nodes]
    cross = [pairs[0][0], pairs[1][1]]
    three = sorted([pairs[0][0], pairs[0][1], pairs[1][0]])
    for members, label in ((pairs[0], "node-0 pair (shm)"), (pairs[1], "node-1 pair (shm)"), (cross, "cross pair (tcp)"), (three, "3 ranks (mixed)")):
        g = dist.new_group(members, backend="gotree")
        if rank in members:
            exercise(c, g, f"{label} {members}")

    # point-to-point across and within nodes
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            if rank == a:
                dist.send(torch.arange(9999, dtype=torch.int64) + a * 100 + b, dst=b)
            elif rank == b:
                y = torch.empty(9999, dtype=torch.int64)
                dist.recv(y, src=a)
                c.check(torch.equal(y, torch.arange(9999, dtype=torch.int64) + a * 100 + b), f"send/recv {a}->{b}")
    c.finish()


if __name__ == "__main__":
    main()
