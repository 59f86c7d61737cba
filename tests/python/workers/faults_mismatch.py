"""Fault worker: ranks disagree about the collective at one sequence number.

One rank (the last, "odd one out") differs in one property per sub-case; each sub-case
runs on a fresh gotree group (new_group), since a mismatch aborts the communicator:

  op         all_reduce SUM vs MAX
  count      all_reduce of 1000 vs 999 elements
  dtype      all_reduce of float32 vs int32 (same byte count)
  root       broadcast from root 0 vs root 1
  collective all_reduce vs broadcast (same tensor)
  plans      all_reduce of 3 vs 5 int64: at 4 ranks the two sizes run different plans
             (halving-doubling and the ring) that leave every rank waiting on a link
             the others never write, until the stall check compares the ranks' views
             (pg/stall.go)

After the failure the sub-group's Backend.get_error() says COMM_ERROR (the rank that
found the disagreement) or REMOTE_ERROR (the ranks it told); the world group's SUCCESS.

Every rank must raise (never return a garbage result) within the timeout + 5 s; the
text should say which collective and which property disagreed.

A one-directional collective (broadcast) fails on every rank in that same call too, also
on ranks whose neighbours agree with them: it first exchanges each rank's view of the call
around the ring (pg/mismatch.go).
"""

import datetime
import sys

from faults_common import init_group, Checker, call_error, group_error, report, text_of, timeout_s

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed import ReduceOp  # noqa: E402

CASES = ["op", "count", "dtype", "root", "collective", "plans"]


def issue(case, odd, g):
    n = 1000
    if case == "op":
        dist.all_reduce(torch.ones(n), op=ReduceOp.MAX if odd else ReduceOp.SUM, group=g)
    elif case == "count":
        dist.all_reduce(torch.ones(n - 1 if odd else n), group=g)
    elif case == "dtype":
        dist.all_reduce(torch.ones(n, dtype=torch.int32 if odd else torch.float32), group=g)
    elif case == "root":
        t = torch.full((n,), float(dist.get_rank() + 1))
        dist.broadcast(t, src=1 if odd else 0, group=g)
        return t
    elif case == "plans":
        dist.all_reduce(torch.ones(3 if odd else 5, dtype=torch.int64), group=g)
    elif case == "collective":
        if odd:
            dist.broadcast(torch.ones(n), src=0, group=g)
        else:
            dist.all_reduce(torch.ones(n), group=g)
    else:
        raise SystemExit(f"unknown case {case}")


def main():
    T = timeout_s()
    cases = sys.argv[1:] or CASES
    init_group(T)
    rank, n = dist.get_rank(), dist.get_world_size()
    c = Checker("faults-mismatch")
    odd = rank == n - 1
    for case in cases:
        g = dist.new_group(backend="gotree", timeout=datetime.timedelta(seconds=T))
        t = torch.ones(4)
        dist.all_reduce(t, group=g)
        c.check(torch.equal(t, torch.full((4,), float(n))), f"{case}: fresh group works")
        err = group_error(g)
        c.check(err in (None, "SUCCESS"), f"{case}: get_error() of a working group: {err}")
        out = []
        e, took = call_error(lambda: out.append(issue(case, odd, g)))
        c.check(e is not None, f"{case}: the mismatched collective raises on rank {rank}")
        if e is not None:
            text = text_of(e)
            report("mismatch-" + case, took_s=round(took, 3), error=text)
            c.check(took < T + 5, f"{case}: error within timeout + 5 s (took {took:.2f} s)")
            c.check("issued different collectives" in text, f"{case}: the error says the ranks disagree: {text[:500]!r}")
            err = group_error(g)
            c.check(err in (None, "COMM_ERROR", "REMOTE_ERROR"), f"{case}: get_error() after the mismatch: {err}")
            err = group_error()
            c.check(err in (None, "SUCCESS"), f"{case}: get_error() of the world group: {err}")
        # the world group is untouched by the sub-group's failure
        w = torch.ones(4)
        dist.all_reduce(w)
        c.check(torch.equal(w, torch.full((4,), float(n))), f"{case}: the world group still works")
    c.exit_now()


if __name__ == "__main__":
    main()
