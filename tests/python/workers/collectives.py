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
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed import ReduceOp  # noqa: E402

from _common import Checker, gen  # noqa: E402

# GOTREE_TEST_BIG: the six-rank run asks for less, since every rank computes
# every rank's input and the reference, per dtype and op, in Python.
BIG = int(os.environ.get("GOTREE_TEST_BIG", 2**20 + 3))
COUNTS = [0, 1, 7, BIG]

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
COMPLEX = [torch.complex64, torch.complex128]
# data movement only: uint16 and float8_e4m3fn (reduced in check_more_dtypes),
# and float8_e4m3fnuz, which the ABI has no code for and which travels as bytes
# (torch < 2.5 cannot even stack float8 tensors, which the strided cases need)
MOVE_ONLY = [torch.uint16] + ([torch.float8_e4m3fn, torch.float8_e4m3fnuz] if tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5) else [])

FLOAT_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM"]
INT_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
BOOL_OPS = ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
COMPLEX_OPS = ["SUM", "AVG", "PREMUL_SUM"]

# (normal range, PRODUCT range): no overflow for up to 4 ranks (the references wrap
# as the backend does beyond that)
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
            # the sum wraps in the dtype first, then divides (docs/reductions.md);
            # the input ranges keep the sum from wrapping up to 4 ranks
            wrapped = s.sum(0).to(dtype).to(torch.int64)
            r = torch.div(wrapped, n, rounding_mode="trunc")
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
    # uneven: rank r contributes uneven_count(r) elements (one rank none, one
    # big), into outputs of those sizes, some 2-D and some strided
    def uneven_count(r):
        return [5, 0, 1, 70001][r % 4] + r // 4

    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64, torch.uint16):
        ins = [make_input("agu", r, uneven_count(r), dtype, "SUM") for r in range(n)]
        what = f"all_gather uneven {dtype}"
        outs = [torch.full((uneven_count(r),), 1, dtype=dtype) for r in range(n)]
        dist.all_gather(outs, ins[rank])
        c.check(all(bytes_equal(outs[r], ins[r]) for r in range(n)), what)
        outs = [torch.empty(2, uneven_count(r), dtype=dtype)[1] if r % 2 else
                torch.empty(uneven_count(r), 2, dtype=dtype)[:, 1] for r in range(n)]
        w = dist.all_gather(outs, ins[rank], async_op=True)
        v = w.get_future().wait()
        c.check(all(bytes_equal(outs[r], ins[r]) for r in range(n)) and len(v) == n, what + " strided outputs, async")
    # strided complex outputs (torch hands the backend view_as_real of them:
    # 2-D, not flattenable by a view), equal sizes, and in all_to_all
    ins = [make_input("agc", r, 6, torch.complex64, "SUM") for r in range(n)]
    outs = [torch.empty(6, 2, dtype=torch.complex64)[:, 1] for _ in range(n)]
    dist.all_gather(outs, ins[rank])
    c.check(all(bytes_equal(outs[r], ins[r]) for r in range(n)), "all_gather strided complex outputs")
    outs = [torch.empty(6, 2, dtype=torch.complex64)[:, 0] for _ in range(n)]
    dist.all_to_all(outs, [ins[rank]] * n)
    c.check(all(bytes_equal(outs[r], ins[r]) for r in range(n)), "all_to_all strided complex outputs")
    if n > 1:
        # a rank whose own slot does not match its input is refused before anything moves
        c.expect_raises(
            lambda: dist.all_gather([torch.empty(uneven_count(r) + (r == rank)) for r in range(n)],
                                    torch.zeros(uneven_count(rank))),
            [f"output_tensors[0][{rank}] (this rank's own slot) has", "outputs of other ranks may differ"],
            "all_gather uneven: own slot the wrong size",
            (ValueError,),
        )
        dist.all_reduce(torch.ones(1))  # still usable


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


SPARSE_DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16, torch.float16]


def sparse_input(tag, rank, n, sizes, sparse_dim, nnz, dtype):
    """Rank `rank`'s sparse COO tensor: nnz entries at random indices, duplicates
    left uncoalesced (so the backend must add them), values of `dtype`."""
    g = gen("sparse", tag, rank, nnz, str(dtype))
    idx = torch.stack([torch.randint(0, sizes[d], (nnz,), generator=g) for d in range(sparse_dim)]) if sparse_dim else torch.zeros(0, nnz, dtype=torch.int64)
    shape = (nnz,) + tuple(sizes[sparse_dim:])
    if dtype.is_floating_point:
        vals = (torch.randn(shape, generator=g, dtype=torch.float64) * 4).to(dtype)
    else:
        vals = torch.randint(-1000, 1000, shape, generator=g, dtype=torch.int64).to(dtype)
    return torch.sparse_coo_tensor(idx, vals, sizes, check_invariants=True)


def check_sparse(c, rank, n):
    """allreduce of sparse COO tensors (SUM, as gloo): the result is the sum of every
    rank's tensor, coalesced, and holds exactly the union of the ranks' indices."""
    cases = [
        ("1d", (101,), 1, lambda r: 3 * r + 5),
        ("empty-rank0", (13,), 1, lambda r: 0 if r == 0 else 7),
        ("all-empty", (13,), 1, lambda r: 0),
        ("2d", (7, 11), 2, lambda r: 17 + r),
        ("hybrid", (29, 3, 2), 1, lambda r: 4 + 2 * r),  # rows of dense 3x2 blocks (embedding-style)
        ("many", (5000, 4), 1, lambda r: 2000 + 97 * r),
    ]
    for tag, sizes, sdim, nnz_of in cases:
        for dtype in SPARSE_DTYPES:
            inputs = [sparse_input(tag, r, n, sizes, sdim, nnz_of(r), dtype) for r in range(n)]
            t = inputs[rank].clone()
            what = f"sparse allreduce {tag} {list(sizes)} {dtype}"
            if tag == "1d" and dtype == torch.float32:
                w = dist.all_reduce(t, async_op=True)
                w.wait()
                c.check(w.get_future().wait()[0] is t or torch.equal(w.get_future().wait()[0].to_dense(), t.to_dense()),
                        f"{what}: the future's value is the result")
            else:
                dist.all_reduce(t)
            c.check(t.is_sparse and t.is_coalesced(), f"{what}: result is a coalesced sparse tensor")
            c.check(t.dtype == dtype and tuple(t.shape) == sizes, f"{what}: dtype/shape kept ({t.dtype}, {tuple(t.shape)})")
            union = torch.cat([x.coalesce().indices() for x in inputs], 1)
            n_unique = torch.unique(union, dim=1).shape[1] if union.shape[1] else 0
            c.check(t._nnz() == n_unique, f"{what}: nnz {t._nnz()}, expected {n_unique} (the union of the ranks' indices)")
            wide = torch.float64 if dtype.is_floating_point else torch.int64
            ref = sum(x.to_dense().to(wide) for x in inputs)
            got = t.to_dense().to(wide)
            if dtype.is_floating_point:
                scale = sum(x.to_dense().to(wide).abs() for x in inputs)
                per_elem_terms = max(n * (max(nnz_of(r) for r in range(n)) or 1), 1)
                tol = (per_elem_terms + 2) * torch.finfo(dtype).eps * scale + torch.finfo(dtype).tiny
                ok = bool(((got - ref).abs() <= tol).all())
            else:
                ok = torch.equal(got, ref)
            c.check(ok, f"{what}: values match the float64/int64 sum (max err {(got - ref).abs().max().item() if got.numel() else 0})")
    # every rank ends with the same bits (gathered as dense bytes)
    t = sparse_input("same", rank, n, (64,), 1, 40, torch.float32)
    dist.all_reduce(t)
    dense = t.to_dense()
    all_dense = [torch.empty_like(dense) for _ in range(n)]
    dist.all_gather(all_dense, dense)
    c.check(all(torch.equal(all_dense[0], d) for d in all_dense), "sparse allreduce: identical result on every rank")
    # a shape that differs between ranks fails on every rank, naming both, and the
    # group stays usable
    if n >= 2:
        bad = sparse_input("bad", rank, n, (10 + (rank == n - 1),), 1, 3, torch.float32)
        c.expect_raises(lambda: dist.all_reduce(bad), ["rank " + str(n - 1), "[11]", "[10]", "same shape"],
                        "sparse allreduce with mismatched sizes")
        t = torch.ones(3)
        dist.all_reduce(t)
        c.check(torch.equal(t, torch.full((3,), float(n))), "dense allreduce after a refused sparse one")
    c.expect_raises(lambda: dist.all_reduce(sparse_input("op", rank, n, (8,), 1, 2, torch.float32), op=ReduceOp.MAX),
                    ["sparse", "SUM only", "MAX"], "sparse allreduce with MAX", (ValueError,))


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
    # many async ops in flight (more than the library's queue once held),
    # completed in issue order by the completion thread; every third one
    # also waited for with Work.wait(), newest first
    ts = [torch.full((7,), float(rank + i)) for i in range(1100)]
    ws = [dist.all_reduce(t, async_op=True) for t in ts]
    for w in reversed(ws[::3]):
        w.wait()
    futs = [w.get_future() for w in ws]
    torch.futures.wait_all(futs)
    s = sum(range(n))
    c.check(all(torch.equal(t, torch.full((7,), float(s + n * i))) for i, t in enumerate(ts)), "1100 async allreduces")
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
    # the completion threads carry a name (top -H, py-spy, gdb)
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    c.check("gotree-complete" in names, f"a thread named gotree-complete (threads: {sorted(set(names))})")


def check_split(c, rank, n):
    """ProcessGroup.split_group (what torch.distributed.split_group calls, which on its
    own needs a CUDA device bound to the default group): the backend's split makes new
    communicators of the listed ranks; members get a working group, non-members None."""
    pg = dist.group.WORLD
    be = pg._get_backend(torch.device("cpu"))
    if not getattr(be, "supports_splitting", False):
        c.check(tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 9), "split supported from torch 2.9")
        return
    half = (n + 1) // 2
    groups = [list(range(half)), list(range(half, n))] if n > 1 else [[0]]
    mine = next(g for g in groups if rank in g)
    sub = pg.split_group(mine)
    c.check(sub is not None and sub.size() == len(mine) and sub.rank() == mine.index(rank),
            f"split_group {mine}: size and rank")
    t = torch.full((5,), float(rank + 1))
    sub.allreduce([t]).wait()
    c.check(torch.equal(t, torch.full((5,), float(sum(r + 1 for r in mine)))), f"allreduce in split group {mine}")
    # the group's backend for cpu and cuda is one communicator
    c.check(sub._get_backend(torch.device("cpu")) is sub._get_backend(torch.device("cuda")),
            "split: one backend for cpu and cuda")
    again = pg.split_group(mine)  # same ranks again: a new communicator, not the first one
    t2 = torch.full((2,), 1.0)
    again.allreduce([t2]).wait()
    c.check(again._get_backend(torch.device("cpu")) is not sub._get_backend(torch.device("cpu"))
            and torch.equal(t2, torch.full((2,), float(len(mine)))), "a second split of the same ranks")
    # ranks left out of the split get None; rank 0 alone, the others nothing
    lone = pg.split_group([0])
    c.check((lone is not None and lone.size() == 1) if rank == 0 else lone is None,
            "split_group [0]: rank 0 alone, others None")
    dist.barrier()


def rs_dtypes():
    return FLOATS + INTS + [torch.bool] + COMPLEX


def check_reduce(c, rank, n):
    """reduce to every root: the root holds op over ranks; other ranks' tensors unchanged."""
    for dtype in rs_dtypes():
        for opname in ops_for(dtype):
            counts = [0, 1, 7] + ([BIG] if (dtype, opname) in ((torch.float32, "SUM"), (torch.int64, "MAX")) else [])
            for count in counts:
                root = (count + len(opname)) % n
                inputs = [make_input("rd", r, count, dtype, opname) for r in range(n)]
                ref = reference(inputs, dtype, opname, n)
                what = f"reduce {opname} {dtype} count={count} root={root}"
                t = inputs[rank].clone()
                if count == 7:
                    base = torch.stack([t, t], 1)
                    t = base[:, 0]  # strided
                w = dist.reduce(t, dst=root, op=make_op(opname), async_op=True)
                w.wait()
                if rank == root:
                    c.check(matches(t, ref, inputs, dtype, opname, n), what)
                else:
                    c.check(torch.equal(t, inputs[rank]), what + " non-root tensor unchanged")


def check_reduce_scatter(c, rank, n):
    for dtype in rs_dtypes():
        for opname in ops_for(dtype):
            counts = [0, 1, 7] + ([BIG // 4] if (dtype, opname) in ((torch.float32, "AVG"), (torch.bfloat16, "SUM")) else [])
            for count in counts:
                inputs = [make_input("rs", r, n * count, dtype, opname) for r in range(n)]
                full = reference(inputs, dtype, opname, n)
                ref = full[rank * count:(rank + 1) * count]
                mine = [x[rank * count:(rank + 1) * count] for x in inputs]
                what = f"{opname} {dtype} count={count}"
                out = torch.empty(count, dtype=dtype)
                inp = inputs[rank].clone()
                dist.reduce_scatter_tensor(out, inp, op=make_op(opname))
                c.check(matches(out, ref, mine, dtype, opname, n), f"reduce_scatter_tensor {what}")
                c.check(torch.equal(inp, inputs[rank]), f"reduce_scatter_tensor {what}: input unchanged")
                if count == BIG // 4:
                    continue
                # list form (inputs are separate tensors; output strided)
                lst = [inputs[rank][p * count:(p + 1) * count].clone() for p in range(n)]
                base = torch.zeros(count, 2, dtype=dtype)
                w = dist.reduce_scatter(base[:, 1], lst, op=make_op(opname), async_op=True)
                v = w.get_future().wait()
                c.check(matches(base[:, 1], ref, mine, dtype, opname, n), f"reduce_scatter list {what}")
                c.check(len(v) == 1 and torch.equal(v[0], base[:, 1]), f"reduce_scatter future value {what}")
                # 2-D input (rank-major), in place: the output is this rank's row
                if count:
                    two = inputs[rank].clone().view(n, count)
                    dist.reduce_scatter_tensor(two[rank], two, op=make_op(opname))
                    c.check(matches(two[rank], ref, mine, dtype, opname, n), f"reduce_scatter_tensor in place {what}")
    # uneven blocks: block p has rs_count(p) elements on every rank, one rank's none
    def rs_count(p):
        return [3, 0, 40003, 1][p % 4] + p // 4

    for dtype, opname in ((torch.float32, "SUM"), (torch.int64, "MAX"), (torch.float64, "AVG"),
                          (torch.complex64, "PREMUL_SUM"), (torch.bool, "PRODUCT"), (torch.uint32, "BXOR")):
        blocks = [[make_input("rsu", r, rs_count(p), dtype, opname) if dtype != torch.uint32
                   else uint_input("rsu", r, rs_count(p), dtype, opname) for p in range(n)] for r in range(n)]
        mine = [blocks[r][rank] for r in range(n)]
        if dtype == torch.uint32:
            ref = torch.tensor(uint_reference(mine, dtype, opname, n), dtype=torch.int64).to(dtype)
        else:
            ref = reference(mine, dtype, opname, n)
        what = f"reduce_scatter uneven {opname} {dtype}"
        out = torch.empty(rs_count(rank), dtype=dtype)
        lst = [b.clone() for b in blocks[rank]]
        w = dist.reduce_scatter(out, lst, op=make_op(opname), async_op=True)
        w.wait()
        ok = out.tolist() == ref.tolist() if dtype == torch.uint32 else matches(out, ref, mine, dtype, opname, n)
        c.check(ok, what)
        c.check(all(bytes_equal(lst[p], blocks[rank][p]) for p in range(n)), what + ": inputs unchanged")
        # in place: the blocks are consecutive pieces of one buffer and the
        # output is this rank's
        flat = torch.cat([b.reshape(-1) for b in blocks[rank]])
        offs = [sum(rs_count(q) for q in range(p)) for p in range(n + 1)]
        views = [flat[offs[p]:offs[p + 1]] for p in range(n)]
        dist.reduce_scatter(views[rank], views, op=make_op(opname))
        ok = views[rank].tolist() == ref.tolist() if dtype == torch.uint32 else matches(views[rank], ref, mine, dtype, opname, n)
        c.check(ok, what + " in place")
    if n > 1:
        c.expect_raises(
            lambda: dist.reduce_scatter(torch.empty(rs_count(rank) + 1), [torch.zeros(rs_count(p)) for p in range(n)]),
            [f"input_list[{rank}] (this rank's block) has", "the blocks of other ranks may differ"],
            "reduce_scatter uneven: own block the wrong size",
            (ValueError,),
        )
        dist.all_reduce(torch.ones(1))  # still usable
    # coalesced (reduce_scatter_tensor_coalesced) with AVG, and PREMUL_SUM with a tensor factor
    a = [make_input("rsc", r, 5 * n, torch.float32, "SUM") for r in range(n)]
    b = [make_input("rsc", r, 3 * n, torch.float64, "SUM") for r in range(n)]
    oa, ob = torch.empty(5), torch.empty(3, dtype=torch.float64)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.reduce_scatter_tensor(oa, a[rank], op=ReduceOp.AVG)
        dist.reduce_scatter_tensor(ob, b[rank], op=ReduceOp.AVG)
    cm.wait()
    ra = reference(a, torch.float32, "AVG", n)[rank * 5:(rank + 1) * 5]
    rb = reference(b, torch.float64, "AVG", n)[rank * 3:(rank + 1) * 3]
    c.check(torch.allclose(oa.double(), ra, atol=1e-5), "reduce_scatter_tensor_coalesced AVG f32")
    c.check(torch.allclose(ob, rb, atol=1e-12), "reduce_scatter_tensor_coalesced AVG f64")
    factor = torch.tensor(0.25, dtype=torch.float64)
    t = a[rank].clone()
    out = torch.empty(5)
    dist.reduce_scatter_tensor(out, t, op=dist._make_nccl_premul_sum(factor))
    ref = (torch.stack([x.double() for x in a]) * 0.25).sum(0)[rank * 5:(rank + 1) * 5]
    c.check(torch.allclose(out.double(), ref, atol=1e-5), "reduce_scatter_tensor PREMUL_SUM tensor factor")
    t = a[rank].clone()
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
    ref = (torch.stack([x.double() for x in a]) * 0.25).sum(0)
    c.check(torch.allclose(t.double(), ref, atol=1e-5), "allreduce PREMUL_SUM tensor factor")


UINTS = {torch.uint16: 16, torch.uint32: 32, torch.uint64: 64}
FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def uint_input(tag, rank, count, dtype, opname):
    """Any bit pattern: the top half of the range is where unsigned order differs."""
    g = gen(tag, rank, count, dtype, opname)
    if dtype == torch.uint64:
        return torch.randint(-(2**63), 2**63 - 1, (count,), generator=g, dtype=torch.int64).view(torch.uint64)
    return torch.randint(0, 2 ** UINTS[dtype], (count,), generator=g, dtype=torch.int64).to(dtype)


def uint_reference(inputs, dtype, opname, n):
    """Python integers modulo 2^bits (torch has no arithmetic on these dtypes)."""
    m = 1 << UINTS[dtype]
    fold = {
        "SUM": lambda a, b: (a + b) % m, "AVG": lambda a, b: (a + b) % m,
        "PRODUCT": lambda a, b: (a * b) % m, "MIN": min, "MAX": max,
        "BAND": lambda a, b: a & b, "BOR": lambda a, b: a | b, "BXOR": lambda a, b: a ^ b,
    }[opname]
    out = [functools.reduce(fold, col) for col in zip(*[x.tolist() for x in inputs])]
    return [v // n for v in out] if opname == "AVG" else out


def f8_inputs(count, dtype, n):
    """On 2 ranks every pair of float8 values (rank 0 holds code i >> 8, rank 1
    code i & 255, for 65536 elements), else small integers whose sums and
    products stay exact in float8, so that the order of the reduction does
    not matter."""
    if n == 2 and count == 65536:
        i = torch.arange(count, dtype=torch.int64)
        return [(i >> 8).to(torch.uint8).view(dtype), (i & 255).to(torch.uint8).view(dtype)]
    return [(((torch.arange(count) + r) % 4) - 1).float().to(dtype) for r in range(n)]


def f8_reference(inputs, dtype, opname, n):
    """In rank order through float32, rounded to the dtype after each step, as
    torch's casts round (for 2 ranks, or exact values, the only answer)."""
    xs = [x.float() for x in inputs]
    if opname == "PREMUL_SUM":
        xs = [(x * PREMUL_FACTOR).to(dtype).float() for x in xs]
    acc = xs[0]
    for x in xs[1:]:
        if opname in ("MIN", "MAX"):
            acc = (torch.minimum if opname == "MIN" else torch.maximum)(acc, x)
        else:
            acc = ((acc * x) if opname == "PRODUCT" else (acc + x)).to(dtype).float()
    if opname == "AVG":
        acc = acc.to(dtype).float() / n
    return acc.to(dtype)


def f8_matches(got, ref, opname):
    """Bit for bit, except that any two NaNs match, and for MIN/MAX -0 and +0
    (torch.minimum keeps the first of equal operands; gotree orders -0 < +0)."""
    g, r = got.float(), ref.float()
    nan = g.isnan() & r.isnan()
    if opname in ("MIN", "MAX"):
        return bool(((g == r) | nan).all())
    return bool(((got.view(torch.uint8) == ref.view(torch.uint8)) | nan).all())


def check_more_dtypes(c, rank, n):
    """uint16/32/64 and float8 reductions (their data movement is in the other checks)."""
    for dtype in UINTS:
        for opname in INT_OPS:
            for count in [0, 1, 7, 1003] + ([65537] if (dtype, opname) in ((torch.uint64, "MAX"), (torch.uint32, "SUM")) else []):
                inputs = [uint_input("u", r, count, dtype, opname) for r in range(n)]
                ref = uint_reference(inputs, dtype, opname, n)
                t = inputs[rank].clone()
                dist.all_reduce(t, op=make_op(opname))
                c.check(t.dtype == dtype and t.tolist() == ref, f"allreduce {opname} {dtype} count={count}")
        for opname in ("SUM", "MIN"):
            inputs = [uint_input("ur", r, 5 * n, dtype, opname) for r in range(n)]
            ref = uint_reference(inputs, dtype, opname, n)
            t = inputs[rank].clone()
            dist.reduce(t, dst=n - 1, op=make_op(opname))
            c.check(t.tolist() == (ref if rank == n - 1 else inputs[rank].tolist()), f"reduce {opname} {dtype}")
            out = torch.empty(5, dtype=dtype)
            dist.reduce_scatter_tensor(out, inputs[rank].clone(), op=make_op(opname))
            c.check(out.tolist() == ref[rank * 5:(rank + 1) * 5], f"reduce_scatter_tensor {opname} {dtype}")
    for dtype in FLOAT8:
        for opname in FLOAT_OPS:
            for count in [0, 1, 7, 65536]:
                inputs = f8_inputs(count, dtype, n)
                ref = f8_reference(inputs, dtype, opname, n)
                t = inputs[rank].clone()
                dist.all_reduce(t, op=make_op(opname))
                c.check(f8_matches(t, ref, opname), f"allreduce {opname} {dtype} count={count}")
        inputs = f8_inputs(4 * n, dtype, n)
        ref = f8_reference(inputs, dtype, "SUM", n)
        t = inputs[rank].clone()
        dist.reduce(t, dst=0)
        c.check(f8_matches(t, ref if rank == 0 else inputs[rank], "SUM"), f"reduce SUM {dtype}")
        out = torch.empty(4, dtype=dtype)
        dist.reduce_scatter_tensor(out, inputs[rank].clone(), op=ReduceOp.MAX)
        c.check(f8_matches(out, f8_reference(inputs, dtype, "MAX", n)[rank * 4:(rank + 1) * 4], "MAX"),
                f"reduce_scatter_tensor MAX {dtype}")


def a2a_splits(n, sender):
    """Rows rank `sender` sends to each rank p (uneven, some zero)."""
    return [(sender + 2 * p) % 3 for p in range(n)]


def check_alltoall(c, rank, n):
    for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64, torch.uint16]:
        for k in [0, 1, 3]:
            # equal splits: n*k rows of 2 columns
            ins = [make_input("a2a", r, n * k * 2, dtype, "SUM").view(n * k, 2) for r in range(n)]
            expect = torch.cat([ins[p][rank * k:(rank + 1) * k] for p in range(n)])
            out = torch.empty(n * k, 2, dtype=dtype)
            dist.all_to_all_single(out, ins[rank])
            c.check(bytes_equal(out, expect), f"all_to_all_single equal {dtype} k={k}")
        # uneven splits
        rows = [a2a_splits(n, r) for r in range(n)]
        ins = [make_input("a2av", r, sum(rows[r]) * 3, dtype, "SUM").view(-1, 3) for r in range(n)]
        in_splits = rows[rank]
        out_splits = [rows[p][rank] for p in range(n)]
        expect = torch.cat(
            [ins[p][sum(rows[p][:rank]):sum(rows[p][:rank + 1])] for p in range(n)]
        )
        out = torch.empty(sum(out_splits), 3, dtype=dtype)
        w = dist.all_to_all_single(out, ins[rank], out_splits, in_splits, async_op=True)
        v = w.get_future().wait()
        c.check(bytes_equal(out, expect), f"all_to_all_single uneven {dtype}")
        c.check(len(v) == 1 and v[0].data_ptr() == out.data_ptr(), f"all_to_all_single future {dtype}")
        # list form, different sizes per peer
        in_list = [make_input("a2al", rank * 100 + p, rank + p + 1, dtype, "SUM") for p in range(n)]
        out_list = [torch.empty(p + rank + 1, dtype=dtype) for p in range(n)]
        dist.all_to_all(out_list, in_list)
        ok = all(bytes_equal(out_list[p], make_input("a2al", p * 100 + rank, p + rank + 1, dtype, "SUM")) for p in range(n))
        c.check(ok, f"all_to_all list {dtype}")
    # large blocks: a pair whose larger block reaches 1 MiB moves single-copy (the
    # receiver reads the sender's block from its memory), mixed with small and
    # empty blocks in the same call; then equal splits, in place (one tensor)
    big = [0, 7, 150_001]  # int64 elements: 0 B, 56 B, 1.2 MB
    rows = [[big[(r + 2 * p) % 3] for p in range(n)] for r in range(n)]
    ins = [make_input("a2abig", r, sum(rows[r]), torch.int64, "SUM") for r in range(n)]
    out_splits = [rows[p][rank] for p in range(n)]
    expect = torch.cat([ins[p][sum(rows[p][:rank]):sum(rows[p][:rank + 1])] for p in range(n)])
    out = torch.empty(sum(out_splits), dtype=torch.int64)
    dist.all_to_all_single(out, ins[rank], out_splits, rows[rank])
    c.check(torch.equal(out, expect), "all_to_all_single large uneven blocks")
    k = 140_001  # float32 rows of 2: 1.1 MB per block
    t = make_input("a2abigeq", rank, n * k * 2, torch.float32, "SUM").view(n * k, 2)
    expect = torch.cat([make_input("a2abigeq", p, n * k * 2, torch.float32, "SUM").view(n * k, 2)[rank * k:(rank + 1) * k] for p in range(n)])
    dist.all_to_all_single(t, t)
    c.check(torch.equal(t, expect), "all_to_all_single large, in place")
    # strided input and output
    src = torch.arange(n * 4 * 2, dtype=torch.float32).view(n * 4, 2) + 1000 * rank
    out = torch.zeros(2, n * 4).t()  # non-contiguous
    dist.all_to_all_single(out, src.t().contiguous().t())
    expect = torch.cat([(torch.arange(n * 4 * 2, dtype=torch.float32).view(n * 4, 2) + 1000 * p)[rank * 4:(rank + 1) * 4] for p in range(n)])
    c.check(torch.equal(out, expect), "all_to_all_single strided")


def check_gather_scatter(c, rank, n):
    for dtype in [torch.float32, torch.float16, torch.int8, torch.bool, torch.complex128, torch.float8_e4m3fn]:
        for count in [0, 1, 7, 10000]:
            for root in range(n):
                ins = [make_input("ga", r, count, dtype, "SUM") for r in range(n)]
                outs = [torch.empty(count, dtype=dtype) for _ in range(n)] if rank == root else None
                dist.gather(ins[rank], outs, dst=root)
                if rank == root:
                    c.check(all(bytes_equal(outs[r], ins[r]) for r in range(n)), f"gather {dtype} count={count} root={root}")
                # scatter: root's list piece r goes to rank r
                pieces = [make_input("sc", root * 100 + r, count, dtype, "SUM") for r in range(n)]
                out = torch.empty(count, dtype=dtype)
                dist.scatter(out, pieces if rank == root else None, src=root)
                c.check(bytes_equal(out, pieces[rank]), f"scatter {dtype} count={count} root={root}")
    # gather into consecutive views (direct) and strided scatter output, async
    root = n - 1
    flat = torch.empty(n * 5)
    views = list(flat.chunk(n)) if rank == root else None
    w = dist.gather(torch.full((5,), float(rank)), views, dst=root, async_op=True)
    w.wait()
    if rank == root:
        c.check(torch.equal(flat, torch.arange(n).float().repeat_interleave(5)), "gather into views of one buffer")
    base = torch.zeros(5, 2)
    dist.scatter(base[:, 1], [torch.full((5,), float(r)) for r in range(n)] if rank == 0 else None, src=0)
    c.check(torch.equal(base[:, 1], torch.full((5,), float(rank))) and torch.equal(base[:, 0], torch.zeros(5)), "scatter strided output")
    # object forms ride on these
    objs = [None] * n if rank == 0 else None
    dist.gather_object({"r": rank}, objs, dst=0)
    if rank == 0:
        c.check(objs == [{"r": r} for r in range(n)], "gather_object")
    out = [None]
    dist.scatter_object_list(out, [f"o{r}" for r in range(n)] if rank == 0 else None, src=0)
    c.check(out == [f"o{rank}"], "scatter_object_list")
    # allgather_coalesced (list of lists) through the backend directly
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    ins = [torch.full((2,), float(rank)), torch.full((3,), rank, dtype=torch.int32)]
    outl = [[torch.empty(2), torch.empty(3, dtype=torch.int32)] for _ in range(n)]
    be.allgather_coalesced(outl, ins).wait()
    c.check(all(torch.equal(outl[r][0], torch.full((2,), float(r))) and torch.equal(outl[r][1], torch.full((3,), r, dtype=torch.int32)) for r in range(n)), "allgather_coalesced")


def check_p2p(c, rank, n):
    if n == 1:
        c.check(True, "p2p needs 2 ranks")
        return
    right, left = (rank + 1) % n, (rank - 1) % n
    for dtype in [torch.float32, torch.int64, torch.bool, torch.complex64, torch.uint16]:
        for count in [0, 1, 1000, BIG]:
            send = make_input("p2p", rank, count, dtype, "SUM")
            recv = torch.empty(count, dtype=dtype)
            ws = dist.isend(send, right)
            wr = dist.irecv(recv, left)
            ws.wait()
            wr.wait()
            c.check(bytes_equal(recv, make_input("p2p", left, count, dtype, "SUM")), f"isend/irecv ring {dtype} count={count}")
    # blocking send/recv, strided receive, tags ignored
    if rank == 0:
        dist.send(torch.arange(6.0), 1, tag=7)
    elif rank == 1:
        base = torch.zeros(6, 2)
        src = dist.recv(base[:, 1], 0, tag=99)
        c.check(torch.equal(base[:, 1], torch.arange(6.0)) and src == 0, "send/recv strided, tags ignored")
    # batch_isend_irecv: one work for the batch; both directions to both neighbours
    a, b = torch.empty(4), torch.empty(4)
    ops = [
        dist.P2POp(dist.isend, torch.full((4,), float(rank)), right),
        dist.P2POp(dist.isend, torch.full((4,), float(rank + 100)), left),
        dist.P2POp(dist.irecv, a, left),
        dist.P2POp(dist.irecv, b, right),
    ]
    if n == 2:
        ops = [ops[0], ops[2]]
    reqs = dist.batch_isend_irecv(ops)
    for r in reqs:
        r.wait()
    c.check(torch.equal(a, torch.full((4,), float(left))), "batch_isend_irecv from left")
    if n > 2:
        c.check(torch.equal(b, torch.full((4,), float(right + 100))), "batch_isend_irecv from right")
    # p2p interleaved with collectives
    t = torch.ones(3)
    wr = dist.irecv(a, left)
    dist.all_reduce(t)
    dist.isend(torch.full((4,), 5.0), right).wait()
    wr.wait()
    c.check(torch.equal(t, torch.full((3,), float(n))) and torch.equal(a, torch.full((4,), 5.0)), "p2p interleaved with allreduce")
    # receive from any source: every other rank sends rank 0 two messages;
    # rank 0 receives them without naming the source, blocking and async.
    if n > 1:
        k = 1009  # a prime, spread over several FIFO slots below
        def msg(r, i):
            return torch.arange(k, dtype=torch.float64) * (r + 1) + 1000 * i
        if rank == 0:
            got = {}
            for i in range(2 * (n - 1)):
                t = torch.full((k,), -1.0, dtype=torch.float64)
                if i % 2 == 0:
                    src = dist.recv(t)
                else:
                    w = dist.irecv(t)
                    w.wait()
                    src = w._source_rank()
                got.setdefault(src, []).append(t)
            c.check(sorted(got) == list(range(1, n)) and all(len(v) == 2 for v in got.values()),
                    f"recv from any source: 2 messages from each of ranks 1..{n - 1} (got {sorted((s, len(v)) for s, v in got.items())})")
            c.check(all(torch.equal(v[i], msg(s, i)) for s, v in got.items() for i in range(len(v))),
                    "recv from any source: contents in each sender's order")
        else:
            for i in range(2):
                dist.send(msg(rank, i), 0)
        dist.barrier()
    # dist.monitored_barrier() refuses every backend but gloo in Python; the
    # backend method is reachable through the ProcessGroup binding.
    import datetime

    pg = dist.group.WORLD
    pg.monitored_barrier(datetime.timedelta(seconds=60), False)
    pg.monitored_barrier(datetime.timedelta(seconds=60), True)
    c.check(True, "monitored_barrier")
    be = pg._get_backend(torch.device("cpu"))
    seq = be._get_sequence_number_for_group()
    dist.all_reduce(torch.ones(1))
    c.check(be._get_sequence_number_for_group() == seq + 1, "sequence number counts collectives")
    c.check(be._get_backend_name() == "gotree", "backend name")
    if hasattr(be, "supports_coalescing"):  # the Python binding has it from torch 2.5 on
        c.check(be.supports_coalescing, "supports_coalescing")


def main():
    dist.init_process_group(backend="gotree")
    c = Checker("collectives")
    rank, n = dist.get_rank(), dist.get_world_size()
    only = os.environ.get("GOTREE_TEST_ONLY", "allreduce,more_dtypes,broadcast,allgather,coalesced,misc,reduce,reduce_scatter,alltoall,gather_scatter,p2p,split,sparse").split(",")
    for name in only:
        t0 = time.monotonic()
        globals()["check_" + name](c, rank, n)
        print(f"[rank {rank}] {name}: passed={c.passed} failed={len(c.failures)} ({time.monotonic() - t0:.1f} s)", flush=True)
    c.finish()


if __name__ == "__main__":
    main()
