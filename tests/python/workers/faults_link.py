"""Fault worker: the link between two network namespaces goes down mid-run.

Started by tests/netns/netns.sh in each namespace (2 ranks per namespace-node: shared
memory within a node, TCP over the veth pair across). Each rank writes
FAULT_DIR/ready.<rank> after a few exact allreduces, then keeps looping; the test
then runs `ip link set veth0 down` in namespace 1 and writes the wall-clock time into
FAULT_DIR/cut. No packet gets through any more and no FIN or RST arrives either, so
only the deadlines can notice: every rank must raise within the group timeout + 5 s
of the cut.
"""

import os
import time
from pathlib import Path

from faults_common import init_group, Checker, call_error, report, text_of, timeout_s

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main():
    T = timeout_s()
    d = Path(os.environ["FAULT_DIR"])
    init_group(T)
    rank, n = dist.get_rank(), dist.get_world_size()
    c = Checker("faults-link")
    x = torch.empty(1 << 18)
    for i in range(100000):
        if i == 5:
            (d / f"ready.{rank}").write_text(str(os.getpid()))
        e, took = call_error(lambda: dist.all_reduce(x.fill_(float(rank + 1))))
        if e is None:
            c.check(bool((x == n * (n + 1) / 2).all()), f"allreduce {i} exact")
            if i > 5:
                time.sleep(0.01)
            continue
        now = time.time()
        cut = float((d / "cut").read_text()) if (d / "cut").exists() else None
        since = now - cut if cut else None
        text = text_of(e)
        report("link-down", took_s=round(took, 3), since_cut_s=round(since, 3) if since is not None else None, iteration=i, error=text)
        c.check(cut is not None, "the failure came after the link was cut")
        if since is not None:
            c.check(since < T + 5, f"error within timeout + 5 s of the cut ({since:.2f} s)")
        c.check("allreduce #" in text, f"the error names the collective: {text[:300]!r}")
        c.check("rank " in text, f"the error names a rank: {text[:300]!r}")
        e2, took2 = call_error(lambda: dist.all_reduce(torch.ones(2)))
        c.check(e2 is not None and took2 < 1.0, f"a later call fails at once ({took2:.3f} s)")
        c.exit_now()
    c.exit_now()


if __name__ == "__main__":
    main()
