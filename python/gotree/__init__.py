"""gotree: a torch.distributed backend whose core is a Go library.

    import torch.distributed as dist
    dist.init_process_group(backend="gotree")   # under torchrun

Installing the wheel registers the backend automatically when torch is
imported (entry point group "torch.backends"); `import gotree` does the same
explicitly. The backend is registered for devices "cpu" and "cuda" with the
plain creator signature (store, rank, size, timeout).

Nothing here starts the Go runtime: libgotree.so is loaded by the first
process group that is created, so processes that never create one (and their
forked children) are unaffected.

Semantics (CPU tensors):

* collectives: allreduce (+ coalesced), broadcast, reduce, all_gather (list
  form, into one tensor, both coalesced forms), gather, scatter,
  reduce_scatter (list form, into one tensor, coalesced), all_to_all (list
  form) and all_to_all_single (equal and uneven splits), barrier, send/recv,
  batch_isend_irecv (startCoalescing/endCoalescing: one Work for the batch),
  monitored_barrier (through ProcessGroup.monitored_barrier; Python's
  dist.monitored_barrier only accepts gloo), sub-groups (new_group). One
  tensor per rank per call (like NCCL). Sequence numbers count collectives.
* reductions: SUM, AVG (a true average), PRODUCT, MIN, MAX, BAND/BOR/BXOR
  (integers and bool), PREMUL_SUM (floating point and complex; scalar or
  tensor factor; a scaled copy is reduced, the caller's input is not scaled
  except by all_reduce, whose result overwrites it anyway).
* dtypes: float32/64, float16, bfloat16, int8/16/32/64, uint8, bool, and
  complex64/128 (as pairs of reals: SUM, AVG, PREMUL_SUM). bool reduces
  logically (SUM/MAX/BOR = any, PRODUCT/MIN/BAND = all, BXOR = parity).
  Data movement (broadcast, gathers, scatter, all-to-all, send/recv) moves
  any dtype (unknown ones as raw bytes). Integer AVG truncates toward zero.
* point to point: tags are ignored (like NCCL): sends to one peer are
  matched with that peer's receives in issue order. dist.recv without src
  receives from any source (the first message to arrive) and returns the
  sender's rank; a zero-element receive from any source is refused (such
  sends put nothing on the wire): name src.
* non-contiguous tensors are staged through a contiguous copy and copied
  back when the collective succeeds; tensors with overlapping memory (from
  expand()) are refused for output.
* errors: bad arguments raise ValueError/TypeError/RuntimeError naming the
  problem before anything is sent (on the rank that passed them: ranks that
  did call the collective wait until the group timeout, then fail);
  arguments that disagree between ranks (counts, dtypes, ops, roots, split
  sizes) are caught by the library and fail the operation, or, for a rank
  whose own data was intact, its next operation on that group; a failed or
  timed-out collective raises torch.distributed.DistBackendError (from
  Work.wait() and from the Work's future); a forked child that calls gotree
  gets a RuntimeError. gotree.get_error(group) says without blocking whether
  a group still works (SUCCESS) or why it broke (TIMEOUT, REMOTE_ERROR,
  COMM_ERROR), like ProcessGroupNCCL.get_error. Ranks that issue calls whose
  plans differ (an allreduce of different sizes, say) and so wait on each
  other fail after about a second (the stall check), not at the timeout.
  gotree.flight_record(group) returns the group's last operations on this
  rank; with GOTREE_TRACE_DUMP_FILE set every rank writes its own when the
  group fails, and `gotree trace DIR` says where the ranks part.
  gotree.describe(group, sizes) says what the group runs and why: its
  rings, trees and links, and per collective and size the algorithm, the
  cost model's prediction of each one it may run, and what autotuning
  measured.
* groups: new_group, and split_group (supports_splitting, torch >= 2.9:
  each split is a new communicator of the ranks listed, bootstrapped
  through the parent's store; ranks left out get None).
* sparse COO tensors: all_reduce with SUM (as gloo): every rank's indices
  and values are gathered, and the tensor is replaced by the coalesced sum
  (identical on every rank; CUDA ones go through host memory). The call
  completes before it returns, even with async_op=True; other ops, and
  sparse tensors in any other collective, are refused.
* LD_BIND_NOW=1 is not supported (libgotree.so binds NVML lazily).
* $GOTREE_LIBRARY overrides the path of libgotree.so.

CUDA tensors (every tensor of one call on the same CUDA device) follow
ProcessGroupNCCL's stream semantics: the operation runs on the group's own
stream of that device, after what the caller's current stream had queued.
Work.wait() and Work.synchronize() make the caller's current stream wait for
it without blocking the host, Work.is_completed() says whether the GPU has
finished it, and the Work's future is CUDA-aware (its value, wait and then
wait on the current stream). Staging copies (non-contiguous tensors,
PREMUL_SUM's scaling) run on the group's stream. Which collectives run on
the GPU is up to libgotree.so: all-to-all, gather and scatter run through
pinned host memory (the call blocks until the result is in place);
send/recv, and machines where it finds no NVIDIA driver, raise
NotImplementedError naming the collective, the device and the library's
reason. barrier stays a host operation.
"""

import os
import threading
import warnings

__version__ = "0.1.0"
__all__ = ["BACKEND_NAME", "register", "library_path", "load_library", "is_registered", "get_error", "flight_record", "describe", "probe_handoff", "empty"]

BACKEND_NAME = "gotree"

_lock = threading.RLock()
_registered = False
_registration_error = None


def library_path():
    """Path of libgotree.so: $GOTREE_LIBRARY if set, else the package folder."""
    override = os.environ.get("GOTREE_LIBRARY")
    if override:
        return os.path.abspath(override)
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libgotree.so")


def load_library():
    """Loads libgotree.so (idempotent) and returns its version string.

    Imports torch.distributed first: the extension's backend class derives
    from torch._C._distributed_c10d.Backend, which must be registered with
    pybind11 before the extension module loads.
    """
    import torch.distributed  # noqa: F401  (see docstring)

    path = library_path()
    if not os.path.exists(path):
        raise RuntimeError(
            "gotree: the Go library is missing: {} does not exist. In a source checkout run "
            "`make lib` (or `python setup.py build_ext --inplace`); otherwise reinstall the "
            "gotree wheel.".format(path)
        )
    try:
        from gotree import _C
    except ImportError as e:
        why = _torch_mismatch(e)
        if why:
            raise ImportError(why) from e
        raise

    return _C.load_library(path)


def _minor(version):
    """"2.11.0+cu130" -> (2, 11); None if it does not start that way."""
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _torch_mismatch(err, built=None, running=None):
    """The message for a failed import of gotree._C when it was compiled
    against another torch release than the one running (the C++ API of
    torch changes between releases, so the import fails on a missing
    symbol); None when the releases match or the build's is unknown."""
    if built is None:
        try:
            from gotree._build_info import TORCH_VERSION as built
        except ImportError:
            return None
    if running is None:
        import torch

        running = torch.__version__
    if _minor(built) is None or _minor(built) == _minor(running):
        return None
    return (
        "gotree: its C++ extension was compiled against torch {} but torch {} is running, and "
        "torch's C++ API differs between releases ({}). Install a gotree built against this "
        "torch: in a source checkout, with this torch's Python, `python -m pip wheel . "
        "--no-build-isolation --no-deps -w dist`, then `python -m pip install "
        "--force-reinstall --no-deps dist/gotree-*.whl`."
    ).format(built, running, err)


def _create_backend(store, rank, size, timeout):
    """Creator for Backend.register_backend (plain signature)."""
    load_library()
    from gotree import _C

    return _C.GotreeBackend(store, rank, size, timeout)


def _backend_of(group, what):
    """The gotree backend of a group (the world group when None): its CPU or
    CUDA backend, the CPU one first ("cpu:gloo,cuda:gotree" groups too)."""
    import torch
    import torch.distributed as dist

    pg = group if group is not None else dist.group.WORLD
    if pg is None:
        raise RuntimeError("gotree.{}: no process group (call init_process_group first)".format(what))
    from gotree import _C

    found = []
    for dev in ("cpu", "cuda"):
        try:
            be = pg._get_backend(torch.device(dev))
        except RuntimeError:  # no backend for that device type
            continue
        if isinstance(be, _C.GotreeBackend):
            return be
        found.append("{} {}".format(dev, type(be).__name__))
    raise ValueError("gotree.{}: the group's backends are {}, not gotree".format(what, ", ".join(found) or "none"))


def get_error(group=None):
    """Whether a gotree group still works, without blocking (NCCL's
    ProcessGroupNCCL.get_error, which torch offers for NCCL only):
    torch.distributed's ErrorType.SUCCESS, or the kind of the first failure
    that broke the group: TIMEOUT (an operation ran past its timeout),
    REMOTE_ERROR (a peer failed, left or aborted), COMM_ERROR (the ranks
    issued different collectives, or the system refused). A broken group
    fails every later call; make a new one. group: a process group (default:
    the world group) whose CPU or CUDA backend is gotree (the CPU one first:
    "cpu:gloo,cuda:gotree" groups too). Needs torch >= 2.7.
    """
    import torch

    be = _backend_of(group, "get_error")
    if not hasattr(be, "get_error"):
        raise NotImplementedError(
            "gotree.get_error needs torch >= 2.7 (c10d::ErrorType); this extension was built against torch {}".format(
                torch.__version__
            )
        )
    return be.get_error()


def flight_record(group=None):
    """This rank's flight record of a gotree group, without blocking: a dict
    with the communicator's id ("comm", the same on every rank), "rank",
    "nranks", "failure" (once it broke) and "ops", its last operations
    (GOTREE_TRACE_BUFFER_SIZE of them, default 2000), oldest first: "seq"
    (a collective's sequence number, the same on every rank), "desc"
    ("allreduce #7 (1000 x float32, sum)", "send #2 to rank 1 (...)"),
    "algo", "state" (queued, running, completed, failed), "issued_us",
    "started_us", "ended_us" (microseconds since the epoch) and "error".
    Write the records of all ranks to files and `gotree trace DIR` says
    where the ranks part; GOTREE_TRACE_DUMP_FILE makes every rank write its
    own when the group fails. group: as for get_error.
    """
    import json

    return json.loads(_backend_of(group, "flight_record").flight_record())


def describe(group=None, sizes=None):
    """What a gotree group runs on this rank and why, without communicating:
    a dict with "rank", "nranks", "nodes", "node_of" (each rank's node),
    "hosts", "settings" (GOTREE_ALGO, the tuning, autotuning, channel
    bounds, FIFO bytes, whether direct and shared allreduce may run, the
    transports), "links" (this rank's links for collectives: channel, peer,
    "shm" or "tcp"), "channels" (each channel's "ring" from rank 0,
    "tree_parent" of every rank, this rank's "up", "down" and "role":
    root, internal or leaf) and "choices": for allreduce, allgather,
    reducescatter, broadcast and reduce at each size, the "algo", "proto"
    and "channels" that run, "predicted_us", "model_us" (the cost model's
    time of every algorithm allowed there), "by" ("model", "autotuning" once
    the first calls of that allreduce size measured "autotune_candidates",
    with "measured_us"; "exploring" while they do) and, for allreduce,
    "in_place_algo" where an in-place call would run another;
    "device_choices": the same for CUDA tensors (the device path's ring and
    tree kernels, chosen by the model with NCCL's constants for GPU links,
    no autotuning). sizes: bytes
    as nccl-tests counts them (allgather and reducescatter: the whole
    gathered buffer, rounded down to a multiple of the ranks); default 4 B
    to 256 MiB by factors of 4. group: as for get_error.
    """
    import json

    if sizes is None:
        sizes = []
    else:
        sizes = [int(b) for b in sizes]
        if not sizes:
            raise ValueError("gotree.describe: sizes is empty (None gives the default sizes)")
        for b in sizes:
            if b < 0:
                raise ValueError("gotree.describe: size {} bytes is negative".format(b))
    d = json.loads(_backend_of(group, "describe").describe(sizes))
    from gotree import _C

    d["shared_buffers"]["allocator"] = _C.shared_allocator()
    return d


def probe_handoff(nbytes=512 << 10, rounds=24):
    """How fast this machine hands freshly written memory from one CPU to
    another right now: the median microseconds of one hand-off of nbytes
    between two threads pinned to two CPUs of this process's affinity set
    (the C ABI's gotree_probe_handoff; `gotree handoff` on the command line).
    Every shared-memory algorithm repeats that step, so on a machine whose
    memory speed changes over time (a small VM: 512 KiB took 70-110 us in
    one state and 240-370 us in the other) it says which state a
    measurement ran in. Needs no process group; blocks for the rounds.
    Raises NotImplementedError with fewer than two CPUs, ValueError outside
    1 B-64 MiB or 1-1000 rounds.
    """
    nbytes, rounds = int(nbytes), int(rounds)
    if nbytes < 1 or rounds < 1:
        raise ValueError("gotree.probe_handoff: need nbytes >= 1 and rounds >= 1, got {} and {}".format(nbytes, rounds))
    load_library()
    from gotree import _C

    return _C.probe_handoff(nbytes, rounds)


def empty(*size, dtype=None):
    """A CPU tensor of `size` (like torch.empty; zero-filled) in memory that
    the other ranks of this host can map (the C ABI's gotree_mem_alloc).
    Collectives that run single-copy (direct) plans on such tensors - large
    allreduces on one host, the single-copy blocks of all_to_all, gather and
    scatter - read and write them with plain loads and stores instead of
    process_vm_readv/writev: fewer system calls and no copy through scratch
    memory. Use it for buffers you reduce often (gradients you flatten
    yourself, a parameter server's tensors); any mix of such and ordinary
    tensors across ranks works, nothing has to be agreed. The memory
    returns when the tensor's storage is freed; until then it holds one
    file descriptor, so allocate a few large tensors and take views of
    them rather than thousands of small ones. Needs no process group.
    gotree.describe(group)["shared_buffers"] counts how many peers'
    buffers calls reached this way.
    """
    import math

    import torch

    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    size = tuple(int(d) for d in size)
    if any(d < 0 for d in size):
        raise ValueError("gotree.empty: negative dimension in {}".format(size))
    dtype = dtype or torch.get_default_dtype()
    nbytes = math.prod(size) * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        return torch.zeros(size, dtype=dtype)  # nothing to share
    load_library()
    from gotree import _C

    return _C.shared_bytes(nbytes).view(dtype).view(size)


def use_shared_allocator(min_bytes=256 << 10, cache_bytes=1 << 30):
    """From now on, CPU tensors of at least min_bytes that torch allocates in
    this process live in shared buffers (as gotree.empty's do), so that
    direct plans reach them through mappings: DDP's gradient buckets,
    FSDP's gradients, any tensor a model makes. Freed ones, up to
    cache_bytes, are kept for reuse: the peers' mappings of them stay
    valid. min_bytes=0 turns it off for later tensors (those already made
    keep their memory). GOTREE_CPU_ALLOCATOR=shared does the same when a
    gotree process group is created ("shared,min_bytes:1M,cache_bytes:2G"
    sets both), and only the variable also makes allgather and
    reduce-scatter of blocks that large run direct (a choice every rank
    must agree on, so it is settled at init). Each such tensor holds a
    file descriptor until it is freed, and memory shared this way stays
    shared in a fork()ed child (a DataLoader worker writing into a tensor
    its parent allocated changes the parent's tensor too): keep min_bytes
    above the sizes such workers write. gotree.describe(group)["shared_buffers"]["allocator"] says
    whether it is installed.
    """
    min_bytes, cache_bytes = int(min_bytes), int(cache_bytes)
    if min_bytes < 0 or cache_bytes < 0:
        raise ValueError(
            "gotree.use_shared_allocator: min_bytes and cache_bytes must not be negative, got {} and {}".format(
                min_bytes, cache_bytes
            )
        )
    load_library()
    from gotree import _C

    _C.use_shared_allocator(min_bytes, cache_bytes)


def shared_allocator_note():
    """A bench header's words for the shared CPU allocator: "" when it is
    not installed, else which of torch's CPU tensors it shares."""
    load_library()
    from gotree import _C

    a = _C.shared_allocator()
    if not (a["installed"] and a["min_bytes"]):
        return ""
    return " (shared CPU allocator: every backend's CPU tensors of {} bytes and more in shared buffers{})".format(
        a["min_bytes"], "" if a["active"] else ", but replaced since")


def is_registered():
    import torch.distributed as dist

    return BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {})


def register():
    """Registers backend "gotree" for cpu and cuda with torch.distributed.

    Idempotent: a second call (autoload plus explicit import, or a name
    registered by someone else first) does nothing.
    """
    global _registered
    if _registered:
        return
    # Import torch before taking the lock: when `import gotree` comes first,
    # importing torch runs the torch.backends entry point, which calls back
    # into register() on this same thread.
    import torch.distributed as dist

    with _lock:
        if _registered:
            return
        if not dist.is_available():
            raise RuntimeError("gotree: this torch build has no torch.distributed")
        if not is_registered():
            dist.Backend.register_backend(
                BACKEND_NAME, _create_backend, extended_api=False, devices=["cpu", "cuda"]
            )
        _registered = True


def _autoload():
    """Entry point of group "torch.backends", run by `import torch`.

    Must never raise: an exception here would break `import torch` itself.
    Registration only; the Go library loads when a group is created.
    """
    global _registration_error
    try:
        register()
    except BaseException as e:  # noqa: BLE001 - see docstring
        _registration_error = e


try:
    register()
except Exception as _e:  # noqa: BLE001 - importing gotree must not fail either
    _registration_error = _e
    warnings.warn("gotree: could not register the torch.distributed backend: {!r}".format(_e))
