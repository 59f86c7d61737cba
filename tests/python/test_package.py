"""Packaging: registration, the autoload hook, the library loader's errors, and the
wheel installed into a fresh virtual environment working from another directory."""

import glob
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, assert_checks, run_command, torchrun, worker_env


def run_py(code, env=None, cwd=None, timeout=120):
    return run_command([sys.executable, "-c", textwrap.dedent(code)], timeout, env=env or worker_env(), cwd=cwd)


def test_register_is_idempotent_and_autoload_never_raises(built):
    rc, out = run_py(
        """
        import torch, torch.distributed as dist
        import gotree
        gotree.register(); gotree.register()          # twice: no error
        gotree._autoload(); gotree._autoload()         # the entry-point hook, twice
        assert gotree.is_registered()
        assert dist.Backend.backend_capability["gotree"] == ["cpu", "cuda"], dist.Backend.backend_capability
        assert dist.Backend.GOTREE == "gotree"
        # a failing registration must not escape the hook
        real = dist.Backend.register_backend
        gotree._registered = False
        def boom(*a, **k):
            raise RuntimeError("boom")
        dist.Backend.register_backend = boom
        dist.Backend._plugins.pop("GOTREE")
        gotree._autoload()
        assert isinstance(gotree._registration_error, RuntimeError)
        dist.Backend.register_backend = real
        gotree._autoload()
        assert gotree.is_registered()
        print("REGISTER-OK")
        """
    )
    assert rc == 0 and "REGISTER-OK" in out, out


def test_missing_library_is_a_clear_error(built, tmp_path):
    env = worker_env({"GOTREE_LIBRARY": str(tmp_path / "nope" / "libgotree.so")})
    rc, out = run_py(
        """
        import gotree
        try:
            gotree.load_library()
        except RuntimeError as e:
            print("ERR", e)
        """,
        env=env,
    )
    assert rc == 0 and "ERR gotree: the Go library is missing" in out and "make lib" in out, out
    # a file that is not a library: dlopen's reason is in the message
    bad = tmp_path / "libgotree.so"
    bad.write_text("not a library")
    rc, out = run_py(
        """
        import gotree
        try:
            gotree.load_library()
        except RuntimeError as e:
            print("ERR", e)
        """,
        env=worker_env({"GOTREE_LIBRARY": str(bad)}),
    )
    assert rc == 0 and "ERR gotree: cannot load the Go library" in out, out


LOAD_AND_PRINT = """
import gotree
try:
    gotree.load_library()
    print("LOADED")
except RuntimeError as e:
    print("ERR", e)
"""


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler")
def test_wrong_abi_version_and_missing_symbols_are_clear_errors(built, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    wrong = tmp_path / "wrong" / "libgotree.so"
    wrong.parent.mkdir()
    src = tmp_path / "wrong.c"
    src.write_text("int gotree_abi_version(void) { return 99; }\n")
    subprocess.check_call([cc, "-shared", "-fPIC", "-o", str(wrong), str(src)])
    rc, out = run_py(LOAD_AND_PRINT, env=worker_env({"GOTREE_LIBRARY": str(wrong)}))
    assert rc == 0 and "implements C ABI version 99 but this extension was built for version 1" in out, out

    partial = tmp_path / "partial" / "libgotree.so"
    partial.parent.mkdir()
    src.write_text("int gotree_abi_version(void) { return 1; }\n")
    subprocess.check_call([cc, "-shared", "-fPIC", "-o", str(partial), str(src)])
    rc, out = run_py(LOAD_AND_PRINT, env=worker_env({"GOTREE_LIBRARY": str(partial)}))
    assert rc == 0 and "does not export gotree_version" in out, out


def test_extension_of_another_torch_is_a_clear_error(built, tmp_path):
    """gotree._C compiled against another torch release fails to import on a
    missing symbol; load_library says which torch it was built for, which is
    running, and how to rebuild. The build records its torch (setup.py)."""
    rc, out = run_py(
        """
        import torch, gotree
        from gotree import _build_info
        assert _build_info.TORCH_VERSION == torch.__version__, (_build_info.TORCH_VERSION, torch.__version__)
        got = gotree._torch_mismatch(ImportError("undefined symbol: _ZN3c10x"), built="2.4.1", running="2.11.0+cu130")
        for want in ("compiled against torch 2.4.1", "torch 2.11.0+cu130 is running", "undefined symbol: _ZN3c10x", "pip wheel . --no-build-isolation"):
            assert want in got, got
        assert gotree._torch_mismatch(ImportError("x"), built="2.11.0", running="2.11.0+cu130") is None
        assert gotree._torch_mismatch(ImportError("x"), built="2.11.1", running="2.11.0") is None
        assert gotree._torch_mismatch(ImportError("x"), built="unknown", running="2.11.0") is None
        print("MISMATCH-OK")
        """
    )
    assert rc == 0 and "MISMATCH-OK" in out, out

    # The whole path: a package whose _C fails as a mismatched build does.
    pkg = tmp_path / "gotree"
    pkg.mkdir()
    shutil.copy(os.path.join(REPO, "python", "gotree", "__init__.py"), pkg / "__init__.py")
    (pkg / "_build_info.py").write_text("TORCH_VERSION = '1.13.1'\n")
    (pkg / "_C.py").write_text("raise ImportError('undefined symbol: _ZNK3c1011StorageImpl15decref_pyobjectEv')\n")
    (pkg / "libgotree.so").write_text("")
    env = worker_env({"PYTHONPATH": str(tmp_path), "GOTREE_LIBRARY": str(pkg / "libgotree.so")})
    rc, out = run_py(
        """
        import torch, gotree
        try:
            gotree.load_library()
        except ImportError as e:
            print("ERR", e)
            print("RUNNING", torch.__version__)
        """,
        env=env,
        cwd=str(tmp_path),
    )
    assert rc == 0 and "ERR gotree: its C++ extension was compiled against torch 1.13.1" in out, out
    running = out.split("RUNNING ")[1].split()[0]
    assert "torch {} is running".format(running) in out and "decref_pyobject" in out, out


def test_single_process_group_without_torchrun(built):
    """world_size 1 with an explicit store, inside one plain Python process."""
    rc, out = run_py(
        """
        import datetime, torch, torch.distributed as dist
        import gotree
        print("version:", gotree.load_library())
        store = dist.HashStore()
        dist.init_process_group("gotree", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
        t = torch.arange(10.0)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        assert torch.equal(t, torch.arange(10.0))
        out = torch.empty(10)
        dist.all_gather_into_tensor(out, t)
        assert torch.equal(out, t)
        dist.barrier()
        assert gotree.get_error().name == "SUCCESS", gotree.get_error()
        rec = gotree.flight_record()
        ops = [(op["seq"], op["desc"], op["state"]) for op in rec["ops"]]
        want = [(1, "allreduce #1 (10 x float32, max)", "completed"), (2, "allgather #2 (10 x float32)", "completed")]
        assert ops[:2] == want and ops[2][1].startswith("barrier #3") and ops[2][2] == "completed", ops
        assert rec["rank"] == 0 and rec["nranks"] == 1 and "failure" not in rec and len(rec["comm"]) == 12, rec
        assert all(op["issued_us"] <= op["started_us"] <= op["ended_us"] for op in rec["ops"]), rec["ops"]
        gloo = dist.new_group(backend="gloo")
        for f in (gotree.get_error, gotree.flight_record):
            try:
                f(gloo)
                raise AssertionError(f"{f.__name__} accepted a gloo group")
            except ValueError as e:
                assert "not gotree" in str(e), e
        dist.destroy_process_group()
        # gotree for CUDA tensors only (no GPU needed to create it): found there
        dist.init_process_group("cpu:gloo,cuda:gotree", store=dist.HashStore(), rank=0, world_size=1)
        assert gotree.get_error().name == "SUCCESS"
        dist.destroy_process_group()
        print("SINGLE-OK")
        """
    )
    assert rc == 0 and "SINGLE-OK" in out, out


def test_probe_handoff(built):
    """gotree.probe_handoff (the C ABI's gotree_probe_handoff): a time where two
    CPUs exist, clear errors for bad arguments and for a set of one CPU."""
    rc, out = run_py(
        """
        import os
        import gotree
        if len(os.sched_getaffinity(0)) >= 2:
            us = gotree.probe_handoff(64 << 10, 8)
            assert isinstance(us, float) and 0 < us < 2e6, us
        for nbytes, rounds, what in [(0, 8, "nbytes >= 1"), (64 << 10, 0, "rounds >= 1"),
                                     ((64 << 20) + 1, 8, "1 B to 64 MiB"), (4096, 1001, "1 to 1000 rounds")]:
            try:
                gotree.probe_handoff(nbytes, rounds)
                raise AssertionError(f"probe_handoff({nbytes}, {rounds}) was accepted")
            except ValueError as e:
                assert what in str(e), e
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        try:
            gotree.probe_handoff(4096, 4)
            raise AssertionError("probe_handoff ran on one CPU")
        except NotImplementedError as e:
            assert "fewer than two CPUs" in str(e), e
        print("PROBE-OK")
        """
    )
    assert rc == 0 and "PROBE-OK" in out, out


@pytest.mark.slow
def test_wheel_in_fresh_venv_from_another_directory(built, tmp_path):
    """`pip wheel` builds dist/gotree-*.whl; installed into a new venv (torch made visible
    through a .pth file, gotree only from the wheel) backend gotree works under torchrun
    from an unrelated directory, found through the torch.backends entry point."""
    wheel_dir = tmp_path / "dist"
    env = dict(os.environ, MAX_JOBS=os.environ.get("MAX_JOBS", "1"))
    import importlib.util

    import setuptools

    st_version = tuple(int(x) for x in setuptools.__version__.split(".")[:2])
    if importlib.util.find_spec("wheel") is None and st_version < (70, 1):
        # setuptools < 70.1 needs the `wheel` package to build wheels without isolation
        rc, out = run_command([sys.executable, "-m", "pip", "install", "-q", "wheel"], 300, env=dict(os.environ))
        assert rc == 0, "could not install the `wheel` package:\n" + out[-3000:]
    rc, out = run_command(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "-w", str(wheel_dir), "--no-build-isolation", "--no-deps"],
        900,
        env=env,
        cwd=REPO,
    )
    assert rc == 0, out[-6000:]
    wheels = glob.glob(str(wheel_dir / "gotree-*.whl"))
    assert len(wheels) == 1, out[-3000:]
    # the wheel ships both libraries and the entry point
    import zipfile

    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "gotree/libgotree.so" in names, names
    assert any(n.startswith("gotree/_C") and n.endswith(".so") for n in names), names
    # the torch the extension was compiled against, for load_library's mismatch error
    info = zipfile.ZipFile(wheels[0]).read("gotree/_build_info.py").decode()
    assert "TORCH_VERSION = {!r}".format(__import__("torch").__version__) in info, info
    ep = [n for n in names if n.endswith("entry_points.txt")]
    assert ep and "gotree = gotree:_autoload" in zipfile.ZipFile(wheels[0]).read(ep[0]).decode()

    venv = tmp_path / "venv"
    rc, out = run_command([sys.executable, "-m", "venv", str(venv)], 300, env=dict(os.environ))
    assert rc == 0, out
    vpy = venv / "bin" / "python"
    # torch comes from this interpreter's site-packages (no multi-GB download in tests);
    # gotree must come from the wheel only (--ignore-installed: after `make demo` the dev
    # venv has gotree too, and pip would otherwise count that as already installed).
    site = subprocess.check_output([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
    torch_site = os.path.dirname(os.path.dirname(__import__("torch").__file__))
    with open(os.path.join(site, "_torch_from_dev_venv.pth"), "w") as f:
        f.write(torch_site + "\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GOTREE_LIBRARY", "VIRTUAL_ENV")}
    clean["OMP_NUM_THREADS"] = "1"
    rc, out = run_command([str(vpy), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", wheels[0]], 300, env=clean)
    assert rc == 0, out[-3000:]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = elsewhere / "user_script.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            import torch, torch.distributed as dist   # no `import gotree`: the entry point registers it
            dist.init_process_group(backend="gotree")
            import gotree
            assert os.path.realpath(gotree.__file__).startswith(os.path.realpath(sys.prefix)), gotree.__file__
            r, n = dist.get_rank(), dist.get_world_size()
            t = torch.full((1000,), float(r + 1))
            dist.all_reduce(t)
            ok = torch.equal(t, torch.full((1000,), float(n * (n + 1) // 2)))
            outs = [torch.empty(3, dtype=torch.int64) for _ in range(n)]
            dist.all_gather(outs, torch.full((3,), r))
            ok = ok and all(torch.equal(o, torch.full((3,), i)) for i, o in enumerate(outs))
            print(f"GOTREE-CHECKS wheel rank={r} world={n} passed={2 if ok else 0} failed={0 if ok else 1} {'OK' if ok else 'FAILED'}", flush=True)
            dist.destroy_process_group()
            """
        )
    )
    rc, out = run_command(
        [str(vpy), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3", str(script)],
        300,
        env=clean,
        cwd=elsewhere,
    )
    assert_checks(rc, out, 3, min_passed=2)

    # `import gotree` before torch: importing torch then runs the entry point, which
    # re-enters gotree's registration on the same thread (this once deadlocked)
    rc, out = run_command(
        [str(vpy), "-c", "import gotree, torch, torch.distributed as d; assert gotree.is_registered(); print('ORDER-OK')"],
        120,
        env=clean,
        cwd=elsewhere,
    )
    assert rc == 0 and "ORDER-OK" in out, out[-3000:]
    def run_module(nproc, *args, env=clean):
        """python -m torch.distributed.run of a gotree module from the new venv."""
        cmd = [str(vpy), "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m", *args]
        return run_command(cmd, 300, env=env, cwd=elsewhere)

    # the demo module as `make demo` runs it (small sizes)
    rc, out = run_module(2, "gotree.demo", "--max-bytes", "64K", "--iters", "3")
    assert rc == 0 and "# wrong results: 0 (every call checked exactly)" in out and "ratio" in out, out[-4000:]
    # the DDP side-by-side benchmark (tiny model): runs, and its weight checks pass
    rc, out = run_module(3, "gotree.ddpbench", "--width", "96", "--depth", "2", "--steps", "4", "--warmup", "1")
    assert rc == 0 and "ratio gloo/gotree (step time)" in out and "identical across ranks for each backend: yes" in out, out[-4000:]
    # the same with FSDP2 on 4 ranks (allgather and reduce-scatter by halving-doubling)
    rc, out = run_module(4, "gotree.ddpbench", "--fsdp", "--width", "96", "--depth", "2", "--steps", "3", "--warmup", "1")
    assert rc == 0 and "FSDP2 per layer" in out and "identical across ranks for each backend: yes" in out, out[-4000:]
    # what runs and why, after autotuning decided two allreduce sizes (3 ranks);
    # with GOTREE_GRAPH_DUMP_FILE rank 0 writes the description at init and at
    # destroy, and `-m gotree.explain --file` prints it without a group
    dump = tmp_path / "graph.%c.json"
    rc, out = run_module(3, "gotree.explain", "--sizes", "4K,1M", "--tune", env={**clean, "GOTREE_GRAPH_DUMP_FILE": str(dump)})
    assert rc == 0 and "# gotree: 3 ranks on 1 node(s)" in out and "Channel 0: ring 0 -> " in out, out[-4000:]
    assert " autotuning " in out and "reducescatter (size as nccl-tests counts it)" in out, out[-4000:]
    assert "# wrong results while tuning: 0" in out, out[-4000:]
    dumps = list(tmp_path.glob("graph.*.json"))
    assert len(dumps) == 1, dumps
    rc, out = run_command([str(vpy), "-m", "gotree.explain", "--file", str(dumps[0])], 60, env=clean, cwd=elsewhere)
    assert rc == 0 and "# gotree: 3 ranks on 1 node(s)" in out and "allreduce on CUDA buffers" in out, out[-4000:]
    # the dump at destroy: the 4 KiB allreduce as autotuning decided it
    assert re.search(r"^\s+4 KiB\s+\S+\s+Simple\s+\d+\s+autotuning\s", out, re.M), out[-4000:]
    # 3 ranks are not a power of two: above 512 KiB auto leaves Bruck's order out
    # (an allgather's 1 MiB is 1048575 B on 3 ranks)
    assert re.search(r"^\s+1048575 B\s+ring\s.*\(auto leaves out hd at this size\)", out, re.M), out[-4000:]
    # the side-by-side sweep for every collective it measures (odd world size,
    # sizes not divisible by it): every result checked exactly
    for coll, more in [(c, []) for c in ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")] + [
            ("allreduce", ["--shm-buffers"])]:
        rc, out = run_module(3, "gotree.bench", "--coll", coll, "--sizes", "4,100,65537", "--batch", "3",
                             "--iters", "2", "--min-iters", "2", "--warmup", "1", "--budget-s", "0.2", *more)
        assert rc == 0 and f"gotree.bench: {coll}" in out and "wrong results: 0" in out, out[-4000:]
        # the machine state before and after each size (rank 0's probe_handoff),
        # then the algorithm gotree ran (its flight record)
        assert "state(us)" in out and len(re.findall(r" \d+/\d+ +[a-z-][a-z/-]*$", out, re.M)) == 3, out[-4000:]
        assert ("(gotree's tensors from gotree.empty)" in out) == bool(more), out[-4000:]
