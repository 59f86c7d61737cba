"""Helpers shared by the fault-injection workers (faults_*.py); not collected by pytest.

The workers are started directly by tests/python/test_faults.py (one process per rank,
env:// rendezvous: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) rather than by torchrun:
torchrun's agent kills every worker as soon as one dies, and these tests need the
survivors of a SIGKILL to live long enough to report their error.

Every worker prints, besides the Checker summary, one line per observed failure:

    FAULT-RESULT {"rank": 0, "case": "kill", "took_s": 0.04, "error": "..."}

which the pytest side parses, prints and (for docs/failures.md) records.
"""

import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from _common import Checker  # noqa: E402,F401  (re-exported)


def timeout_s(default=5.0):
    return float(os.environ.get("FAULT_TIMEOUT_S", default))


def init_group(T, store_timeout_s=90):
    """init_process_group(backend="gotree", timeout=T) on a TCPStore of its own.

    With env:// torch would use T (a few seconds here) for the store too, and on a
    loaded machine the ranks' `import torch` can finish further apart than that; the
    store waits for every rank with a generous timeout first, so T applies to gotree only.
    """
    import datetime

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world_size=world,
        is_master=(rank == 0),
        timeout=datetime.timedelta(seconds=store_timeout_s),
        wait_for_workers=True,
    )
    store.set(f"faults/up/{rank}", "1")
    store.wait([f"faults/up/{r}" for r in range(world)])  # every rank is past `import torch`
    dist.init_process_group(backend="gotree", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=T))
    return store


def group_error(group=None):
    """The name of gotree.get_error(group) ("SUCCESS", "TIMEOUT", "COMM_ERROR",
    "REMOTE_ERROR"), or None where torch lacks ErrorType (before 2.7)."""
    import gotree

    try:
        return gotree.get_error(group).name
    except NotImplementedError:
        if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 7):
            raise
        return None


def report(case, **fields):
    rec = {"rank": int(os.environ.get("RANK", "-1")), "case": case}
    rec.update(fields)
    # One write(2) of the whole line: the ranks share torchrun's pipe, and a
    # line written in pieces can be interleaved with another rank's.
    sys.stdout.flush()
    os.write(1, ("FAULT-RESULT " + json.dumps(rec) + "\n").encode())


def call_error(fn):
    """Runs fn(); returns (exception or None, seconds it took)."""
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return e, time.monotonic() - t0
    return None, time.monotonic() - t0


def text_of(e):
    return f"{type(e).__name__}: {e}"


def _socket_table():
    """inode -> (kind, local port, remote port) for this network namespace."""
    table = {}
    for kind in ("tcp", "tcp6"):
        try:
            with open(f"/proc/self/net/{kind}") as f:
                next(f)
                for line in f:
                    p = line.split()
                    table[p[9]] = ("tcp", int(p[1].rsplit(":", 1)[1], 16), int(p[2].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    try:
        with open("/proc/self/net/unix") as f:
            next(f)
            for line in f:
                p = line.split()
                table[p[6]] = ("unix", 0, 0)
    except OSError:
        pass
    return table


def resources():
    """(sockets other than torch's TCPStore ones, gotree shared-memory mappings) of
    this process. The store's sockets (MASTER_PORT at either end) are torch's."""
    store_port = int(os.environ.get("MASTER_PORT", "0"))
    table = _socket_table()
    socks = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", link)
        if not m:
            continue
        kind, lport, rport = table.get(m.group(1), ("other", 0, 0))
        if kind == "tcp" and store_port in (lport, rport):
            continue
        socks += 1
    with open("/proc/self/maps") as f:
        shm = sum(1 for line in f if "/dev/shm/gotree-" in line)
    return socks, shm


def check_aborted_then_destroy(c, limit_s, sockets_before=None):
    """After a failure: a later collective fails at once naming the abort, and
    destroy_process_group returns promptly and releases the shm segments (and the
    data sockets when sockets_before, the count before init, is given)."""
    e, took = call_error(lambda: dist.all_reduce(torch.ones(4)))
    c.check(e is not None, "a later collective raises")
    if e is not None:
        c.check("aborted" in str(e), f"the later error names the abort: {text_of(e)[:300]!r}")
        c.check(took < 1.0, f"the later collective fails at once (took {took:.3f} s)")
        report("later-call", took_s=round(took, 4), error=text_of(e))
    t0 = time.monotonic()
    try:
        dist.destroy_process_group()
        derr = None
    except Exception as ex:  # noqa: BLE001
        derr = text_of(ex)
    dtook = time.monotonic() - t0
    c.check(derr is None, f"destroy_process_group after the failure succeeds (got {derr})")
    c.check(dtook < limit_s, f"destroy_process_group returns promptly (took {dtook:.2f} s)")
    socks, shm = resources()
    c.check(shm == 0, f"no gotree shared-memory segment stays mapped after destroy ({shm})")
    if sockets_before is not None:
        c.check(socks <= sockets_before, f"sockets released by destroy: {socks} non-store sockets now, {sockets_before} before init")
    report("destroy", took_s=round(dtook, 4), sockets=socks, shm_mappings=shm)
