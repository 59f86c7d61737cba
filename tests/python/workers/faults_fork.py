"""Fault worker: fork() after init (what DataLoader workers with the fork start method do).

argv[1] == "call" (2 ranks):
1. os.fork(); the child calls dist.all_reduce and dist.broadcast: each must raise a
   RuntimeError saying it is a forked child, within a second (never hang, never touch
   the parent's Go runtime); the child leaves with os._exit, as multiprocessing's fork
   workers do. Meanwhile the parent keeps running collectives with exact checks.
2. A DataLoader with two fork workers that never call gotree: batches arrive, and the
   parent's collectives stay exact between and after the batches.

argv[1] == "exit" (any world size): the forked child calls nothing and leaves through
normal interpreter shutdown (sys.exit: atexit handlers, module teardown, the process
group's destructor in the child). It must exit within a few seconds, not hang.
"""

import json
import os
import select
import sys
import time

from faults_common import init_group, Checker, report, timeout_s

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def child(wfd, mode):
    if mode == "exit":
        os.write(wfd, b"{}")
        os.close(wfd)
        sys.exit(7)  # normal shutdown: atexit handlers and destructors run in the child
    res = {}
    for name, fn in (
        ("all_reduce", lambda: dist.all_reduce(torch.ones(8))),
        ("broadcast", lambda: dist.broadcast(torch.ones(8), src=0)),
    ):
        t0 = time.monotonic()
        try:
            fn()
            res[name] = {"raised": False}
        except BaseException as e:  # noqa: BLE001
            res[name] = {"raised": True, "type": type(e).__name__, "text": str(e)[:1000]}
        res[name]["took_s"] = round(time.monotonic() - t0, 4)
    os.write(wfd, json.dumps(res).encode())
    os.close(wfd)
    sys.stdout.flush()
    os._exit(7)  # as multiprocessing's fork children leave


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])


def main():
    mode = sys.argv[1]
    T = timeout_s()
    init_group(T)
    rank, n = dist.get_rank(), dist.get_world_size()
    c = Checker("faults-fork")

    def exact(i):
        x = torch.full((1 << 16,), float(rank + i))
        dist.all_reduce(x)
        return torch.equal(x, torch.full((1 << 16,), float(sum(range(n)) + n * i)))

    c.check(exact(0), "allreduce before fork")

    # 1. a forked child that calls gotree
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child(w, mode)
    os.close(w)
    t0 = time.monotonic()
    for i in range(1, 21):
        c.check(exact(i), f"parent allreduce {i} while the child runs")
    ready, _, _ = select.select([r], [], [], 10)
    data = os.read(r, 65536) if ready else b""
    os.close(r)
    status = None
    deadline = time.monotonic() + (5 if mode == "exit" else 10)
    while time.monotonic() < deadline:
        wpid, st = os.waitpid(pid, os.WNOHANG)
        if wpid == pid:
            status = st
            break
        time.sleep(0.05)
    if status is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    took = time.monotonic() - t0
    c.check(bool(data), "the child reported (did not hang in the collective)")
    if mode == "exit":
        c.check(status is not None, f"the forked child's normal interpreter exit finished (waited {took:.1f} s)")
        report("fork-child-exit", took_s=round(took, 3), error="" if status is not None else "the child hung at exit; killed")
        c.exit_now()
    c.check(status is not None, "the child exited (did not hang)")
    if status is not None:
        c.check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7, f"the child's exit status is 7 (got {status})")
    if data:
        res = json.loads(data)
        for name, rec in res.items():
            c.check(rec["raised"] and rec["type"] == "RuntimeError", f"child {name} raises RuntimeError: {rec}")
            c.check("forked child" in rec.get("text", ""), f"child {name} error says 'forked child': {rec}")
            c.check(rec["took_s"] < 1.0, f"child {name} fails at once ({rec['took_s']} s)")
            report("fork-child-" + name, took_s=rec["took_s"], error=f"{rec.get('type')}: {rec.get('text', '')}")

    # 2. DataLoader fork workers (they never call gotree)
    dl = torch.utils.data.DataLoader(Squares(), batch_size=4, num_workers=2, multiprocessing_context="fork")
    total = 0.0
    for b, batch in enumerate(dl):
        total += float(batch.sum())
        c.check(exact(100 + b), f"allreduce between DataLoader batches ({b})")
    c.check(total == sum(i * i for i in range(32)), f"DataLoader fork workers delivered every batch ({total})")
    for i in range(200, 205):
        c.check(exact(i), f"parent allreduce {i} after the DataLoader")
    report("fork-parent", took_s=0, error="")
    c.finish()


if __name__ == "__main__":
    main()
