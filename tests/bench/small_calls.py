"""Small allreduces through torch.distributed, back to back: the time per call.

    OMP_NUM_THREADS=1 PYTHONPATH=python GOTREE_ALGO=auto|oneshot|ring torchrun \
        --standalone --nproc-per-node 4 tests/bench/small_calls.py

Per size (SIZES, bytes, comma-separated; default 4,1024,16384,32768): 50 untimed
calls, then REPS (default 15) repetitions of a barrier and 50 back-to-back in-place
float32 sums of one tensor. The values grow and nothing is checked: this times calls;
the correctness tests are in tests/python. NBUF (default 1) > 1 cycles the calls over
that many tensors of the size, as a training step's buckets do, so that large sizes
come from memory rather than the cache. Rank 0 prints one line,
"RES <ranks> <GOTREE_ALGO> <size>:<median us> ...", the median over repetitions of
the slowest rank's time per call. Alternate GOTREE_ALGO settings in separate runs to
compare algorithms.
"""

import os
import time


def main():
    import torch
    import torch.distributed as dist

    import gotree  # noqa: F401  (registers the backend)

    dist.init_process_group(backend="gotree")
    calls = 50
    cells = []
    for size in [int(s) for s in os.environ.get("SIZES", "4,1024,16384,32768").split(",")]:
        bufs = [torch.ones(max(1, size // 4)) for _ in range(int(os.environ.get("NBUF", "1")))]
        for i in range(calls):
            dist.all_reduce(bufs[i % len(bufs)])
        per_call = []
        for _ in range(int(os.environ.get("REPS", "15"))):
            for b in bufs:
                b.fill_(1.0)
            dist.barrier()
            t0 = time.perf_counter()
            for i in range(calls):
                dist.all_reduce(bufs[i % len(bufs)])
            per_call.append((time.perf_counter() - t0) / calls * 1e6)
        t = torch.tensor(per_call)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        cells.append(f"{size}:{t.median().item():.1f}")
    if dist.get_rank() == 0:
        print("RES", dist.get_world_size(), os.environ.get("GOTREE_ALGO", "auto"), " ".join(cells), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
