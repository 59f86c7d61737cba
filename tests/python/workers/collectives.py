"""torchrun worker: every collective of backend gotree against an independent reference.

Each rank builds every rank's input from a deterministic seed, so each rank computes
the expected result by itself (float64 / int64) and compares: integers exactly,
floats within a bound derived from the dtype's epsilon and the operands' magnitudes,
MIN/MAX exactly. Counts 0, 1, 7 and 2^20+3; in place and out of place; contiguous and
strided; synchronous, async (future) and coalesced forms.
"""

import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed import ReduceOp  # noqa: E402

from _common import Checker, gen  # noqa: E402

BIG = 2**20 + 3
COUNTS = [0, 1, 7, BIG]

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
COMPLEX = [torch.complex64, torch.complex128]
# data movement only: dtypes the ABI has no code for travel as bytes
MOVE_ONLY = [torch.uint16, torch.float8_e4m3fn]

FLOAT_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM"]
INT_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
BOOL_OPS = ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
COMPLEX_OPS = ["SUM", "AVG", "PREMUL_SUM"]

# (normal range, PRODUCT range): no overflow for up to 4 ranks
INT_RANGE = {
    torch.int8: ((-30, 30), (-2, 2)),
    torch.uint8: ((0, 60), (0, 3)),
    torch.int16: ((-8000, 8000), (-8, 8)),
    torch.int32: ((-(2**28), 2**28), (-100, 100)),
    torch.int64: ((-(2**60), 2**60), (-1000, 1000)),
}
PREMUL_FACTOR = 0.5


def make_op(name):
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(ReduceOp, name)


def make_input(tag, rank, count, dtype, opname):
    g = gen(tag, rank, count, dtype, opname)
    if dtype.is_floating_point:
        if opname == "PRODUCT":
            x = torch.rand(count, generator=g, dtype=torch.float64) + 0.5
        else:
            x = torch.randn(count, generator=g, dtype=torch.float64) * 4
        return x.to(dtype)
    if dtype.is_complex:
        x = torch.randn(count, 2, generator=g, dtype=torch.float64)
        return torch.view_as_complex(x).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, (count,), generator=g).bool()
    if dtype in INT_RANGE:
        lo, hi = INT_RANGE[dtype][1 if opname == "PRODUCT" else 0]
        return torch.randint(lo, hi + 1, (count,), generator=g, dtype=torch.int64).to(dtype)
    # move-only dtypes: any bit pattern from small ints
    return torch.randint(0, 100, (count,), generator=g, dtype=torch.int64).to(dtype)


def reference(inputs, dtype, opname, n):
    """Expected allreduce result computed from all ranks' inputs, independently."""
    if dtype == torch.bool:
        s = torch.stack([x.to(torch.int64) for x in inputs])
        if opname in ("SUM", "MAX", "BOR"):
            return s.amax(0).bool()
        if opname in ("PRODUCT", "MIN", "BAND"):
            return s.amin(0).bool()
        return (s.sum(0) % 2).bool()  # BXOR
    if dtype in INT_RANGE:
        s = torch.stack([x.to(torch.int64) for x in inputs])
        if opname == "SUM":
            r = s.sum(0)
        elif opname == "AVG":
            r = torch.div(s.sum(0), n, rounding_mode="trunc")
        elif opname == "PRODUCT":
            r = s.prod(0)
        elif opname == "MIN":
            r = s.amin(0)
        elif opname == "MAX":
            r = s.amax(0)
        else:
            f = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[opname]
            r = functools.reduce(f, list(s))
        return r.to(dtype)
    wide = torch.complex128 if dtype.is_complex else torch.float64
    s = torch.stack([x.to(wide) for x in inputs])
    if opname == "SUM":
        return s.sum(0)
    if opname == "AVG":
        return s.sum(0) / n
    if opname == "PREMUL_SUM":
        return (s * PREMUL_FACTOR).sum(0)
    if opname == "PRODUCT":
        return s.prod(0)
    if opname == "MIN":
        return s.amin(0)
    if opname == "MAX":
        return s.amax(0)
    raise AssertionError(opname)


def matches(got, ref, inputs, dtype, opname, n):
    if dtype == torch.bool or dtype in INT_RANGE:
        return torch.equal(got, ref)
    if opname in ("MIN", "MAX"):
        return torch.equal(got.to(torch.float64), ref)  # exact: a min/max is one of the inputs
    wide = torch.complex128 if dtype.is_complex else torch.float64
    real = torch.float32 if dtype == torch.complex64 else (torch.float64 if dtype.is_complex else dtype)
    eps = torch.finfo(real).eps
    if opname == "PRODUCT":
        scale = ref.abs()
    else:
        scale = torch.stack([x.to(wide).abs() for x in inputs]).sum(0)
        if opname == "AVG":
            scale = scale / n
        if opname == "PREMUL_SUM":
            scale = scale * PREMUL_FACTOR
    # relative bound from the operands, plus the dtype's smallest normal for results
    # that round into the subnormal range
    tol = (n + 2) * eps * scale + torch.finfo(real).tiny
    err = (got.to(wide) - ref).abs()
    return bool((err <= tol).all())


def ops_for(dtype):
    if dtype == torch.bool:
        return BOOL_OPS
    if dtype.is_complex:
        return COMPLEX_OPS
    if dtype.is_floating_point:
        return FLOAT_OPS
    return INT_OPS


def check_allreduce(c, rank, n):
    pending = []  # async small-count works, checked after issuing many
    for dtype in FLOATS + INTS + [torch.bool] + COMPLEX:
        for opname in ops_for(dtype):
            for count in COUNTS:
                inputs = [make_input("ar", r, count, dtype, opname) for r in range(n)]
                ref = reference(inputs, dtype, opname, n)
                what = f"allreduce {opname} {dtype} count={count}"
                t = inputs[rank].clone()
                if count == BIG:
                    dist.all_reduce(t, op=make_op(opname))
                    c.check(matches(t, ref, inputs, dtype, opname, n), what)
                    continue
                work = dist.all_reduce(t, op=make_op(opname), async_op=True)
                pending.append((work, t, ref, inputs, dtype, opname, what))
                # strided (non-contiguous) tensor: reduced through a staging copy;
                # the elements between must stay untouched
                base = torch.stack([inputs[rank], make_input("pad", rank, count, dtype, "SUM")], 1)
                pad_before = base[:, 1].clone()
                view = base[:, 0]
                assert count <= 1 or not view.is_contiguous()
                w2 = dist.all_reduce(view, op=make_op(opname), async_op=True)
                pending.append((w2, view, ref, inputs, dtype, opname, what + " strided"))
                pending.append((None, base[:, 1], pad_before, None, dtype, "EQUAL", what + " strided padding untouched"))
        # drain per dtype: futures must complete without anyone calling wait()
        for work, t, ref, inputs, dtype_, opname, what in pending:
            if work is None:
                c.check(torch.equal(t, ref), what)
                continue
            value = work.get_future().wait()
            c.check(
                isinstance(value, list) and len(value) == 1 and value[0].data_ptr() == t.data_ptr(),
                f"{what}: future value is the output tensor list",
            )
            c.check(work.is_completed(), f"{what}: is_completed after the future")
            c.check(work.wait() is True, f"{what}: wait() returns True")
            c.check(matches(t, ref, inputs, dtype_, opname, n), what)
        pending.clear()
    # a big strided case, each way
    for dtype in (torch.float32, torch.int64):
        inputs = [make_input("ars", r, BIG, dtype, "SUM") for r in range(n)]
        ref = reference(inputs, dtype, "SUM", n)
        base = torch.zeros(BIG, 3, dtype=dtype)
        base[:, 1] = inputs[rank]
        view = base[:, 1]
        dist.all_reduce(view)
        c.check(matches(view, ref, inputs, dtype, "SUM", n), f"allreduce SUM {dtype} strided count={BIG}")
        c.check(bool((base[:, 0] == 0).all() and (base[:, 2] == 0).all()), f"strided {dtype} neighbours untouched")


def check_broadcast(c, rank, n):
    dtypes = FLOATS + INTS + [torch.bool] + COMPLEX + MOVE_ONLY
    for dtype in dtypes:
        for count in COUNTS:
            roots = [n - 1] if count == BIG else range(n)
            for root in roots:
                what = f"broadcast {dtype} count={count} root={root}"
                expect = make_input("bc", root, count, dtype, "SUM")
                t = expect.clone() if rank == root else make_input("bcjunk", rank, count, dtype, "SUM")
                dist.broadcast(t, src=root)
                c.check(bytes_equal(t, expect), what)
                if count == 7:
                    base = torch.stack([make_input("bcpad", rank, count, dtype, "SUM")] * 2, 1)
                    if rank == root:
                        base[:, 0] = expect
                    pad = base[:, 1].clone()
                    dist.broadcast(base[:, 0], src=root)
                    c.check(bytes_equal(base[:, 0], expect), what + " strided")
                    c.check(bytes_equal(base[:, 1], pad), what + " strided padding")
    # async broadcast with a future
    t = torch.arange(5, dtype=torch.float32) if rank == 0 else torch.zeros(5)
    w = dist.broadcast(t, src=0, async_op=True)
    v = w.get_future().wait()
    c.check(torch.equal(v[0], torch.arange(5, dtype=torch.float32)), "broadcast future value")


def dense_copy(a):
    return torch.empty(a.shape, dtype=a.dtype).copy_(a)


def bytes_equal(a, b):
    return torch.equal(dense_copy(a).view(torch.uint8).reshape(-1), dense_copy(b).view(torch.uint8).reshape(-1))


def check_allgather(c, rank, n):
    dtypes = FLOATS + INTS + [torch.bool] + COMPLEX + MOVE_ONLY
    for dtype in dtypes:
        for count in COUNTS:
            ins = [make_input("ag", r, count, dtype, "SUM") for r in range(n)]
            expect = torch.cat(ins) if count else torch.empty(0, dtype=dtype)
            what = f"{dtype} count={count}"
            # list form, separate output tensors (staged)
            outs = [torch.empty(count, dtype=dtype) for _ in range(n)]
            dist.all_gather(outs, ins[rank])
            c.check(all(bytes_equal(outs[r], ins[r]) for r in range(n)), f"all_gather list {what}")
            # list form, consecutive views of one buffer (direct)
            flat = torch.empty(n * count, dtype=dtype)
            views = [flat.narrow(0, r * count, count) for r in range(n)]
            dist.all_gather(views, ins[rank])
            c.check(bytes_equal(flat, expect), f"all_gather list of views {what}")
            # into one tensor, out of place
            out = torch.empty(n * count, dtype=dtype)
            dist.all_gather_into_tensor(out, ins[rank])
            c.check(bytes_equal(out, expect), f"all_gather_into_tensor {what}")
            # in place: the input is this rank's slot of the output
            out2 = torch.empty(n * count, dtype=dtype)
            out2.narrow(0, rank * count, count).copy_(ins[rank])
            dist.all_gather_into_tensor(out2, out2.narrow(0, rank * count, count))
            c.check(bytes_equal(out2, expect), f"all_gather_into_tensor in place {what}")
            if count in (1, 7):
                # 2-D output (rank-major) and strided input/output
                out3 = torch.empty(n, count, dtype=dtype)
                dist.all_gather_into_tensor(out3, ins[rank])
                c.check(bytes_equal(out3.reshape(-1), expect), f"all_gather_into_tensor 2-D {what}")
                src = torch.stack([ins[rank], ins[rank]], 1)[:, 0]
                big = torch.stack([torch.empty(n * count, dtype=dtype)] * 2, 1)
                dist.all_gather_into_tensor(big[:, 1], src)
                c.check(bytes_equal(big[:, 1], expect), f"all_gather_into_tensor strided {what}")
                outs = [torch.empty(count, dtype=dtype) for _ in range(n)]
                dist.all_gather(outs, src)
                c.check(all(bytes_equal(outs[r], ins[r]) for r in range(n)), f"all_gather strided input {what}")
                # async + future value is the output list
                outs = [torch.empty(count, dtype=dtype) for _ in range(n)]
                w = dist.all_gather(outs, ins[rank], async_op=True)
                v = w.get_future().wait()
                c.check(
                    len(v) == n and all(bytes_equal(v[r], ins[r]) for r in range(n)),
                    f"all_gather future value {what}",
                )


def check_coalesced(c, rank, n):
    # allreduce_coalesced and allgather_into_tensor_coalesced (coalescing manager fast path)
    a = [make_input("co", r, 7, torch.float32, "SUM") for r in range(n)]
    b = [make_input("co", r, 1000, torch.int32, "SUM") for r in range(n)]
    ta, tb = a[rank].clone(), b[rank].clone()
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(ta)
        dist.all_reduce(tb)
    cm.wait()
    c.check(matches(ta, reference(a, torch.float32, "SUM", n), a, torch.float32, "SUM", n), "allreduce_coalesced f32")
    c.check(torch.equal(tb, reference(b, torch.int32, "SUM", n)), "allreduce_coalesced i32")
    oa = torch.empty(n * 7)
    ob = torch.empty(n * 1000, dtype=torch.int32)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(oa, a[rank])
        dist.all_gather_into_tensor(ob, b[rank])
    cm.wait()
    c.check(torch.equal(oa, torch.cat(a)), "allgather_into_tensor_coalesced f32")
    c.check(torch.equal(ob, torch.cat(b)), "allgather_into_tensor_coalesced i32")
    # functional collectives (torch.compile / DTensor path)
    import torch.distributed._functional_collectives as fc

    group = dist.group.WORLD
    x = a[rank].clone()
    y = fc.all_reduce(x, "sum", group)
    y = fc.wait_tensor(y)
    c.check(matches(y, reference(a, torch.float32, "SUM", n), a, torch.float32, "SUM", n), "functional all_reduce")
    z = fc.wait_tensor(fc.all_gather_tensor(b[rank], 0, group))
    c.check(torch.equal(z, torch.cat(b)), "functional all_gather_tensor")
    z2 = fc.wait_tensor(fc.broadcast(a[rank].clone(), 0, group))
    c.check(torch.equal(z2, a[0]), "functional broadcast")


def check_misc(c, rank, n):
    dist.barrier()
    works = [dist.barrier(async_op=True) for _ in range(3)]
    for w in works:
        w.wait()
        c.check(w.is_completed(), "async barrier completes")
        c.check(w.get_future().wait() == [], "barrier future value is an empty list")
    # object collectives ride on broadcast/allgather of uint8 tensors
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank})
    c.check(objs == [{"rank": r, "s": "x" * r} for r in range(n)], "all_gather_object")
    lst = [rank, "hello"] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    c.check(lst == [0, "hello"], "broadcast_object_list")
    # many async ops in flight, completed in issue order by the completion thread
    ts = [torch.full((100,), float(rank + i)) for i in range(50)]
    ws = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in ws]
    torch.futures.wait_all(futs)
    s = sum(range(n))
    c.check(all(torch.equal(t, torch.full((100,), float(s + n * i))) for i, t in enumerate(ts)), "50 async allreduces")
    # future.then chain (what DDP does) without calling wait on the work
    t = torch.ones(4)
    fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    c.check(torch.equal(fut.wait(), torch.full((4,), 2.0 * n)), "future.then chain")
    # a second gotree group alongside the default one, and a sub-group
    g2 = dist.new_group(backend="gotree")
    t = torch.full((3,), float(rank))
    dist.all_reduce(t, group=g2)
    c.check(torch.equal(t, torch.full((3,), float(s))), "second gotree group")
    if n >= 2:
        sub = dist.new_group(ranks=[0, 1], backend="gotree")
        if rank < 2:
            t = torch.full((3,), float(rank + 10))
            dist.all_reduce(t, group=sub)
            c.check(torch.equal(t, torch.full((3,), 21.0)), "sub-group of ranks 0,1")
    c.check(dist.get_backend() == "gotree", f"dist.get_backend() is gotree (got {dist.get_backend()})")


def main():
    dist.init_process_group(backend="gotree")
    c = Checker("collectives")
    rank, n = dist.get_rank(), dist.get_world_size()
    only = os.environ.get("GOTREE_TEST_ONLY", "allreduce,broadcast,allgather,coalesced,misc").split(",")
    for name in only:
        globals()["check_" + name](c, rank, n)
        print(f"[rank {rank}] {name}: passed={c.passed} failed={len(c.failures)}", flush=True)
    c.finish()


if __name__ == "__main__":
    main()
