"""torchrun worker: a two-layer model trained 10 steps with DistributedDataParallel on
gotree ends with the same parameters as the same run on gloo (same seeds)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from _common import Checker  # noqa: E402

STEPS = 10


class WithUnused(torch.nn.Module):
    """Its `spare` layer is used on odd steps only: find_unused_parameters must cope."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
        self.spare = torch.nn.Linear(8, 8)
        self.step = 0

    def forward(self, x):
        y = self.body(x)
        self.step += 1
        return self.spare(y) if self.step % 2 == 0 else y


class SparseEmbed(torch.nn.Module):
    """An embedding bag with sparse gradients (a recommender's table): DDP
    allreduces its gradient as a sparse COO tensor."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(97, 32, mode="sum", sparse=True)
        self.head = torch.nn.Linear(32, 8)

    def forward(self, x):
        # x: 16 x 32 floats; map them to 16 bags of 4 rows each
        ids = (x[:, :4].abs() * 1000).long() % 97
        return self.head(self.emb(ids) + x)


def make_model(unused=False, sparse=False):
    torch.manual_seed(1234)
    if sparse:
        return SparseEmbed()
    if unused:
        return WithUnused()
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))


def train(pg, rank, sparse=False, powersgd=False, **ddp_kwargs):
    model = make_model(ddp_kwargs.get("find_unused_parameters", False), sparse)
    # every rank starts differently: DDP's construction broadcast must fix that
    with torch.no_grad():
        for p in model.parameters():
            p.add_(rank * 0.01)
    ddp = DDP(model, process_group=pg, **ddp_kwargs)
    if powersgd:
        # From its third step the hook's future callbacks issue allreduces and
        # wait for their futures, on the thread that completed the first.
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        state = powerSGD_hook.PowerSGDState(process_group=pg, matrix_approximation_rank=1, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    # (SGD without momentum for sparse gradients)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.0 if sparse else 0.9)
    losses = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 8, generator=g)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        if sparse:
            # the gradient DDP reduced is still sparse (the sparse allreduce ran)
            assert model.emb.weight.grad.is_sparse, "embedding gradient is not sparse"
        opt.step()
        losses.append(loss.item())
    return [p.detach().clone() for p in model.parameters()], losses


def nested_futures(c, rank, n):
    """A future callback that issues collectives and waits for their futures,
    two levels deep: it must not wait for the thread that runs it."""
    t1, t2, t3 = torch.full((3,), rank + 1.0), torch.full((5,), rank + 2.0), torch.full((7,), rank + 3.0)

    def inner(_):
        dist.all_reduce(t3, async_op=True).get_future().wait()
        return t3

    def outer(_):
        return dist.all_reduce(t2, async_op=True).get_future().then(inner).wait()

    if rank == 0:
        time.sleep(0.3)  # the other ranks attach their callbacks before t1 completes
    got = dist.all_reduce(t1, async_op=True).get_future().then(outer).wait()
    s = n * (n + 1) / 2
    c.check(torch.equal(t1, torch.full((3,), s)) and torch.equal(t2, torch.full((5,), s + n)), f"nested futures: t1 {t1[0].item()}, t2 {t2[0].item()}")
    c.check(torch.equal(got, torch.full((7,), s + 2 * n)), f"nested futures: t3 {got[0].item()}, want {s + 2 * n}")


def main():
    dist.init_process_group(backend="gotree")
    c = Checker("ddp")
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    nested_futures(c, rank, n)

    for kwargs in (
        {},
        {"bucket_cap_mb": 0.001, "gradient_as_bucket_view": True},
        {"find_unused_parameters": True},
        {"sparse": True},
        {"powersgd": True},
    ):
        init = [p.detach().clone() for p in make_model(kwargs.get("find_unused_parameters", False), kwargs.get("sparse", False)).parameters()]
        got, got_losses = train(None, rank, **kwargs)  # default group: gotree
        ref, ref_losses = train(gloo, rank, **kwargs)
        tag = f"DDP {kwargs or 'default buckets'}"
        c.check(len(got) == len(ref) == len(init), f"{tag}: {len(init)} parameter tensors")
        for i, (a, b) in enumerate(zip(got, ref)):
            c.check(
                torch.allclose(a, b, rtol=1e-5, atol=1e-6),
                f"{tag}: parameter {i} gotree vs gloo max diff {(a - b).abs().max().item():.3g}",
            )
        c.check(
            all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(got_losses, ref_losses)),
            f"{tag}: losses gotree {got_losses[-1]:.6f} vs gloo {ref_losses[-1]:.6f}",
        )
        c.check(any(not torch.equal(a, b) for a, b in zip(got, init)), f"{tag}: training changed the parameters")
        # every rank holds the same parameters (gathered over gloo, independent of gotree)
        flat = torch.cat([p.reshape(-1) for p in got])
        all_flat = [torch.empty_like(flat) for _ in range(n)]
        dist.all_gather(all_flat, flat, group=gloo)
        c.check(all(torch.equal(all_flat[0], f) for f in all_flat), f"{tag}: parameters equal on every rank")
    c.finish()


if __name__ == "__main__":
    main()
