"""torchrun worker: torch.distributed's consumers on one backend (argv[1]: gotree or gloo).

FSDP2 (fully_shard) training, DTensor redistribute on a 1-D and a 2-D DeviceMesh, and a
torch.compile'd function of functional collectives. Every rank checks what it can compute
by itself exactly (DTensor layouts, functional collectives against local references) and
saves its results to $GOTREE_CONSUMERS_OUT/<backend>_rank<r>.pt, so the pytest side can
compare gotree's run with gloo's run on the same seeds.

torch.compile uses backend="aot_eager": it traces the functional collectives through
dynamo and AOTAutograd into one graph without needing inductor's C++ toolchain (and
without minutes of compilation on a 2-core machine).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from _common import Checker  # noqa: E402


def fsdp2(c, rank, n, results):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (n,))
    torch.manual_seed(7)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(4):
        g = torch.Generator().manual_seed(100 * step + rank)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    full = [p.full_tensor().detach().clone() for p in model.parameters()]
    results["fsdp2_params"] = full
    results["fsdp2_losses"] = torch.stack(losses)
    # reference: the same training without FSDP on one process, with the global batch
    torch.manual_seed(7)
    ref = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(4):
        xs, ys = [], []
        for r in range(n):
            g = torch.Generator().manual_seed(100 * step + r)
            xs.append(torch.randn(8, 16, generator=g))
            ys.append(torch.randn(8, 4, generator=g))
        # mean over ranks of per-rank mean losses == FSDP's averaged gradients
        loss = sum(torch.nn.functional.mse_loss(ref(x), y) for x, y in zip(xs, ys)) / n
        ropt.zero_grad()
        loss.backward()
        ropt.step()
    for i, (a, b) in enumerate(zip(full, ref.parameters())):
        c.check(
            torch.allclose(a, b, rtol=1e-4, atol=1e-5),
            f"FSDP2 parameter {i} vs single-process reference: max diff {(a - b).abs().max().item():.3g}",
        )


def dtensor(c, rank, n, results):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    g = torch.Generator().manual_seed(42)
    full = torch.randn(4 * n, 6 * n, generator=g)
    mesh = init_device_mesh("cpu", (n,))
    d = distribute_tensor(full, mesh, [Shard(0)])
    c.check(torch.equal(d.to_local(), full.chunk(n, 0)[rank]), "DTensor 1-D Shard(0) local piece")
    rep = d.redistribute(mesh, [Replicate()])
    c.check(torch.equal(rep.to_local(), full), "DTensor 1-D Shard(0) -> Replicate (all_gather)")
    s1 = d.redistribute(mesh, [Shard(1)])
    c.check(torch.equal(s1.to_local(), full.chunk(n, 1)[rank]), "DTensor 1-D Shard(0) -> Shard(1) (all_to_all)")
    # Partial: every rank holds a summand
    part = torch.full((4 * n, 3), float(rank + 1))
    p = DTensor.from_local(part, mesh, [Partial()])
    total = float(n * (n + 1) // 2)
    pr = p.redistribute(mesh, [Replicate()])
    c.check(torch.equal(pr.to_local(), torch.full((4 * n, 3), total)), "DTensor 1-D Partial -> Replicate (all_reduce)")
    ps = p.redistribute(mesh, [Shard(0)])
    c.check(torch.equal(ps.to_local(), torch.full((4, 3), total)), "DTensor 1-D Partial -> Shard(0) (reduce_scatter)")
    pa = DTensor.from_local(part, mesh, [Partial("avg")]).redistribute(mesh, [Replicate()])
    c.check(torch.allclose(pa.to_local(), torch.full((4 * n, 3), total / n)), "DTensor 1-D Partial(avg) -> Replicate")
    # uneven shard (all_gather with padding) and a distributed matmul
    odd = torch.randn(2 * n + 1, 5, generator=g)
    od = distribute_tensor(odd, mesh, [Shard(0)])
    c.check(torch.equal(od.full_tensor(), odd), "DTensor uneven Shard(0) -> full_tensor")
    w = torch.randn(6 * n, 7, generator=g)
    mm = (d @ distribute_tensor(w, mesh, [Replicate()])).full_tensor()
    c.check(torch.allclose(mm, full @ w, rtol=1e-5, atol=1e-5), "DTensor matmul Shard(0) x Replicate")
    results["dtensor_1d"] = [rep.to_local(), s1.to_local(), pr.to_local(), ps.to_local(), mm]
    if n % 2 == 0 and n >= 4:
        mesh2 = init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("dp", "tp"))
        d2 = distribute_tensor(full, mesh2, [Shard(0), Shard(1)])
        dp, tp = mesh2.get_local_rank("dp"), mesh2.get_local_rank("tp")
        c.check(torch.equal(d2.to_local(), full.chunk(2, 0)[dp].chunk(n // 2, 1)[tp]), "DTensor 2-D [Shard(0), Shard(1)] local piece")
        r2 = d2.redistribute(mesh2, [Replicate(), Replicate()])
        c.check(torch.equal(r2.to_local(), full), "DTensor 2-D -> [Replicate, Replicate]")
        m2 = d2.redistribute(mesh2, [Shard(1), Replicate()])
        c.check(torch.equal(m2.to_local(), full.chunk(2, 1)[dp]), "DTensor 2-D -> [Shard(1), Replicate]")
        p2 = DTensor.from_local(torch.full((4, 4), float(rank)), mesh2, [Partial(), Shard(0)])
        got = p2.redistribute(mesh2, [Replicate(), Replicate()]).to_local()
        # dp-sum of ranks with the same tp index, then tp-concatenated
        expect = torch.cat([torch.full((4, 4), float(sum(r for r in range(n) if r % (n // 2) == t))) for t in range(n // 2)])
        c.check(torch.equal(got, expect), "DTensor 2-D [Partial, Shard(0)] -> Replicate")
        results["dtensor_2d"] = [r2.to_local(), m2.to_local(), got]
    else:
        c.check(True, "2-D mesh needs 4 ranks")


def compiled(c, rank, n, results):
    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD

    def f(x):
        a = funcol.all_reduce(x * 2, "sum", group)
        b = funcol.all_gather_tensor(x + 1, 0, group)
        r = funcol.reduce_scatter_tensor(b, "avg", 0, group)
        t = funcol.all_to_all_single(x, None, None, group)
        return a + 1, b, r, t

    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    xs = [torch.arange(4 * n, dtype=torch.float32).view(2 * n, 2) + 100 * r for r in range(n)]
    out = cf(xs[rank].clone())
    ref_a = sum(x * 2 for x in xs) + 1
    ref_b = torch.cat([x + 1 for x in xs])
    ref_r = ref_b.chunk(n, 0)[rank]  # every rank gathered the same b: the average is b's piece
    ref_t = torch.cat([x.chunk(n, 0)[rank] for x in xs])
    for name, got, ref in zip("abrt", out, (ref_a, ref_b, ref_r, ref_t)):
        c.check(torch.equal(got, ref), f"compiled functional collective {name}: {got.flatten()[:4]} vs {ref.flatten()[:4]}")
    # and again (cached graph), different values
    out2 = cf(xs[rank] * 3)
    c.check(torch.equal(out2[0], sum(x * 6 for x in xs) + 1), "compiled function, second call")
    results["compiled"] = list(out)


def main():
    backend = sys.argv[1]
    dist.init_process_group(backend=backend)
    c = Checker(f"consumers-{backend}")
    rank, n = dist.get_rank(), dist.get_world_size()
    results = {}
    only = os.environ.get("GOTREE_TEST_ONLY", "fsdp2,dtensor,compiled").split(",")
    for name in only:
        globals()[name](c, rank, n, results)
        print(f"[rank {rank}] {name}: passed={c.passed} failed={len(c.failures)}", flush=True)
    out = os.environ.get("GOTREE_CONSUMERS_OUT")
    if out:
        torch.save(results, os.path.join(out, f"{backend}_rank{rank}.pt"))
    c.finish(skip_teardown=backend != "gotree")  # gloo is the reference here; gotree's exit is tested


if __name__ == "__main__":
    main()
