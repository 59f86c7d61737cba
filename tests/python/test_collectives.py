"""Every collective of backend gotree under torchrun with 1-4 processes, against
independently computed results (see workers/collectives.py)."""

import pytest

from conftest import assert_checks, torchrun, worker_env


@pytest.mark.parametrize("nproc", [1, 2, 3, 4])
def test_collectives(built, nproc):
    rc, out = torchrun("collectives.py", nproc, timeout=420)
    passed = assert_checks(rc, out, nproc, min_passed=3000)
    print(f"{passed} checks passed over {nproc} ranks")


def test_reductions_six_ranks(built):
    # Six ranks on this 2-CPU machine (three per CPU): the reducing collectives,
    # every dtype and op, and allgather; integer sums wrap beyond four ranks at
    # the workers' input ranges, and an integer AVG divides the wrapped sum.
    # allgather and reduce_scatter run in Bruck's order here (6 is not a power
    # of two; the cost model picks it from 4 ranks on).
    # The large count is 2**18 + 3 here (1 MiB of float32, still many slots
    # per channel): each rank builds all six inputs and the reference in Python.
    env = worker_env({"GOTREE_TEST_ONLY": "allreduce,reduce,reduce_scatter,allgather", "GOTREE_TEST_BIG": str(2**18 + 3)})
    rc, out = torchrun("collectives.py", 6, timeout=420, env=env)
    passed = assert_checks(rc, out, 6, min_passed=3000)
    print(f"{passed} checks passed over 6 ranks")


@pytest.mark.parametrize("nproc", [1, 3])
def test_bad_input(built, nproc):
    rc, out = torchrun("bad_input.py", nproc, timeout=300)
    assert_checks(rc, out, nproc, min_passed=45)


def test_describe_names_what_runs(built):
    # gotree.describe at 3 ranks: rings and trees alike on every rank, and the
    # algorithm it names for an autotuned allreduce size, an allgather and a
    # broadcast is the one the flight record says ran (workers/describe.py).
    rc, out = torchrun("describe.py", 3, timeout=180)
    assert_checks(rc, out, 3, min_passed=100)


@pytest.mark.parametrize("scenario", ["timeout", "op_timeout", "peer_exit", "mismatch", "reinit"])
def test_failures_raise_instead_of_hanging(built, scenario, tmp_path):
    # The timeout cases also check the flight record the failed rank writes.
    env = worker_env({"GOTREE_TRACE_DUMP_FILE": str(tmp_path / "trace")}) if "timeout" in scenario else None
    rc, out = torchrun("failures.py", 2, args=[scenario], timeout=120, env=env)
    assert_checks(rc, out, 2, min_passed=1)


@pytest.mark.parametrize("nproc", [2, 3])
def test_rss_flat_over_many_calls(built, nproc):
    # GOGC=20: little garbage awaiting collection, so growth means a leak
    # (workers/rss_flat.py).
    rc, out = torchrun("rss_flat.py", nproc, timeout=300, env=worker_env({"GOGC": "20"}))
    assert_checks(rc, out, nproc, min_passed=100)
    print("\n".join(l for l in out.splitlines() if "RSS" in l))


def test_allreduce_direct(built):
    # Direct (single-copy) allreduce forced: every dtype and op, counts 0 to
    # 2^20+3, contiguous, strided and async, 3 ranks. The log shows the plan
    # that ran; where this machine forbids reading another process's memory
    # (the INIT line says why), the ring runs instead and must be right too.
    env = worker_env({"GOTREE_ALGO": "allreduce:direct", "GOTREE_TEST_ONLY": "allreduce,more_dtypes",
                      "GOTREE_DEBUG": "INFO", "GOTREE_DEBUG_SUBSYS": "INIT,COLL"})
    rc, out = torchrun("collectives.py", 3, timeout=300, env=env)
    passed = assert_checks(rc, out, 3, min_passed=1500)
    if "direct (single-copy) allreduce off" not in out:
        assert ": direct/Simple" in out, "no allreduce ran the direct plan"
    print(f"{passed} checks passed over 3 ranks")


def test_allreduce_oneshot(built):
    # One-shot allreduce forced: every dtype and op, 3 ranks (rank 2 folds
    # its own input third, in place through a scratch buffer). Messages
    # above its 32 KiB limit run the ring, after one warning.
    env = worker_env({"GOTREE_ALGO": "allreduce:oneshot", "GOTREE_TEST_ONLY": "allreduce,more_dtypes",
                      "GOTREE_DEBUG": "INFO", "GOTREE_DEBUG_SUBSYS": "INIT,COLL,TUNING"})
    rc, out = torchrun("collectives.py", 3, timeout=300, env=env)
    passed = assert_checks(rc, out, 3, min_passed=1500)
    assert ": oneshot/Simple" in out, "no allreduce ran the one-shot plan"
    print(f"{passed} checks passed over 3 ranks")


def test_allreduce_shared(built):
    # Shared allreduce (staging regions every rank maps) forced: every dtype
    # and op, counts 0 to 2^20+3 (several 512 KiB chunks), contiguous,
    # strided and async, 3 ranks; the INIT line says the regions are
    # mapped, and the plans that ran were shared ones.
    env = worker_env({"GOTREE_ALGO": "allreduce:shared", "GOTREE_TEST_ONLY": "allreduce,more_dtypes",
                      "GOTREE_DEBUG": "INFO", "GOTREE_DEBUG_SUBSYS": "INIT,COLL"})
    rc, out = torchrun("collectives.py", 3, timeout=300, env=env)
    passed = assert_checks(rc, out, 3, min_passed=1500)
    assert "shared allreduce on: 3 staging regions" in out
    assert ": shared/Simple" in out, "no allreduce ran the shared plan"
    print(f"{passed} checks passed over 3 ranks")


def test_collectives_shm_disabled(built):
    # GOTREE_SHM_DISABLE=1 (NCCL_SHM_DISABLE's habit): the ranks of this host
    # link over TCP; every collective family, 3 ranks.
    env = worker_env({"GOTREE_SHM_DISABLE": "1", "GOTREE_DEBUG": "INFO", "GOTREE_DEBUG_SUBSYS": "INIT",
                      "GOTREE_TEST_ONLY": "allreduce,more_dtypes,allgather,reduce_scatter,alltoall,p2p"})
    rc, out = torchrun("collectives.py", 3, timeout=300, env=env)
    passed = assert_checks(rc, out, 3, min_passed=1500)
    assert "GOTREE_SHM_DISABLE=1: ranks of one host link over TCP" in out
    print(f"{passed} checks passed over 3 ranks linked by TCP")


def test_alltoall_single_copy(built):
    # all_to_all with blocks of 1 MiB and more moves them single-copy (the
    # receiver reads the sender's block from its memory) where the ranks of
    # the host may read each other's memory; GOTREE_CMA_DISABLE=1 keeps every
    # block on the FIFO. Both must be exact; the COLL log says which ran.
    only = {"GOTREE_TEST_ONLY": "alltoall,gather_scatter", "GOTREE_DEBUG": "INFO", "GOTREE_DEBUG_SUBSYS": "INIT,COLL"}
    rc, out = torchrun("collectives.py", 3, timeout=300, env=worker_env(only))
    assert_checks(rc, out, 3, min_passed=100)
    if "direct (single-copy) allreduce off" not in out:
        assert "single-copy from ranks" in out, "no all-to-all block moved single-copy"
    rc, out = torchrun("collectives.py", 3, timeout=300, env=worker_env({**only, "GOTREE_CMA_DISABLE": "1"}))
    assert_checks(rc, out, 3, min_passed=100)
    assert "single-copy from ranks" not in out
    assert "through the FIFO from ranks" in out


def test_group_churn_leaves_nothing_behind(built):
    # 40 cycles of new_group / collectives / destroy on 3 ranks: descriptors and
    # shm mappings equal after cycle 10 and cycle 40, threads within two
    # (workers/group_churn.py).
    rc, out = torchrun("group_churn.py", 3, timeout=300)
    assert_checks(rc, out, 3, min_passed=80)
    print("\n".join(l for l in out.splitlines() if "after cycle" in l))


def test_shared_buffers(built):
    # gotree.empty tensors, allreduce forced direct (single-copy): the ranks
    # map each other's tensors instead of copying through the kernel, also
    # mixed with an ordinary tensor on one rank; exact results, memory freed.
    env = worker_env({"GOTREE_ALGO": "allreduce:direct", "GOTREE_DEBUG": "INFO", "GOTREE_DEBUG_SUBSYS": "INIT"})
    rc, out = torchrun("shared_buffers.py", 3, timeout=300, env=env)
    if "direct (single-copy) allreduce off" in out:
        pytest.skip("this machine forbids reading another process's memory: direct plans do not run")
    assert_checks(rc, out, 3, min_passed=40)


def test_shared_allocator(built):
    # GOTREE_CPU_ALLOCATOR=shared: torch's own tensors (the model's weights,
    # DDP's buckets) in shared buffers; DDP's gradients against a float64
    # reference, the peers' buckets mapped, the cache, a fork()ed child.
    env = worker_env(
        {
            "GOTREE_ALGO": "allreduce:direct",
            "GOTREE_CPU_ALLOCATOR": "shared,min_bytes:64K,cache_bytes:64M",
            "GOTREE_DEBUG": "INFO",
            "GOTREE_DEBUG_SUBSYS": "INIT",
        }
    )
    rc, out = torchrun("shared_allocator.py", 3, timeout=300, env=env)
    if "direct (single-copy) allreduce off" in out:
        pytest.skip("this machine forbids reading another process's memory: direct plans do not run")
    assert_checks(rc, out, 3, min_passed=25)
