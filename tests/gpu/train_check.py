"""Training through backend "gotree" on CUDA tensors, one process per rank:
what DDP and FSDP2 users run. tests/gpu/device_check.sh starts the ranks
like torch_check.py (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, a
GOTREE_HOST_ID per rank to emulate several nodes on one machine).

Each rank trains a float64 model on its own slice of a global batch; the
same training without any distribution, in this process on the global batch,
is the reference (a mean loss over ranks equals the average of the ranks'
gradients, which DDP and FSDP compute). Checked:

- DDP with small buckets (several allreduces per step, each completed
  through Work futures on CUDA streams), gradient_as_bucket_view, a step
  of gradient accumulation under no_sync, and a bf16-compress comm hook run
  separately against the same run on float64; DDP with the PowerSGD hook
  (its future callbacks issue collectives and wait for them);
- dist.split_group on a group bound to its GPU (eager init);
- FSDP2 (fully_shard on a CUDA DeviceMesh: all_gather_into_tensor and
  reduce_scatter_tensor per layer, prefetching on separate streams), and
  at an even world of 4 or more HSDP on a 2-D mesh (sub-groups);
- tensor parallelism (ColwiseParallel, RowwiseParallel) against the
  unsharded MLP, and torch.distributed.checkpoint save and load of an
  FSDP2 model's sharded state;
- DTensor redistribute on CUDA (all_gather, all_to_all, all_reduce,
  reduce_scatter);
- a torch.compile'd function of functional collectives (aot_eager).

Without a GPU it runs the same checks on CPU tensors (torchrun
--nproc-per-node 2 tests/gpu/train_check.py), which is how it is tested
before a GPU session. Prints one line per rank; exit status 1 on a mismatch.
"""

import datetime
import os
import shutil
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gotree  # noqa: F401  registers the backend

STEPS = 5
BATCH = 6  # per rank


def make_model(seed=11):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(24, 96), torch.nn.Tanh(), torch.nn.Linear(96, 96), torch.nn.Tanh(),
        torch.nn.Linear(96, 48), torch.nn.Tanh(), torch.nn.Linear(48, 5),
    ).double()


def batch(step, r, dev):
    g = torch.Generator().manual_seed(1000 * step + r)
    x, y = torch.randn(BATCH, 24, generator=g), torch.randn(BATCH, 5, generator=g)
    return x.double().to(dev), y.double().to(dev)


def reference(world, dev, accumulate_at=None):
    """Parameters after STEPS of plain SGD on the global batch; at step
    accumulate_at the gradients of two steps are summed before one update."""
    model = make_model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    opt.zero_grad()
    for step in range(STEPS):
        loss = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in (batch(step, r, dev) for r in range(world))) / world
        loss.backward()
        if step != accumulate_at:
            opt.step()
            opt.zero_grad()
    return [p.detach() for p in model.parameters()]


def train(model, rank, dev):
    """STEPS of SGD on this rank's slices of the global batch."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(STEPS):
        x, y = batch(step, rank, dev)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def fully_sharded(mesh, dev):
    """make_model with FSDP2 on every Linear layer and on the whole."""
    from torch.distributed.fsdp import fully_shard

    model = make_model().to(dev)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def compare(fails, what, got, want, tol):
    for i, (a, b) in enumerate(zip(got, want)):
        d = (a.detach().to(b.device) - b).abs().max().item()
        if not d <= tol:
            fails.append(f"{what}: parameter {i} differs from the single-process reference by {d:.3g} (tolerance {tol:g})")
            return


def ddp(fails, rank, world, dev):
    accumulate_at = 2
    model = DDP(make_model().to(dev), device_ids=[dev.index] if dev.type == "cuda" else None,
                bucket_cap_mb=0.01, gradient_as_bucket_view=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    opt.zero_grad()
    for step in range(STEPS):
        x, y = batch(step, rank, dev)
        if step == accumulate_at:
            with model.no_sync():
                torch.nn.functional.mse_loss(model(x), y).backward()
            continue
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    # the buckets as rebuilt after the first step (DDP starts with one big one)
    n_buckets = len(model.reducer._get_zeros_like_grad_buckets()) if hasattr(model.reducer, "_get_zeros_like_grad_buckets") else None
    if n_buckets is not None and n_buckets < 3:
        fails.append(f"DDP: {n_buckets} gradient bucket(s) with bucket_cap_mb=0.01; the check wants several")
    compare(fails, f"DDP ({n_buckets} buckets, a no_sync step)", list(model.parameters()), reference(world, dev, accumulate_at), 1e-10)

    # bf16 compression hook: the gradients pass through bfloat16 allreduces.
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    model = DDP(make_model().to(dev), device_ids=[dev.index] if dev.type == "cuda" else None, bucket_cap_mb=0.01)
    model.register_comm_hook(dist.group.WORLD, default_hooks.bf16_compress_hook)
    train(model, rank, dev)
    compare(fails, "DDP with bf16_compress_hook", list(model.parameters()), reference(world, dev), 2e-3)


def powersgd(fails, rank, world, dev):
    """DDP with the PowerSGD hook, whose future callbacks issue collectives
    and wait for them. Lossy, so checked for agreement across ranks and
    closeness to the exact reference. One bucket: on CPU tensors, callbacks
    of several buckets issue collectives in an order that depends on timing
    (tests/python/workers/powersgd_buckets.py shows the error that gives)."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    model = DDP(make_model().to(dev), device_ids=[dev.index] if dev.type == "cuda" else None)
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2)
    model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    train(model, rank, dev)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    if not all(torch.equal(every[0], f) for f in every):
        fails.append("DDP with powerSGD_hook: the ranks' parameters differ")
    compare(fails, "DDP with powerSGD_hook", list(model.parameters()), reference(world, dev), 0.05)


def split(fails, rank, world, dev):
    """dist.split_group (needs a default group bound to a device)."""
    if dev.type != "cuda":
        return "skipped (split_group needs a device_id)"
    groups = [[r for r in range(world) if r % 2 == 0], [r for r in range(world) if r % 2 == 1]]
    g = dist.split_group(split_ranks=[x for x in groups if x])
    mine = groups[rank % 2]
    t = torch.full((1000,), float(rank), device=dev)
    dist.all_reduce(t, group=g)
    want = float(sum(mine))
    if not torch.equal(t, torch.full_like(t, want)):
        fails.append(f"split_group {mine}: all_reduce gave {t[0].item()}, want {want}")


def fsdp2(fails, rank, world, dev):
    from torch.distributed.device_mesh import init_device_mesh

    model = fully_sharded(init_device_mesh(dev.type, (world,)), dev)
    train(model, rank, dev)
    compare(fails, "FSDP2", [p.full_tensor() for p in model.parameters()], reference(world, dev), 1e-10)


def hsdp(fails, rank, world, dev):
    """FSDP2 on a 2-D mesh (replicate x shard, HSDP): collectives on
    sub-groups, reduce-scatter within a shard group and allreduce across
    replicas. Needs an even world of at least 4."""
    if world < 4 or world % 2:
        return "skipped (needs an even world of 4 or more)"
    from torch.distributed.device_mesh import init_device_mesh

    model = fully_sharded(init_device_mesh(dev.type, (2, world // 2), mesh_dim_names=("replicate", "shard")), dev)
    train(model, rank, dev)
    compare(fails, f"HSDP (mesh 2 x {world // 2})", [p.full_tensor() for p in model.parameters()], reference(world, dev), 1e-10)


def tp(fails, rank, world, dev):
    """Tensor parallelism: a column-wise then a row-wise parallel Linear
    (all_reduce forward, all_gather of the gradients) against the same
    MLP unsharded, forward output and first weight's gradient."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(4)
    mlp = torch.nn.Sequential(torch.nn.Linear(24, 8 * world), torch.nn.Tanh(), torch.nn.Linear(8 * world, 5)).double().to(dev)
    ref = torch.nn.Sequential(torch.nn.Linear(24, 8 * world), torch.nn.Tanh(), torch.nn.Linear(8 * world, 5)).double().to(dev)
    ref.load_state_dict(mlp.state_dict())
    sharded = parallelize_module(mlp, init_device_mesh(dev.type, (world,)), {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x, _ = batch(0, 0, dev)  # the same input on every rank, as TP wants
    out = sharded(x)
    out.sum().backward()
    want = ref(x)
    want.sum().backward()
    for what, got, exp in (("output", out, want), ("first weight's gradient", sharded[0].weight.grad.full_tensor(), ref[0].weight.grad)):
        d = (got - exp).abs().max().item()
        if not d <= 1e-10:
            fails.append(f"tensor parallel {what} differs from the unsharded MLP by {d:.3g}")


def dcp(fails, rank, world, dev):
    """torch.distributed.checkpoint: an FSDP2 model's sharded state saved,
    then loaded into a differently initialised one."""
    import tempfile

    import torch.distributed.checkpoint as DCP
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(dev.type, (world,))
    model = fully_sharded(mesh, dev)
    train(model, rank, dev)
    where = [tempfile.mkdtemp(prefix="gotree-dcp-") if rank == 0 else None]
    dist.broadcast_object_list(where, src=0)  # one folder: the ranks share this machine
    DCP.save(get_model_state_dict(model), checkpoint_id=where[0])
    torch.manual_seed(99)
    other = fully_sharded(mesh, dev)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    state = get_model_state_dict(other)
    DCP.load(state, checkpoint_id=where[0])
    set_model_state_dict(other, state)
    for i, (a, b) in enumerate(zip(model.parameters(), other.parameters())):
        if not torch.equal(a.full_tensor(), b.full_tensor()):
            fails.append(f"DCP: parameter {i} after save and load differs from the saved one")
            break
    dist.barrier()
    if rank == 0:
        shutil.rmtree(where[0], ignore_errors=True)


def dtensor(fails, rank, world, dev):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(dev.type, (world,))
    g = torch.Generator().manual_seed(5)
    full = torch.randn(3 * world + 1, 2 * world, generator=g).to(dev)  # rows not divisible by world
    d = distribute_tensor(full, mesh, [Shard(0)])
    checks = [
        ("Shard(0) -> Replicate", d.redistribute(mesh, [Replicate()]).to_local(), full),
        ("Shard(0) -> Shard(1)", d.redistribute(mesh, [Shard(1)]).to_local(), full.chunk(world, 1)[rank]),
    ]
    part = DTensor.from_local(torch.full((2 * world, 3), float(rank + 1), device=dev), mesh, [Partial()])
    total = float(world * (world + 1) // 2)
    checks.append(("Partial -> Replicate", part.redistribute(mesh, [Replicate()]).to_local(), torch.full((2 * world, 3), total, device=dev)))
    checks.append(("Partial -> Shard(0)", part.redistribute(mesh, [Shard(0)]).to_local(), torch.full((2, 3), total, device=dev)))
    for what, got, want in checks:
        if got.device != want.device or not torch.equal(got, want):
            fails.append(f"DTensor {what}: got {got.flatten()[:4].tolist()} on {got.device}, want {want.flatten()[:4].tolist()}")


def compiled(fails, rank, world, dev):
    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD

    def f(x):
        a = funcol.all_reduce(x * 2, "sum", group)
        b = funcol.all_gather_tensor(x + 1, 0, group)
        r = funcol.reduce_scatter_tensor(b, "sum", 0, group)
        return a + 1, b, r

    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    xs = [(torch.arange(4 * world, dtype=torch.float32).view(2 * world, 2) + 100 * r).to(dev) for r in range(world)]
    out = cf(xs[rank].clone())
    ref_b = torch.cat([x + 1 for x in xs])
    refs = (sum(x * 2 for x in xs) + 1, ref_b, ref_b.chunk(world, 0)[rank] * world)
    for name, got, want in zip("abr", out, refs):
        if not torch.equal(got, want):
            fails.append(f"compiled functional collective {name}: got {got.flatten()[:4].tolist()}, want {want.flatten()[:4].tolist()}")


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    # Bound to the device where there is one (eager init; split_group needs it).
    dist.init_process_group("gotree", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=90),
                            device_id=dev if dev.type == "cuda" else None)
    fails = []
    only = os.environ.get("TRAIN_CHECK_ONLY", "ddp,powersgd,split,fsdp2,hsdp,tp,dcp,dtensor,compiled").split(",")
    ran = []
    for name in only:
        print(f"train_check rank {rank}: {name}", file=sys.stderr, flush=True)
        before, skipped = len(fails), None
        try:
            skipped = globals()[name](fails, rank, world, dev)
        except Exception as e:  # one failing part does not hide the others
            fails.append(f"{name}: {type(e).__name__}: {str(e)[:300]}")
        if not skipped:
            ran.append(name)
        print(f"train_check rank {rank}: {name}: {skipped or ('ok' if len(fails) == before else 'FAILED')}", file=sys.stderr, flush=True)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    host = os.environ.get("GOTREE_HOST_ID", "one host")
    status = "ok" if not fails else f"{len(fails)} FAILED"
    print(f"train_check rank {rank}/{world} ({host}) on {dev}: {status} ({','.join(ran)})", flush=True)
    for f in fails[:10]:
        print(f"  rank {rank}: {f}", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
