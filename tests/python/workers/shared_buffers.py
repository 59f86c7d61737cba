"""torchrun worker: tensors from gotree.empty (memory the host's ranks map).

Under GOTREE_ALGO=allreduce:direct every allreduce runs single-copy: on
gotree.empty tensors the ranks read and write each other's tensors through
mappings (describe's shared_buffers counts them), on a mix with ordinary
tensors the rest through process_vm_readv/writev. Every result is checked
exactly (integers; float64 and float32 sums of small integers), at awkward
sizes, on views at an offset, and for all_to_all_single's single-copy
blocks; the memory returns when the tensors are freed."""

import gc
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gotree  # noqa: E402
from _common import Checker  # noqa: E402
from gotree.explain import format_description  # noqa: E402


def shared_stats():
    return gotree.describe(sizes=[8])["shared_buffers"]


def main():
    dist.init_process_group(backend="gotree")
    c = Checker("shared_buffers")
    rank, n = dist.get_rank(), dist.get_world_size()
    before = shared_stats()

    # gotree.empty itself.
    t = gotree.empty(2, 3, dtype=torch.int32)
    c.check(t.shape == (2, 3) and t.dtype == torch.int32 and bool((t == 0).all()), f"empty(2, 3): {t}")
    u = gotree.empty((5,))
    c.check(u.dtype == torch.get_default_dtype() and u.shape == (5,), "default dtype")
    c.check(gotree.empty(0, 4).numel() == 0, "no elements")
    c.expect_raises(lambda: gotree.empty(-1), "negative dimension", "negative size", (ValueError,))
    c.check(shared_stats()["buffers"] == before["buffers"] + 2, f"two buffers live: {shared_stats()}")
    del t, u
    gc.collect()

    # allreduce: all shared, or rank 0's ordinary (mixed); views at an offset.
    for mixed in (False, True):
        for dtype in (torch.int64, torch.float64, torch.float32, torch.int8):
            for count in (1, 7, 1031, 40009, (1 << 20) + 3):
                if dtype == torch.int8 and count > 40009:
                    continue
                own = torch.zeros if mixed and rank == 0 else gotree.empty
                base = own(count + 5, dtype=dtype)
                x = base[5:]  # a view 5 elements in
                vals = (torch.arange(count, dtype=torch.int64) * 7 + rank * 13) % 23 - 11
                x.copy_(vals.to(dtype))
                dist.all_reduce(x)
                want = sum((torch.arange(count, dtype=torch.int64) * 7 + r * 13) % 23 - 11 for r in range(n))
                c.check(torch.equal(x.to(torch.int64), want), f"allreduce {dtype} count {count} mixed={mixed}")
                c.check(bool((base[:5] == 0).all()), f"allreduce {dtype} count {count}: wrote before the view")

    # all_to_all_single: 1 MiB blocks move single-copy, read from the
    # sender's gotree.empty tensor through its mapping.
    blk = (1 << 20) // 4 + 3
    inp = gotree.empty(n * blk, dtype=torch.int32)
    inp.copy_(torch.arange(n * blk, dtype=torch.int32) + rank * 1000)
    out = gotree.empty(n * blk, dtype=torch.int32)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.arange(rank * blk, (rank + 1) * blk, dtype=torch.int32) + r * 1000 for r in range(n)])
    c.check(torch.equal(out, want), "all_to_all_single of 1 MiB blocks")

    after = shared_stats()
    mapped = after["peer_buffers_mapped"] - before["peer_buffers_mapped"]
    c.check(mapped >= n - 1, f"no peer buffer was mapped: {after}")
    c.check(after["peer_buffers_copied"] == before["peer_buffers_copied"], f"some could not be mapped: {after}")
    text = io.StringIO()
    format_description(gotree.describe(sizes=[8]), text)
    want = f"direct plans reached {after['peer_buffers_mapped']} of the peers' through mappings"
    c.check(want in text.getvalue(), f"explain lacks {want!r}: {text.getvalue()[:600]}")
    del inp, out, base, x
    gc.collect()
    c.check(shared_stats()["buffers"] == before["buffers"], f"buffers not freed: {shared_stats()} (before {before})")
    c.finish()


if __name__ == "__main__":
    main()
