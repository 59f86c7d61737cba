"""torchrun worker: bad input gives a Python exception naming the problem, and the
group keeps working afterwards (no crash, no hang, no desync)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed import ReduceOp  # noqa: E402

from _common import Checker  # noqa: E402


def fake_cuda_tensor(*shape):
    """A tensor that reports device cuda:0 without a GPU (FakeTensor: no storage).

    The backend must refuse it by device before touching data, so this exercises the
    real check on machines without CUDA."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.empty(*shape, device="cuda")


def still_works(c, n, what):
    t = torch.ones(3)
    dist.all_reduce(t)
    c.check(torch.equal(t, torch.full((3,), float(n))), f"group still works after {what}")


def main():
    dist.init_process_group(backend="gotree")
    c = Checker("bad_input")
    rank, n = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    be = pg._get_backend(torch.device("cpu"))
    c.check(type(be).__name__ == "GotreeBackend", f"cpu backend is GotreeBackend (got {type(be).__name__})")

    # --- CUDA tensors (refused by device, before any data is touched)
    cuda = fake_cuda_tensor(4)
    opts = dist.AllreduceOptions()
    c.expect_raises(
        lambda: be.allreduce([cuda], opts),
        "gotree: cannot run this on a CUDA tensor (tensor on cuda:0)",
        "allreduce of a CUDA tensor",
    )
    bo = dist.BroadcastOptions()
    c.expect_raises(
        lambda: be.broadcast([cuda], bo),
        "gotree: cannot run this on a CUDA tensor (tensor on cuda:0)",
        "broadcast of a CUDA tensor",
    )
    c.expect_raises(
        lambda: be._allgather_base(fake_cuda_tensor(4 * n), torch.zeros(4)),
        "gotree: cannot run this on a CUDA tensor (tensor on cuda:0)",
        "all_gather_into_tensor into a CUDA tensor",
    )
    still_works(c, n, "CUDA tensors")

    # --- unsupported dtype / op (named)
    c.expect_raises(
        lambda: dist.all_reduce(torch.zeros(3, dtype=torch.float8_e4m3fnuz)),
        ["gotree: allreduce: dtype torch.float8_e4m3fnuz is not supported for reductions", "supported:", "float8_e4m3fn,", "uint64"],
        "allreduce of float8_e4m3fnuz",
        (TypeError,),
    )
    c.expect_raises(
        lambda: dist.reduce_scatter_tensor(torch.zeros(3, dtype=torch.float8_e5m2fnuz), torch.zeros(3 * n, dtype=torch.float8_e5m2fnuz)),
        "gotree: reduce_scatter_tensor: dtype torch.float8_e5m2fnuz is not supported for reductions",
        "reduce_scatter of float8_e5m2fnuz",
        (TypeError,),
    )
    c.expect_raises(
        lambda: dist.all_reduce(torch.zeros(3, dtype=torch.float8_e5m2), op=ReduceOp.BXOR),
        "ReduceOp.BXOR is only supported for integer and bool tensors, not torch.float8_e5m2",
        "BXOR on float8_e5m2",
        (TypeError,),
    )
    c.expect_raises(
        lambda: dist.all_reduce(torch.zeros(3), op=ReduceOp.BAND),
        "ReduceOp.BAND is only supported for integer and bool tensors, not torch.float32",
        "BAND on float32",
        (TypeError,),
    )
    c.expect_raises(
        lambda: dist.all_reduce(torch.zeros(3, dtype=torch.float64), op=ReduceOp.BXOR),
        "ReduceOp.BXOR is only supported for integer and bool tensors, not torch.float64",
        "BXOR on float64",
        (TypeError,),
    )
    c.expect_raises(
        lambda: dist.all_reduce(torch.zeros(3, dtype=torch.bool), op=ReduceOp.AVG),
        "ReduceOp.AVG is not supported for torch.bool tensors",
        "AVG on bool",
        (TypeError,),
    )
    mx = dist.AllreduceOptions()
    mx.reduceOp = ReduceOp.MAX
    c.expect_raises(
        lambda: be.allreduce([torch.zeros(3, dtype=torch.complex64)], mx),
        "ReduceOp.MAX is not supported for torch.complex64 tensors",
        "MAX on complex64",
        (TypeError,),
    )
    c.expect_raises(
        lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0)),
        "ReduceOp.PREMUL_SUM is only supported for floating-point tensors, not torch.int32",
        "PREMUL_SUM on int32",
        (TypeError,),
    )
    still_works(c, n, "unsupported dtypes and ops")

    # --- memory the collective cannot write (expanded: one element seen many times)
    c.expect_raises(
        lambda: dist.all_reduce(torch.zeros(1).expand(4)),
        ["gotree: allreduce: the tensor has overlapping memory", "expand()"],
        "allreduce into an expanded tensor",
        (ValueError,),
    )
    # non-contiguous tensors are staged and copied back (documented), so they work:
    base = torch.ones(4, 2)
    dist.all_reduce(base[:, 0])
    c.check(torch.equal(base[:, 0], torch.full((4,), float(n))) and torch.equal(base[:, 1], torch.ones(4)),
            "non-contiguous allreduce is staged and copied back")

    # --- output list of the wrong length; mismatched sizes and dtypes within a call
    c.expect_raises(
        lambda: dist.all_gather([torch.zeros(3) for _ in range(n + 1)], torch.zeros(3)),
        f"gotree: allgather: the output list has {n + 1} tensors, expected {n} (the group size)",
        "all_gather with too many outputs",
        (ValueError,),
    )
    if n > 1:
        c.expect_raises(
            lambda: dist.all_gather([torch.zeros(3) for _ in range(n - 1)], torch.zeros(3)),
            f"the output list has {n - 1} tensors, expected {n}",
            "all_gather with too few outputs",
            (ValueError,),
        )
    # outputs may differ in size (uneven all_gather), but not this rank's own
    outs = [torch.zeros(3) for _ in range(n)]
    outs[rank] = torch.zeros(5)
    c.expect_raises(
        lambda: dist.all_gather(outs, torch.zeros(3)),
        f"gotree: allgather: output_tensors[0][{rank}] (this rank's own slot) has 5 elements (sizes [5]), expected 3",
        "all_gather with a wrong-sized output",
        (ValueError,),
    )
    outs = [torch.zeros(3) for _ in range(n)]
    outs[0] = torch.zeros(3, dtype=torch.float64)
    c.expect_raises(
        lambda: be.allgather([outs], [torch.zeros(3)], dist.distributed_c10d.AllgatherOptions()),
        "output_tensors[0][0] has dtype torch.float64, expected torch.float32",
        "all_gather with a wrong-dtype output",
        (TypeError,),
    )
    c.expect_raises(
        lambda: dist.all_gather_into_tensor(torch.zeros(3 * n + 1), torch.zeros(3)),
        f"the output tensor has {3 * n + 1} elements, expected {3 * n}",
        "all_gather_into_tensor with a wrong-sized output",
        (ValueError,),
    )
    c.expect_raises(
        lambda: dist.all_gather_into_tensor(torch.zeros(3 * n, dtype=torch.int32), torch.zeros(3)),
        "has dtype torch.int32, the input torch.float32",
        "all_gather_into_tensor with mismatched dtypes",
        (TypeError,),
    )
    still_works(c, n, "bad all_gather arguments")

    # --- more than one tensor per call (like NCCL: exactly one)
    c.expect_raises(
        lambda: be.allreduce([torch.zeros(2), torch.zeros(2)], dist.AllreduceOptions()),
        "expected exactly one tensor in tensors (one tensor per rank per call, like NCCL), got 2",
        "allreduce of two tensors",
        (ValueError,),
    )
    c.expect_raises(
        lambda: be.broadcast([], dist.BroadcastOptions()),
        "expected exactly one tensor in tensors",
        "broadcast of no tensor",
        (ValueError,),
    )

    # --- root outside the group
    bo = dist.BroadcastOptions()
    bo.rootRank = n
    c.expect_raises(
        lambda: be.broadcast([torch.zeros(2)], bo),
        f"gotree: broadcast: root rank {n} is outside the group (valid: 0 to {n - 1})",
        "broadcast root == size",
        (ValueError,),
    )
    bo.rootRank = -1
    c.expect_raises(
        lambda: be.broadcast([torch.zeros(2)], bo),
        "root rank -1 is outside the group",
        "broadcast root -1",
        (ValueError,),
    )
    # through the public API torch may refuse first; either way an exception names it
    c.expect_raises(lambda: dist.broadcast(torch.zeros(2), src=n + 3), str(n + 3), "dist.broadcast(src=size+3)")
    still_works(c, n, "bad roots")

    # --- reduce_scatter / all_to_all / gather / scatter / p2p argument errors (rank-local)
    c.expect_raises(
        lambda: dist.reduce_scatter_tensor(torch.zeros(3), torch.zeros(3 * n + 1)),
        f"gotree: reduce_scatter_tensor: the input tensor has {3 * n + 1} elements, expected {3 * n}",
        "reduce_scatter_tensor with a wrong-sized input",
        (ValueError,),
    )
    c.expect_raises(
        lambda: dist.reduce_scatter_tensor(torch.zeros(3, dtype=torch.int32), torch.zeros(3 * n)),
        "has dtype torch.int32, the input torch.float32",
        "reduce_scatter_tensor with mismatched dtypes",
        (TypeError,),
    )
    c.expect_raises(
        lambda: dist.reduce_scatter(torch.zeros(3), [torch.zeros(3)] * (n + 1)),
        f"the input list has {n + 1} tensors, expected {n}",
        "reduce_scatter with a wrong-length list",
        (ValueError,),
    )
    c.expect_raises(
        lambda: dist.all_to_all_single(torch.zeros(4 * n), torch.zeros(4 * n), [4] * n, [4] * (n - 1) + [5]),
        f"input_split_sizes add up to {4 * n + 1} but dim 0 of the input is {4 * n}",
        "all_to_all_single with splits that do not add up",
        (ValueError,),
    )
    c.expect_raises(
        lambda: dist.all_to_all_single(torch.zeros(4 * n), torch.zeros(4 * n), [4] * (n + 1), [4] * n),
        f"output_split_sizes has {n + 1} entries, expected {n}",
        "all_to_all_single with too many split sizes",
        (ValueError,),
    )
    c.expect_raises(
        lambda: dist.all_to_all_single(torch.zeros(2 * n + 1), torch.zeros(2 * n + 1)) if n > 1 else (_ for _ in ()).throw(ValueError("must divide by the group size")),
        "must divide by the group size",
        "all_to_all_single with equal splits that do not divide",
        (ValueError,),
    )
    c.expect_raises(
        lambda: dist.all_to_all([torch.zeros(2)] * n, [torch.zeros(2)] * (n + 1)),
        f"the input list has {n + 1} tensors, expected {n}",
        "all_to_all with a wrong-length list",
        (ValueError,),
    )
    go = dist.GatherOptions()
    go.rootRank = n
    c.expect_raises(
        lambda: be.gather([], [torch.zeros(2)], go),
        f"gotree: gather: root rank {n} is outside the group",
        "gather root outside the group",
        (ValueError,),
    )
    go.rootRank = rank  # every rank is "root" of its own call: local check only
    c.expect_raises(
        lambda: be.gather([[torch.zeros(2)] * (n + 2)], [torch.zeros(2)], go),
        f"gotree: gather: the output list has {n + 2} tensors, expected {n}",
        "gather with a wrong-length list",
        (ValueError,),
    )
    c.expect_raises(
        lambda: be.gather([[torch.zeros(2)] * n, [torch.zeros(2)] * n], [torch.zeros(2)], go),
        "gotree: gather: the root expects exactly one output list, got 2",
        "gather with two output lists",
        (ValueError,),
    )
    if n > 1:
        go.rootRank = (rank + 1) % n  # every rank passes outputs it must not
        c.expect_raises(
            lambda: be.gather([[torch.zeros(2)] * n], [torch.zeros(2)], go),
            f"gotree: gather: only the root (rank {(rank + 1) % n}) passes output tensors; rank {rank} passed 1 list(s)",
            "gather with outputs on a non-root rank",
            (ValueError,),
        )
    so = dist.ScatterOptions()
    so.rootRank = rank  # every rank is "root" of its own call: local check only
    c.expect_raises(
        lambda: be.scatter([torch.zeros(2)], [[torch.zeros(2)] * (n + 1)], so),
        f"gotree: scatter: the input list has {n + 1} tensors, expected {n}",
        "scatter with a wrong-length list",
        (ValueError,),
    )
    if n > 1:
        so.rootRank = (rank + 1) % n
        c.expect_raises(
            lambda: be.scatter([torch.zeros(2)], [[torch.zeros(2)] * n], so),
            f"gotree: scatter: only the root (rank {(rank + 1) % n}) passes input tensors; rank {rank} passed 1 list(s)",
            "scatter with inputs on a non-root rank",
            (ValueError,),
        )
    c.expect_raises(
        lambda: be.send([torch.zeros(2)], n + 1, 0),
        f"gotree: send: destination rank {n + 1} is outside the group",
        "send to a rank outside the group",
        (ValueError,),
    )
    c.expect_raises(
        lambda: be.recv_anysource([torch.zeros(0)], 0),
        ["recv (any source)", "0 elements", "src="] if n > 1 else ["recv (any source)", "rank 0 is alone in its group"],
        "recv from any source of an empty tensor" if n > 1 else "recv from any source alone in the group",
    )
    c.expect_raises(
        lambda: be.alltoall_base(cuda, torch.zeros(4), [], [], dist.AllToAllOptions()),
        "gotree: cannot run this on a CUDA tensor",
        "all_to_all_single of a CUDA tensor",
    )
    still_works(c, n, "bad reduce_scatter/all_to_all/gather/scatter/p2p arguments")

    # --- arguments that disagree between ranks: the library's tags catch them and every
    # rank of the group gets an exception (the group is then aborted; the default group
    # keeps working)
    if n > 1:
        import datetime as _dt
        import time

        for what, fn in [
            ("reduce_scatter_tensor with a count that differs between ranks",
             lambda g: dist.reduce_scatter_tensor(torch.zeros(3 + rank), torch.ones(n * (3 + rank)), group=g)),
            ("all_to_all_single with splits that disagree between ranks",
             lambda g: dist.all_to_all_single(torch.zeros(2 * n + rank), torch.ones(2 * n),
                                              [2 + rank] + [2] * (n - 1), [2] * n, group=g)),
            ("all_reduce with dtypes that differ between ranks",
             lambda g: dist.all_reduce(torch.ones(4, dtype=torch.float32 if rank == 0 else torch.int32), group=g)),
        ]:
            g = dist.new_group(backend="gotree", timeout=_dt.timedelta(seconds=30))
            t0 = time.monotonic()
            def op_then_barrier(fn=fn, g=g):
                # A rank whose own data arrived intact may finish the operation itself
                # (uneven all-to-all: only the receiver of a wrong-sized message can tell);
                # the group is aborted then, so its next operation raises.
                fn(g)
                dist.barrier(group=g)

            e = c.expect_raises(op_then_barrier, "gotree", what, (RuntimeError,))
            print(f"[rank {rank}] {what}: {time.monotonic() - t0:.1f} s: {e}", flush=True)
            dist.destroy_process_group(g)
        still_works(c, n, "cross-rank mismatches on other groups")

    # --- a forked child must get a clear error, not a hang; the parent keeps working
    r_fd, w_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never touch Go
        os.close(r_fd)
        msg = b"no error"
        try:
            dist.all_reduce(torch.ones(2))
        except Exception as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {e}".encode()
        os.write(w_fd, msg[:4000])
        os._exit(0)
    os.close(w_fd)
    data = b""
    while True:
        chunk = os.read(r_fd, 4096)
        if not chunk:
            break
        data += chunk
    os.close(r_fd)
    os.waitpid(pid, 0)
    text = data.decode(errors="replace")
    c.check("forked child" in text and "fork()" in text, f"forked child gets a clear error (got {text[:300]!r})")
    still_works(c, n, "a forked child")

    # --- Work.wait(timeout) that runs out raises, and the work still completes later
    import datetime
    import time

    if rank == n - 1 and n > 1:
        time.sleep(2.0)
    t = torch.ones(4)
    w = dist.all_reduce(t, async_op=True)
    if rank == 0 and n > 1:
        c.expect_raises(
            lambda: w.wait(timeout=datetime.timedelta(milliseconds=300)),
            ["Work.wait(timeout=300 ms) ran out", "has not finished"],
            "Work.wait with a short timeout",
        )
    c.check(w.wait() is True and torch.equal(t, torch.full((4,), float(n))), "the work completes after a timed-out wait")
    still_works(c, n, "a timed-out wait")

    # --- after shutdown: a clear error
    g = dist.new_group(backend="gotree")
    dist.destroy_process_group(g)
    c.check(True, "destroying a gotree sub-group works")
    c.finish()


if __name__ == "__main__":
    main()
