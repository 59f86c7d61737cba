"""Shared fixtures for gotree's Python tests.

The tests run torchrun (python -m torch.distributed.run) on the worker scripts in
workers/ against the in-place build in python/gotree (libgotree.so + the _C
extension), which the session fixture builds with `setup.py build_ext --inplace`
unless GOTREE_TEST_NO_BUILD=1. The only reason to skip is a missing torch.
"""

import itertools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: gotree's Python tests need torch")

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "python" / "gotree"
WORKERS = Path(__file__).resolve().parent / "workers"


def _have_build():
    return (PKG / "libgotree.so").exists() and any(PKG.glob("_C*.so"))


@pytest.fixture(scope="session")
def built():
    """python/gotree holds libgotree.so and the extension, built from this checkout."""
    if os.environ.get("GOTREE_TEST_NO_BUILD") != "1":
        env = dict(os.environ, MAX_JOBS=os.environ.get("MAX_JOBS", "1"))
        r = subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--inplace"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if r.returncode != 0:
            pytest.fail("in-place build failed (setup.py build_ext --inplace):\n" + r.stdout[-6000:])
    if not _have_build():
        pytest.fail(f"{PKG} lacks libgotree.so or _C*.so; run `python setup.py build_ext --inplace`")
    return PKG


_runs = itertools.count()


def worker_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(WORKERS)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)
    if extra:
        env.update(extra)
    return env


def _kill_marked(marker):
    """SIGKILLs every process whose environment carries marker (not a GOTREE_
    name: gotree warns of GOTREE_ variables it does not know): torchrun
    starts its workers in sessions of their own, which killing the
    command's process group does not reach (a worker left behind keeps the
    output pipe open, and reading it would wait forever)."""
    needle = ("GT_TEST_RUN_ID=" + marker).encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                os.kill(int(d.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def run_command(cmd, timeout, env=None, cwd=None):
    """Runs cmd in its own session; on timeout kills the whole process group
    and every process it started elsewhere (marked through the environment)."""
    marker = f"{os.getpid()}-{next(_runs)}"
    env = dict(env or worker_env())
    env["GT_TEST_RUN_ID"] = marker
    proc = subprocess.Popen(
        cmd,
        cwd=cwd or REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _kill_marked(marker)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out = "(no output: the pipe stayed open after the kill)"
        pytest.fail(f"{' '.join(map(str, cmd))} did not finish within {timeout} s (hang?). Output tail:\n{out[-8000:]}")
    return proc.returncode, out


def torchrun(script, nproc, args=(), timeout=300, env=None, cwd=None):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(WORKERS / script) if not os.path.isabs(str(script)) else str(script),
        *map(str, args),
    ]
    return run_command(cmd, timeout, env=env or worker_env(), cwd=cwd)


CHECK_RE = re.compile(r"GOTREE-CHECKS (\S+) rank=(\d+) world=(\d+) passed=(\d+) failed=(\d+) (OK|FAILED)")


def assert_checks(rc, out, nproc, min_passed=1):
    """Every rank printed an OK summary with at least min_passed checks, and rc is 0."""
    lines = CHECK_RE.findall(out)
    ranks = {int(m[1]) for m in lines}
    ok = (
        rc == 0
        and ranks == set(range(nproc))
        and all(m[5] == "OK" and int(m[4]) == 0 and int(m[3]) >= min_passed for m in lines)
    )
    if not ok:
        fails = "\n".join(l for l in out.splitlines() if "FAIL" in l or "Error" in l or "error" in l)[-6000:]
        pytest.fail(f"rc={rc}, summaries={lines}\nfailures:\n{fails}\n--- output tail ---\n{out[-6000:]}")
    return sum(int(m[3]) for m in lines)
