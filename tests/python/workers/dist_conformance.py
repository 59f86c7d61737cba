"""PyTorch's own DistributedTest suite (torch.testing._internal.distributed.distributed_test)
against backend gotree, the way out-of-tree backends run it (torch_ucc's test/torch_tests.py):
declare gotree in DistTestCases.backend_feature, subclass TestDistBackend and
DistributedTest._DistTestBase, and spawn one process per rank for every test.

Run it with pytest (see docs/conformance.md for the exact commands):

    BACKEND=gotree WORLD_SIZE=2 python -m pytest -q tests/python/workers/dist_conformance.py -k <filter>

BACKEND, WORLD_SIZE and TEMP_DIR default to gotree, 2 and a fresh temporary folder. The
suite's `BACKEND == "gloo"` branches (and its gloo/nccl-only tests) do not apply to a
plugin backend; those tests are reported as skipped by the suite itself.
"""

import os
import sys
import tempfile

os.environ.setdefault("BACKEND", "gotree")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="gotree-conformance-")

# the in-place build (python/gotree) when run from a checkout
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))

import gotree  # noqa: E402,F401  (registers backend "gotree"; spawned ranks re-import this module)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

BACKEND = os.environ["BACKEND"]
# What gotree offers on CPU (see docs/conformance.md): a plugin with DDP and sub-groups; no
# GPU/CUDA tensors yet.
DistTestCases.backend_feature["plugin"].add(BACKEND)
DistTestCases.backend_feature["ddp"].add(BACKEND)
DistTestCases.backend_feature["subgroup"].add(BACKEND)

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

# Tests the suite reserves for gloo or MPI by name although their bodies are plain CPU
# collective tests that any backend can pass. GOTREE_CONFORMANCE_UNSKIP=1 (the default)
# runs them against gotree too; =0 reproduces the suite's own skips. (monitored_barrier
# tests stay skipped: Python's dist.monitored_barrier refuses every backend but gloo.)
UNSKIP_REASONS = {
    "Test requires backend {} to be one of {{'gloo'}}".format(BACKEND),
    "GLOO Batch Send Recv CPU",
    "Only MPI supports CPU all_to_all_single",
    "Only MPI supports all_to_all",
    "get_future is only supported on mpi, nccl and gloo",
    "Only gloo backend supports timeouts",
    "Only Gloo backend support sparse all reduce",
}
UNSKIPPED = []
if os.environ.get("GOTREE_CONFORMANCE_UNSKIP", "1") == "1":
    for _name in dir(DistributedTest._DistTestBase):
        _f = getattr(DistributedTest._DistTestBase, _name)
        if (
            _name.startswith("test_")
            and getattr(_f, "__unittest_skip__", False)
            and getattr(_f, "__unittest_skip_why__", None) in UNSKIP_REASONS
            and "monitored_barrier" not in _name
            and "accumulate_gradients" not in _name  # their bodies put the model on CUDA
        ):
            _f.__unittest_skip__ = False
            UNSKIPPED.append(_name)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
