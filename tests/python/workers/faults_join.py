"""Fault worker: a rank never joins init.

argv[1] is the missing rank. The test starts every other rank of WORLD_SIZE; they share
a TCPStore hosted by the lowest started rank that does not wait for the missing one
(so the store is not what notices), then call init_process_group(backend="gotree",
timeout=5 s). Each must raise within the timeout + 5 s, naming the missing rank when
it can. Missing rank 0 is the harder case: rank 0 creates gotree's unique id, so the
others wait for it in the store.
"""

import datetime
import os
import sys

from faults_common import Checker, call_error, report, text_of, timeout_s

import torch.distributed as dist  # noqa: E402


def main():
    missing = int(sys.argv[1])
    T = timeout_s()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host = min(r for r in range(world) if r != missing)
    c = Checker(f"faults-join-missing{missing}")
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=(rank == host),
        timeout=datetime.timedelta(seconds=60),  # the store is not under test: a loaded machine starts ranks slowly
        wait_for_workers=False,
    )

    def init():
        dist.init_process_group(
            backend="gotree", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=T)
        )

    e, took = call_error(init)
    c.check(e is not None, "init_process_group raises when a rank never joins")
    if e is not None:
        text = text_of(e)
        report("never-joins", missing=missing, took_s=round(took, 3), error=text)
        c.check(took < T + 5, f"init fails within the timeout + 5 s (took {took:.2f} s)")
        if missing != 0:
            c.check(f"rank(s) {missing} of {world} never joined" in text, f"the error names the missing rank: {text[:500]!r}")
        else:
            c.check("rank 0" in text, f"the error names rank 0, which never published the unique id: {text[:500]!r}")
    if rank == host:
        # gotree's bootstrap root lives in rank 0's process and answers the joiners one
        # by one; if this process exits the moment its own answer arrives, a joiner that
        # had not been answered yet gets "the bootstrap root (rank 0's process) went away:
        # EOF" instead of the names of the missing ranks (a race in pg/bootstrap.go,
        # reported). Give the answers a moment to leave.
        import time

        time.sleep(1.0)
    c.exit_now()


if __name__ == "__main__":
    main()
