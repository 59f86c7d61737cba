"""torch.distributed's consumers on backend gotree, each compared with gloo on the same seeds
(or, for train_check.py, with the same training in one process):
DDP (default buckets, gradient_as_bucket_view, find_unused_parameters, PowerSGD), FSDP2 fully_shard,
DTensor redistribute on 1-D and 2-D DeviceMeshes, and a torch.compile'd function of
functional collectives (backend="aot_eager", see workers/consumers.py)."""

import re

import pytest

from conftest import REPO, assert_checks, torchrun, worker_env

torch = pytest.importorskip("torch")


def test_ddp_matches_gloo(built):
    rc, out = torchrun("ddp.py", 2, timeout=300)
    assert_checks(rc, out, 2, min_passed=20)


def test_fsdp2_dtensor_compile_match_gloo(built, tmp_path):
    n = 4
    for backend in ("gotree", "gloo"):
        rc, out = torchrun("consumers.py", n, args=[backend], timeout=300, env=worker_env({"GOTREE_CONSUMERS_OUT": str(tmp_path)}))
        assert_checks(rc, out, n, min_passed=20)
    for rank in range(n):
        got = torch.load(tmp_path / f"gotree_rank{rank}.pt")
        ref = torch.load(tmp_path / f"gloo_rank{rank}.pt")
        assert sorted(got) == sorted(ref) and {"fsdp2_params", "dtensor_1d", "dtensor_2d", "compiled"} <= set(got)
        for key in ref:
            a, b = got[key], ref[key]
            pairs = zip(a, b) if isinstance(a, list) else [(a, b)]
            for i, (x, y) in enumerate(pairs):
                assert torch.allclose(x, y, rtol=1e-5, atol=1e-6), f"rank {rank} {key}[{i}]: gotree vs gloo max diff {(x - y).abs().max()}"


def test_training_matches_single_process(built):
    """tests/gpu/train_check.py on CPU tensors (the GPU session runs it on CUDA): DDP with
    several buckets, no_sync, a bf16 comm hook and PowerSGD, FSDP2, HSDP on a 2 x 2 mesh,
    tensor parallelism, a DCP save and load, DTensor and a compiled function, each against
    the same training in one process on the global batch (or the unsharded model)."""
    n = 4
    script = REPO / "tests" / "gpu" / "train_check.py"
    rc, out = torchrun(script, n, timeout=300)
    # ranks' lines can interleave without a newline between them
    ends = re.findall(r"train_check rank (\d+)/\d+ \([^)]*\) on \S+: (.*?) \(([a-z0-9,]*)\)", out)
    assert rc == 0 and sorted(int(r) for r, _, _ in ends) == list(range(n)), out[-6000:]
    assert all(status == "ok" and parts == "ddp,powersgd,fsdp2,hsdp,tp,dcp,dtensor,compiled" for _, status, parts in ends), ends


def test_powersgd_many_buckets_runs_or_fails_clearly(built):
    """DDP's PowerSGD hook over several buckets on CPU: future callbacks issue collectives
    while the autograd thread issues others, so their order can differ between ranks.
    Three tries; each either trains (same parameters on every rank) or fails fast with the
    error that names the cause; none hangs or crashes."""
    for _ in range(3):
        rc, out = torchrun("powersgd_buckets.py", 2, timeout=120)
        if rc == 0:
            assert out.count("powersgd_buckets rank") == 2, out[-4000:]
            continue
        assert "issued collectives from future callbacks" in out, out[-6000:]
        assert "SIGABRT" not in out and "SIGSEGV" not in out and "terminate called" not in out, out[-6000:]
