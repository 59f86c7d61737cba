"""torchrun worker (2 ranks): failures end in an exception within the group timeout,
never a hang. Scenario from argv[1]:

  timeout   rank 1 skips a collective (but stays alive): rank 0 must fail within the
            group timeout (5 s here) with an error, not wait forever.
  peer_exit rank 1 exits without calling the collective: rank 0 must fail.
  mismatch  ranks issue allreduces of different lengths: both must fail (or, at the
            least, not hang and not report success with wrong data).
  op_timeout an allreduce with its own 1 s timeout (shorter than the group's): the
            watchdog fails it promptly and aborts; later collectives fail fast.
  reinit    destroy the group and create it again in the same processes (same store
            prefix): the second group must not reuse the first one's unique id.
"""

import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from _common import Checker  # noqa: E402

TIMEOUT_S = 5


def group_error():
    """gotree.get_error()'s name, or None before torch 2.7 (no c10d::ErrorType)."""
    import gotree

    try:
        return gotree.get_error().name
    except NotImplementedError:
        return None


def check_flight_record(c, rank, failure="timed out"):
    """With GOTREE_TRACE_DUMP_FILE set, the failed rank wrote its flight record:
    the warm-up allreduce completed, the one that timed out was running; the
    record's failure says failure."""
    prefix = os.environ.get("GOTREE_TRACE_DUMP_FILE")
    if not prefix:
        return
    import glob
    import json

    files = glob.glob(f"{prefix}.*.{rank}.json")
    c.check(len(files) == 1, f"one flight record file for rank {rank}: {files}")
    if len(files) != 1:
        return
    with open(files[0]) as f:
        rec = json.load(f)
    ops = [(op["seq"], op["desc"], op["state"]) for op in rec["ops"]]
    c.check(rec["rank"] == rank and rec["nranks"] == 2, f"the record's rank and size: {rec['rank']}, {rec['nranks']}")
    c.check(ops == [(1, "allreduce #1 (8 x float32, sum)", "completed"), (2, "allreduce #2 (8 x float32, sum)", "running")],
            f"the flight record's operations: {ops}")
    c.check(failure in rec.get("failure", ""), f"the record's failure: {rec.get('failure')!r} lacks {failure!r}")


def main():
    scenario = sys.argv[1]
    dist.init_process_group(backend="gotree", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    c = Checker("failures-" + scenario)
    rank, n = dist.get_rank(), dist.get_world_size()
    t = torch.ones(8)
    dist.all_reduce(t)
    c.check(torch.equal(t, torch.full((8,), float(n))), "warm-up allreduce")
    err = group_error()
    c.check(err in (None, "SUCCESS"), f"get_error() of a working group: {err}")

    if scenario == "timeout":
        if rank == 0:
            start = time.monotonic()
            e = c.expect_raises(lambda: dist.all_reduce(torch.ones(8)), "gotree", "allreduce with a missing peer")
            took = time.monotonic() - start
            c.check(took < TIMEOUT_S + 20, f"failed within the timeout (took {took:.1f} s)")
            print(f"[rank 0] error after {took:.1f} s: {e}", flush=True)
            c.check("rank 1 sent no view" in str(e), f"the timeout names the rank that is not in the collective: {str(e)[-300:]!r}")
            err = group_error()
            c.check(err in (None, "TIMEOUT"), f"get_error() after the timeout: {err}")
            check_flight_record(c, rank)
        else:
            time.sleep(TIMEOUT_S + 8)
        c.exit_now()  # the communicator is broken: skip teardown

    if scenario == "op_timeout":
        # a per-operation timeout shorter than the group's: the backend's watchdog fails
        # the work and aborts the communicator; later collectives fail fast, naming why
        if rank == 0:
            be = dist.group.WORLD._get_backend(torch.device("cpu"))
            opts = dist.AllreduceOptions()
            opts.timeout = datetime.timedelta(seconds=1)
            start = time.monotonic()
            w = be.allreduce([torch.ones(8)], opts)
            c.expect_raises(w.wait, ["timed out after 1000 ms (its timeout argument)", "aborted"], "op timeout")
            took = time.monotonic() - start
            c.check(took < 4, f"op timeout fired promptly (took {took:.1f} s)")
            c.check(w.is_completed(), "the timed-out work is completed")
            err = group_error()
            c.check(err in (None, "TIMEOUT"), f"get_error() after the op timeout: {err}")
            fut = w.get_future()
            c.expect_raises(fut.wait, "timed out after 1000 ms", "the future carries the error")
            # the watchdog wrote the flight record before it aborted
            check_flight_record(c, rank, "timed out after 1000 ms (its timeout argument)")
            c.expect_raises(
                lambda: dist.all_reduce(torch.ones(2)),
                "on a communicator that was aborted after an earlier failure",
                "a later collective fails fast",
            )
        else:
            time.sleep(TIMEOUT_S + 3)
        c.exit_now()

    if scenario == "peer_exit":
        if rank == 0:
            time.sleep(1)
            start = time.monotonic()
            e = c.expect_raises(lambda: dist.all_reduce(torch.ones(8)), "gotree", "allreduce after the peer exited")
            took = time.monotonic() - start
            c.check(took < TIMEOUT_S + 20, f"failed within the timeout (took {took:.1f} s)")
            print(f"[rank 0] error after {took:.1f} s: {e}", flush=True)
        c.exit_now()

    if scenario == "mismatch":
        x = torch.ones(100 if rank == 0 else 37)
        start = time.monotonic()
        try:
            dist.all_reduce(x)
            ok = False
            text = "no error; result " + str(x[:4].tolist())
        except Exception as e:  # noqa: BLE001
            ok = True
            text = f"{type(e).__name__}: {e}"
        took = time.monotonic() - start
        c.check(ok, f"mismatched lengths raise (got {text[:300]})")
        c.check(took < TIMEOUT_S + 20, f"mismatch detected within the timeout (took {took:.1f} s)")
        print(f"[rank {rank}] mismatch -> {text[:300]}", flush=True)
        c.exit_now()

    if scenario == "reinit":
        for round_ in range(3):
            dist.destroy_process_group()
            dist.init_process_group(backend="gotree", timeout=datetime.timedelta(seconds=30))
            t = torch.full((5,), float(rank + round_))
            dist.all_reduce(t)
            c.check(torch.equal(t, torch.full((5,), float(sum(range(n)) + n * round_))), f"re-created group {round_}")
        c.finish()

    raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main()
