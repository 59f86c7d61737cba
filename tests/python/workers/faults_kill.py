"""Fault worker: a rank SIGKILLs itself in the middle of an allreduce.

Every rank loops allreduce (SUM) of a 16 MiB float32 tensor with an exact check. At
iteration KILL_AT the victim (the last rank) issues the allreduce asynchronously, lets
it start moving data, and kills itself with SIGKILL: no Python teardown, no goodbye on
any socket. Each survivor must raise (not hang) within the group timeout + 5 s, with a
text naming the dead rank and the collective; later calls fail at once; destroy returns.
"""

import os
import signal
import time

from faults_common import init_group, Checker, call_error, check_aborted_then_destroy, group_error, report, resources, text_of, timeout_s

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

KILL_AT = 5
ITERS = 60
NUMEL = 4 << 20  # 16 MiB of float32


def main():
    T = timeout_s()
    socks0, _ = resources()
    init_group(T)
    c = Checker("faults-kill")
    rank, n = dist.get_rank(), dist.get_world_size()
    victim = n - 1
    x = torch.empty(NUMEL)
    for i in range(ITERS):
        if rank == victim and i == KILL_AT:
            dist.all_reduce(x.fill_(float(rank + 1)), async_op=True)
            time.sleep(0.01)  # the ring is moving this rank's data now
            os.kill(os.getpid(), signal.SIGKILL)
        e, took = call_error(lambda: dist.all_reduce(x.fill_(float(rank + 1))))
        if e is None:
            ok = bool((x == n * (n + 1) / 2).all())
            c.check(ok, f"allreduce {i} exact")
            if i == 0:
                err = group_error()
                c.check(err in (None, "SUCCESS"), f"get_error() of a working group: {err}")
            continue
        text = text_of(e)
        report("kill", took_s=round(took, 3), iteration=i, error=text)
        # the victim may have sent everything one survivor needed before it died: that
        # survivor's allreduce then completes (exactly, checked above) and the next fails
        c.check(i in (KILL_AT, KILL_AT + 1), f"the failure comes at the iteration of the kill or the next ({i} vs {KILL_AT})")
        c.check(took < T + 5, f"error within timeout + 5 s (took {took:.2f} s)")
        c.check(f"rank {victim}" in text, f"the error names the dead rank {victim}: {text[:400]!r}")
        c.check("allreduce #" in text and str(NUMEL) in text, f"the error names the collective and its size: {text[:400]!r}")
        c.check("DistBackendError" in text, f"raised as DistBackendError: {text[:200]!r}")
        err = group_error()
        report("kill-get-error", error=str(err))
        c.check(err in (None, "REMOTE_ERROR"), f"get_error() after a peer died: {err}")
        check_aborted_then_destroy(c, limit_s=5.0, sockets_before=socks0)
        c.exit_now()
    c.check(False, "the survivors never saw the victim die")
    c.exit_now()


if __name__ == "__main__":
    main()
