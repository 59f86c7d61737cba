"""Helpers for the tests that use tests/netns/netns.sh (test_faults.py link down,
test_netns.py); not a worker and not collected by pytest.

netns.sh names its namespaces gotree-n0.. and its bridge gotreebr0, and `up` first
removes whatever an earlier run left, so two runs at once would tear each other down:
every user here takes an exclusive flock on /tmp/gotree-netns.lock first.
"""

import contextlib
import fcntl
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
NETNS = REPO / "tests" / "netns" / "netns.sh"
LOCK = "/tmp/gotree-netns.lock"


def unavailable():
    """Why netns tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root: network namespaces (tests/netns/netns.sh) are created with `ip netns add`"
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`) for network namespaces"
    if shutil.which("tc") is None:
        return "needs `tc` (iproute2) for the rate limit"
    r = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        return f"`ip netns list` fails here: {r.stdout.strip()}"
    return None


@contextlib.contextmanager
def exclusive(timeout_s=300):
    """Holds the netns lock; on exit tears down whatever netns.sh left behind."""
    import time

    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise TimeoutError(f"another run holds {LOCK} (netns.sh in use) for more than {timeout_s} s")
            time.sleep(0.5)
    try:
        yield
    finally:
        subprocess.run(["bash", str(NETNS), "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def netns_exec(i, *cmd):
    return subprocess.run(["bash", str(NETNS), "exec", str(i), "--", *cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
