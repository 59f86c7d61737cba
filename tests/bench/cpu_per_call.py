"""Where an allreduce's time goes when ranks share CPUs: wall time and CPU time per call.

    OMP_NUM_THREADS=1 PYTHONPATH=python torchrun --standalone --nproc-per-node 4 \
        tests/bench/cpu_per_call.py [--bytes 4M] [--buffers 16] [--iters 20] [--backend gotree]

Each iteration copies a source into every buffer (timed: the cost of touching that
much memory on this machine, under the same contention), meets in a barrier, then
allreduces every buffer back to back (timed). Each rank reads its own wall clock and
`time.process_time()` (every thread of the process: Python, torch and the Go runtime);
rank 0 prints the medians over iterations of

- the copy's wall and CPU time per buffer,
- the allreduce's wall time per call (slowest rank) and CPU time per call summed over
  the ranks, and their ratio: how many CPUs the ranks kept busy.

With more ranks than CPUs, CPU time above the copy's is time the ranks spent waiting
for each other (yielding or spinning), not moving data. Every result is checked
exactly (integers below 251 summed in float32).
"""

import argparse
import os
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", default="4M", help="bytes per buffer (K/M/G suffixes)")
    ap.add_argument("--buffers", type=int, default=16, help="buffers per iteration")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations (after 3 untimed)")
    ap.add_argument("--backend", default="gotree", choices=["gotree", "gloo"])
    a = ap.parse_args()

    import torch
    import torch.distributed as dist

    import gotree  # noqa: F401  (registers the backend)
    from gotree.bench import parse_size

    torch.set_num_threads(1)
    dist.init_process_group(backend=a.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    count = max(1, parse_size(a.bytes) // 4)
    src = (torch.arange(count, dtype=torch.int64) % 251).to(torch.float32)
    want = src * n
    bufs = [src.clone() for _ in range(a.buffers)]
    rows, wrong = [], 0
    for it in range(a.iters + 3):
        t0, c0 = time.perf_counter(), time.process_time()
        for b in bufs:
            b.copy_(src)
        t1, c1 = time.perf_counter(), time.process_time()
        dist.barrier()
        t2, c2 = time.perf_counter(), time.process_time()
        for b in bufs:
            dist.all_reduce(b)
        t3, c3 = time.perf_counter(), time.process_time()
        wrong += sum(not torch.equal(b, want) for b in bufs)
        if it >= 3:
            k = len(bufs)
            rows.append(((t1 - t0) / k, (c1 - c0) / k, (t3 - t2) / k, (c3 - c2) / k))
    t = torch.tensor(rows, dtype=torch.float64)
    every = [torch.zeros_like(t) for _ in range(n)]
    dist.all_gather(every, t)
    bad = torch.tensor([wrong], dtype=torch.int64)
    dist.all_reduce(bad)
    if rank == 0:
        m = torch.stack(every)  # ranks x iterations x 4
        wall = m[:, :, 2].max(0).values
        cpu = m[:, :, 3].sum(0)

        def us(x):
            return x.median().item() * 1e6

        print(
            f"{a.backend}, {n} ranks, {count * 4} bytes x {len(bufs)} buffers, {os.cpu_count()} CPUs: "
            f"copy {us(m[:, :, 0]):.0f} us wall, {us(m[:, :, 1]):.0f} us CPU per buffer; "
            f"allreduce {us(wall):.0f} us wall per call (slowest rank), {us(cpu):.0f} us CPU per call "
            f"(all ranks) = {(cpu / wall).median().item():.2f} CPUs busy; wrong results {int(bad)}",
            flush=True,
        )
    dist.destroy_process_group()
    return 1 if int(bad) else 0


if __name__ == "__main__":
    raise SystemExit(main())
