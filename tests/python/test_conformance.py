"""A representative subset of PyTorch's DistributedTest suite against backend gotree
(workers/dist_conformance.py; the full run and its counts are in docs/conformance.md).

Each test of the suite spawns WORLD_SIZE=2 fresh processes, so the subset is kept small
(1.5-3 minutes on 2 cores, depending on load): one or two tests per collective family."""

import os
import sys
import tempfile

import pytest

from conftest import REPO, WORKERS, run_command, worker_env

pytest.importorskip("expecttest", reason="torch.testing._internal needs the expecttest package")

SUBSET = [
    "test_all_reduce_sum",
    "test_all_reduce_coalesced_sum",
    "test_sparse_all_reduce_sum",
    "test_all_to_all_single_unequal_split",
    "test_batch_isend_irecv_gloo",
    "test_broadcast",
    "test_reduce_sum",
    "test_all_gather",
    "test_gather",
    "test_scatter",
    "test_send_recv",
    "test_send_recv_any_source",
    "test_barrier",
    "test_DistributedDataParallelCPU",
]


def test_pytorch_distributed_suite_subset(built):
    tmp = tempfile.mkdtemp(prefix="gotree-conformance-")
    env = worker_env({"BACKEND": "gotree", "WORLD_SIZE": "2", "TEMP_DIR": tmp})
    kexpr = " or ".join(f"{name}" for name in SUBSET)
    # exact names: pytest -k matches substrings, so anchor each with the class prefix
    ids = [f"{WORKERS / 'dist_conformance.py'}::TestDistBackendWithSpawn::{name}" for name in SUBSET]
    rc, out = run_command(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", *ids],
        timeout=600,
        env=env,
        cwd=REPO,
    )
    tail = out[-6000:]
    assert rc == 0, f"the suite subset failed (rc={rc}):\n{tail}"
    assert f"{len(SUBSET)} passed" in out, f"expected {len(SUBSET)} passed ({kexpr}):\n{tail}"
