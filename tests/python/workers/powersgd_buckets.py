"""torchrun worker: DDP with the PowerSGD hook over several gradient buckets on CPU tensors.

The hook's future callbacks issue collectives while the autograd thread issues the next
buckets' allreduces, so the order in which they meet can differ between ranks (gloo hangs
here). gotree must either run it or fail within seconds with an error that names the cause;
the pytest side checks which, and that nothing hangs."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import gotree  # noqa: E402,F401


def main():
    dist.init_process_group("gotree")
    rank = dist.get_rank()
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(24, 96), torch.nn.Tanh(), torch.nn.Linear(96, 96), torch.nn.Tanh(), torch.nn.Linear(96, 5))
    ddp = DDP(model, bucket_cap_mb=0.01)
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
    ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(6):
        g = torch.Generator().manual_seed(100 * step + rank)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(torch.randn(6, 24, generator=g)), torch.randn(6, 5, generator=g)).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(every, flat)
    assert all(torch.equal(every[0], f) for f in every), "ranks ended with different parameters"
    print(f"powersgd_buckets rank {rank}: trained", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
