// gotree_backend.cpp - the torch.distributed backend "gotree": a c10d::Backend
// and c10d::Work that call libgotree.so through its C ABI (capi/gotree.h).
//
// libgotree.so is never linked: it is dlopen()ed with RTLD_LAZY|RTLD_LOCAL
// from the package folder (Python passes the path) and every gotree_* function
// is resolved with dlsym. go-nvml leaves NVML symbols unresolved until first
// use, and Python loads extensions with RTLD_NOW, so a link-time dependency
// would make `import gotree._C` fail.
//
// Threads: collectives are issued from the caller's thread under issueMu_
// (the library requires one issue order on every rank). One completion
// thread per backend waits on the issued requests in issue order (the library
// completes them in that order) and completes each Work and its Future, so
// DDP's future.then() chains run without anyone calling Work.wait(). Those
// callbacks run on the completion thread and may issue a collective and wait
// for its future (DDP's PowerSGD hook does): a collective queued from a
// completion thread while no other one is free starts a helper that takes
// the queue's next works, so the waiting callback is never the only thread
// that could complete what it waits for.
// Work.wait() itself waits on the library directly (lower latency); whichever
// thread sees the request finish first completes the Work, exactly once.
//
// CUDA tensors get ProcessGroupNCCL's stream semantics through device-generic
// c10 APIs only (no CUDA header or toolkit is needed to build this file). The
// backend keeps one internal stream per device. A collective makes it wait
// for the caller's current stream, stages copies on it, has the library
// enqueue the operation on it (the request comes back already complete),
// queues the copy-out, reserves every tensor's memory for it and records an
// end event there. Work.wait() and synchronize() make the caller's current
// stream wait for that event (the host does not block); isCompleted() queries
// it. The future is CUDA-aware and completed at issue: whoever consumes it
// (wait, value, then) has their current stream wait for the internal stream.
//
// No logic that belongs in Go lives here: this file validates tensors, maps
// torch types to the ABI, stages non-contiguous tensors, and keeps buffers
// alive until the library is done with them.

#include <torch/extension.h>
#include <torch/version.h>

#include <ATen/MemoryOverlap.h>
#include <ATen/core/ivalue.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cxxabi.h>
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cctype>
#include <cstring>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "gotree.h"

// Whether the caller asked for an async op. Options carry asyncOp from
// torch 2.7 on (false for dist.all_reduce(t) without async_op=True: the
// caller waits at once); older options do not, and count as async.
template <typename O>
auto isAsyncOp(const O& o, int) -> decltype(o.asyncOp, bool()) {
  return o.asyncOp;
}
template <typename O>
bool isAsyncOp(const O&, long) {
  return true;
}

// Marks options as a synchronous call where they carry asyncOp.
template <typename O>
auto setSyncOp(O& o, int) -> decltype(o.asyncOp, void()) {
  o.asyncOp = false;
}
template <typename O>
void setSyncOp(O&, long) {}

// Backend::split(store, ranks, options), which ProcessGroup::splitGroup
// (torch.distributed.split_group) calls, exists from torch 2.9 on.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
#define GOTREE_HAVE_SPLIT 1
#else
#define GOTREE_HAVE_SPLIT 0
#endif

// c10::Stream::native_handle (a CUDA stream's cudaStream_t without the CUDA
// headers) exists from torch 2.11 on. Built against an older torch, the
// extension serves CPU tensors and refuses CUDA tensors, saying why.
// Backend::getError (c10d::ErrorType: whether the group still works,
// torch.distributed's get_error()) exists from torch 2.7 on.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 7)
#define GOTREE_HAVE_GET_ERROR 1
#else
#define GOTREE_HAVE_GET_ERROR 0
#endif

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
#define GOTREE_HAVE_STREAM_HANDLE 1
#else
#define GOTREE_HAVE_STREAM_HANDLE 0
#endif

namespace gotree_ext {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---------------------------------------------------------------------------
// The C ABI, resolved at run time.

struct Api {
  void* handle = nullptr;
  std::string path;
  pid_t pid = 0;  // process that loaded the library (and started Go's runtime)
  decltype(&gotree_abi_version) abi_version = nullptr;
  decltype(&gotree_version) version = nullptr;
  decltype(&gotree_status_string) status_string = nullptr;
  decltype(&gotree_error_text) error_text = nullptr;
  decltype(&gotree_probe_handoff) probe_handoff = nullptr;
  decltype(&gotree_mem_alloc) mem_alloc = nullptr;
  decltype(&gotree_mem_free) mem_free = nullptr;
  decltype(&gotree_mem_alloc_uninit) mem_alloc_uninit = nullptr;
  decltype(&gotree_mem_set_cache) mem_set_cache = nullptr;
  decltype(&gotree_cpu_allocator_config) cpu_allocator_config = nullptr;
  decltype(&gotree_get_unique_id) get_unique_id = nullptr;
  decltype(&gotree_comm_init_rank) comm_init_rank = nullptr;
  decltype(&gotree_comm_rank) comm_rank = nullptr;
  decltype(&gotree_comm_size) comm_size = nullptr;
  decltype(&gotree_comm_destroy) comm_destroy = nullptr;
  decltype(&gotree_comm_abort) comm_abort = nullptr;
  decltype(&gotree_comm_will_wait) comm_will_wait = nullptr;
  decltype(&gotree_comm_get_async_error) comm_get_async_error = nullptr;
  decltype(&gotree_comm_flight_record) comm_flight_record = nullptr;
  decltype(&gotree_comm_describe) comm_describe = nullptr;
  decltype(&gotree_comm_dump_flight_record) comm_dump_flight_record = nullptr;
  decltype(&gotree_allreduce) allreduce = nullptr;
  decltype(&gotree_broadcast) broadcast = nullptr;
  decltype(&gotree_allgather) allgather = nullptr;
  decltype(&gotree_barrier) barrier = nullptr;
  decltype(&gotree_reduce) reduce = nullptr;
  decltype(&gotree_reduce_scatter) reduce_scatter = nullptr;
  decltype(&gotree_alltoall) alltoall = nullptr;
  decltype(&gotree_alltoallv) alltoallv = nullptr;
  decltype(&gotree_gather) gather = nullptr;
  decltype(&gotree_scatter) scatter = nullptr;
  decltype(&gotree_send) send = nullptr;
  decltype(&gotree_recv) recv = nullptr;
  decltype(&gotree_request_test) request_test = nullptr;
  decltype(&gotree_request_source) request_source = nullptr;
  decltype(&gotree_request_wait) request_wait = nullptr;
  decltype(&gotree_request_free) request_free = nullptr;
};

std::mutex g_api_mu;
Api* g_api = nullptr;  // set once, never freed (one Go runtime per process)

// The process's id, without a getpid system call (about 0.2 µs here) on
// every check: set when the module loads, and refreshed in the child of
// every fork() by a pthread_atfork handler registered then.
std::atomic<pid_t> g_pid{0};

void refreshPid() { g_pid.store(getpid(), std::memory_order_relaxed); }

pid_t currentPid() { return g_pid.load(std::memory_order_relaxed); }

void checkNotForked(pid_t owner, const char* what) {
  pid_t now = currentPid();
  TORCH_CHECK(
      now == owner,
      "gotree: ", what, " in a forked child process (pid ", now,
      ") of the process that loaded libgotree.so (pid ", owner,
      "). The Go runtime inside libgotree.so does not survive fork(), so a "
      "forked child cannot call gotree. Create the process group in each "
      "process after it starts (torchrun, or multiprocessing with the "
      "'spawn' start method); DataLoader workers that never call gotree are "
      "fine.");
}

template <typename F>
void resolve(void* h, const char* name, F& fn, const std::string& path) {
  dlerror();
  void* sym = dlsym(h, name);
  const char* err = dlerror();
  TORCH_CHECK(
      sym != nullptr && err == nullptr, "gotree: ", path,
      " does not export ", name, " (", (err ? err : "null symbol"),
      "); it is not a matching libgotree.so. Rebuild it (make lib) or "
      "reinstall the gotree wheel.");
  fn = reinterpret_cast<F>(sym);
}

const Api& loadApi(const std::string& path) {
  std::lock_guard<std::mutex> g(g_api_mu);
  if (g_api != nullptr) {
    checkNotForked(g_api->pid, "libgotree.so was used");
    return *g_api;
  }
  void* h = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) {
    const char* err = dlerror();
    TORCH_CHECK(
        false, "gotree: cannot load the Go library ", path, ": ",
        (err ? err : "unknown dlopen error"),
        ". Build it with `make lib` (development checkout) or reinstall the "
        "gotree wheel. Note: LD_BIND_NOW=1 is not supported (libgotree.so "
        "binds NVML lazily).");
  }
  auto* a = new Api();
  a->handle = h;
  a->path = path;
  a->pid = currentPid();
  try {
    resolve(h, "gotree_abi_version", a->abi_version, path);
    int v = a->abi_version();
    TORCH_CHECK(
        v == GOTREE_ABI_VERSION, "gotree: ", path, " implements C ABI version ",
        v, " but this extension was built for version ", GOTREE_ABI_VERSION,
        "; rebuild the extension and the library together (make wheel).");
    resolve(h, "gotree_version", a->version, path);
    resolve(h, "gotree_status_string", a->status_string, path);
    resolve(h, "gotree_error_text", a->error_text, path);
    resolve(h, "gotree_probe_handoff", a->probe_handoff, path);
    resolve(h, "gotree_mem_alloc", a->mem_alloc, path);
    resolve(h, "gotree_mem_free", a->mem_free, path);
    resolve(h, "gotree_mem_alloc_uninit", a->mem_alloc_uninit, path);
    resolve(h, "gotree_mem_set_cache", a->mem_set_cache, path);
    resolve(h, "gotree_cpu_allocator_config", a->cpu_allocator_config, path);
    resolve(h, "gotree_get_unique_id", a->get_unique_id, path);
    resolve(h, "gotree_comm_init_rank", a->comm_init_rank, path);
    resolve(h, "gotree_comm_rank", a->comm_rank, path);
    resolve(h, "gotree_comm_size", a->comm_size, path);
    resolve(h, "gotree_comm_destroy", a->comm_destroy, path);
    resolve(h, "gotree_comm_abort", a->comm_abort, path);
    resolve(h, "gotree_comm_will_wait", a->comm_will_wait, path);
    resolve(h, "gotree_comm_get_async_error", a->comm_get_async_error, path);
    resolve(h, "gotree_comm_flight_record", a->comm_flight_record, path);
    resolve(h, "gotree_comm_describe", a->comm_describe, path);
    resolve(h, "gotree_comm_dump_flight_record", a->comm_dump_flight_record, path);
    resolve(h, "gotree_allreduce", a->allreduce, path);
    resolve(h, "gotree_broadcast", a->broadcast, path);
    resolve(h, "gotree_allgather", a->allgather, path);
    resolve(h, "gotree_barrier", a->barrier, path);
    resolve(h, "gotree_reduce", a->reduce, path);
    resolve(h, "gotree_reduce_scatter", a->reduce_scatter, path);
    resolve(h, "gotree_alltoall", a->alltoall, path);
    resolve(h, "gotree_alltoallv", a->alltoallv, path);
    resolve(h, "gotree_gather", a->gather, path);
    resolve(h, "gotree_scatter", a->scatter, path);
    resolve(h, "gotree_send", a->send, path);
    resolve(h, "gotree_recv", a->recv, path);
    resolve(h, "gotree_request_test", a->request_test, path);
    resolve(h, "gotree_request_source", a->request_source, path);
    resolve(h, "gotree_request_wait", a->request_wait, path);
    resolve(h, "gotree_request_free", a->request_free, path);
  } catch (...) {
    // Keep the library mapped (unloading a Go runtime is not possible), but
    // do not publish a half-resolved table.
    delete a;
    throw;
  }
  g_api = a;
  return *g_api;
}

const Api& api() {
  std::lock_guard<std::mutex> g(g_api_mu);
  TORCH_CHECK(
      g_api != nullptr,
      "gotree: libgotree.so is not loaded; call gotree._C.load_library(path) "
      "first (gotree's backend creator does this).");
  return *g_api;
}

std::string errorText(const Api& a, int64_t handle) {
  std::string buf(512, '\0');
  size_t n = a.error_text(handle, buf.data(), buf.size());
  if (n >= buf.size()) {
    buf.assign(n + 1, '\0');
    n = a.error_text(handle, buf.data(), buf.size());
    if (n >= buf.size()) {
      n = buf.size() - 1;
    }
  }
  buf.resize(n);
  return buf;
}

std::string statusName(const Api& a, gotree_status_t st) {
  const char* s = a.status_string(st);
  return s ? std::string(s) : std::string("status ") + std::to_string(int(st));
}

// ---------------------------------------------------------------------------
// GOTREE_CPU_ALLOCATOR=shared (or gotree.use_shared_allocator): torch's CPU
// allocator, for tensors of at least min_bytes, hands out shared buffers
// (gotree_mem_alloc_uninit) so that direct plans reach the tensors torch
// allocates - DDP's buckets, FSDP's gradients - through mappings, as they
// reach gotree.empty's. Smaller tensors, a failed allocation and a forked
// child (whose Go runtime is gone) get the allocator it replaced. It stays
// installed for the process's life (tensors it made must find their
// deleter); min_bytes 0 turns it into a pass-through.

class SharedCPUAllocator final : public c10::Allocator {
 public:
  SharedCPUAllocator(c10::Allocator* fallback, const Api& a)
      : fallback_(fallback), api_(a) {}

  void setMinBytes(size_t n) { min_bytes_.store(n, std::memory_order_relaxed); }
  size_t minBytes() const { return min_bytes_.load(std::memory_order_relaxed); }
  int64_t fallbacks() const { return failed_.load(std::memory_order_relaxed); }

  c10::DataPtr allocate(size_t n) override {
    size_t lo = minBytes();
    if (lo == 0 || n < lo || currentPid() != api_.pid) {
      return fallback_->allocate(n);
    }
    void* p = nullptr;
    if (api_.mem_alloc_uninit(n, &p) != GOTREE_SUCCESS || p == nullptr) {
      if (failed_.fetch_add(1, std::memory_order_relaxed) == 0) {
        TORCH_WARN("gotree: GOTREE_CPU_ALLOCATOR=shared could not allocate a shared buffer of ", n,
                   " bytes (", errorText(api_, 0), "); this and later such tensors use torch's "
                   "allocator (gotree.describe's shared_buffers counts them)");
      }
      return fallback_->allocate(n);
    }
    {
      std::lock_guard<std::mutex> g(mu());
      ours().insert(p);
    }
    return {p, p, &freeShared, c10::Device(c10::DeviceType::CPU)};
  }

  // raw_deallocate receives pointers of either kind.
  c10::DeleterFnPtr raw_deleter() const override { return &rawFree; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static SharedCPUAllocator* installed;  // set once, never freed

 private:
  // The set of this allocator's buffers, for raw_deleter. Its mutex is
  // held across fork() (pthread_atfork, registered when the module loads)
  // so that a child never inherits it locked. Both are never destroyed: a
  // tensor that some static object holds may be freed during the exit's
  // static destruction, after a static set would be gone.
  static std::mutex& mu() {
    static auto* m = new std::mutex();
    return *m;
  }
  static std::unordered_set<void*>& ours() {
    static auto* s = new std::unordered_set<void*>();
    return *s;
  }

 public:
  static void lockForFork() { mu().lock(); }
  static void unlockAfterFork() { mu().unlock(); }

 private:
  static void freeShared(void* p) {
    {
      std::lock_guard<std::mutex> g(mu());
      ours().erase(p);
    }
    // In a forked child the buffer stays mapped (it is the parent's
    // memory, shared; the Go runtime that would free it is gone there).
    if (installed != nullptr && currentPid() == installed->api_.pid) {
      installed->api_.mem_free(p);
    }
  }

  static void rawFree(void* p) {
    bool mine;
    {
      std::lock_guard<std::mutex> g(mu());
      mine = ours().count(p) > 0;
    }
    if (mine) {
      freeShared(p);
    } else if (auto d = installed->fallback_->raw_deleter()) {
      d(p);
    }
  }

  c10::Allocator* fallback_;
  const Api& api_;
  std::atomic<size_t> min_bytes_{0};
  std::atomic<int64_t> failed_{0};
};

SharedCPUAllocator* SharedCPUAllocator::installed = nullptr;

// useSharedAllocator installs the allocator (once) or changes its
// threshold; cache_bytes goes to gotree_mem_set_cache.
void useSharedAllocator(size_t min_bytes, size_t cache_bytes) {
  const Api& a = api();
  checkNotForked(a.pid, "the shared CPU allocator was set up");
  gotree_status_t st = a.mem_set_cache(cache_bytes);
  TORCH_CHECK(st == GOTREE_SUCCESS, "gotree: gotree_mem_set_cache: ", errorText(a, 0));
  static std::mutex install_mu;
  std::lock_guard<std::mutex> g(install_mu);
  if (SharedCPUAllocator::installed == nullptr) {
    if (min_bytes == 0) {
      return;
    }
    auto* s = new SharedCPUAllocator(c10::GetCPUAllocator(), a);
    s->setMinBytes(min_bytes);
    SharedCPUAllocator::installed = s;
    c10::SetCPUAllocator(s, /*priority=*/0);
    TORCH_CHECK(c10::GetCPUAllocator() == s,
                "gotree: the shared CPU allocator could not replace torch's CPU allocator "
                "(another one was registered with a higher priority)");
    return;
  }
  SharedCPUAllocator::installed->setMinBytes(min_bytes);
}

// useSharedAllocatorFromEnv acts on GOTREE_CPU_ALLOCATOR (when set: unset
// leaves an allocator installed by gotree.use_shared_allocator alone).
void useSharedAllocatorFromEnv() {
  const Api& a = api();
  size_t lo = 0, cache = 0;
  gotree_status_t st = a.cpu_allocator_config(&lo, &cache);
  TORCH_CHECK_VALUE(st == GOTREE_SUCCESS, errorText(a, 0));
  if (lo > 0) {
    useSharedAllocator(lo, cache);
  }
}

// Future callbacks running on this thread (GotreeWork::finish), and whether
// any of them issued a collective: the order in which such collectives meet
// those of other threads depends on timing, so it can differ between ranks.
thread_local int tlsInCallback = 0;
std::atomic<bool> g_issuedFromCallback{false};

// Python's exit. A completion thread takes the GIL to run Python future
// callbacks and to free tensors that Python made. Once Python finalizes, a
// thread that asks for the GIL is ended by pthread_exit, and its unwinding
// ends the process where it starts inside a destructor (noexcept), as it
// does in torch's callback wrappers. So an atexit hook (quiesceForExit, run
// while Python is whole) sets g_exiting and waits for the regions that may
// take the GIL (GilRegion) to end; after it, completion threads neither run
// callbacks nor free such tensors (they leak them: the process is exiting).
std::atomic<bool> g_exiting{false};
std::atomic<int> g_gilRegions{0};

bool pythonExiting() {
  if (g_exiting.load()) {
    return true;
  }
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

// A region of a completion thread that may take the GIL; false (and not
// entered) once Python exits. Counted before g_exiting is read, so that
// quiesceForExit, which sets it before it reads the count, sees every
// region that did not see the flag.
class GilRegion {
 public:
  GilRegion() {
    g_gilRegions.fetch_add(1);
    entered_ = !pythonExiting();
    if (!entered_) {
      g_gilRegions.fetch_sub(1);
    }
  }
  ~GilRegion() {
    if (entered_) {
      g_gilRegions.fetch_sub(1);
    }
  }
  GilRegion(const GilRegion&) = delete;
  GilRegion& operator=(const GilRegion&) = delete;
  explicit operator bool() const { return entered_; }

 private:
  bool entered_;
};

// The atexit hook, called with the GIL held: waits (without it) up to
// `limit` for the regions under way to end. Returns whether they did.
bool quiesceForExit(std::chrono::milliseconds limit) {
  g_exiting.store(true);
  pybind11::gil_scoped_release nogil;
  auto end = std::chrono::steady_clock::now() + limit;
  while (g_gilRegions.load() > 0) {
    if (std::chrono::steady_clock::now() >= end) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Error text for a failure: the first non-empty text among the handles.
std::string describeStatus(
    const Api& a, gotree_status_t st, std::initializer_list<int64_t> handles) {
  std::string text;
  for (int64_t h : handles) {
    text = errorText(a, h);
    if (!text.empty()) {
      break;
    }
  }
  std::string name = statusName(a, st);
  if (text.empty()) {
    return name;
  }
  // The library's text usually starts with the status name already.
  if (text.compare(0, name.size(), name) == 0) {
    return text;
  }
  return name + ": " + text;
}

// describeStatus, and why the ranks may have issued different collectives
// where this process issued some from future callbacks.
std::string describeFailure(
    const Api& a, gotree_status_t st, std::initializer_list<int64_t> handles) {
  std::string desc = describeStatus(a, st, handles);
  if (g_issuedFromCallback.load() &&
      desc.find("issued different collectives") != std::string::npos) {
    desc += " [this process issued collectives from future callbacks (DDP's "
            "PowerSGD hook does) while another thread issued collectives on "
            "the same group: which comes first depends on timing and differs "
            "between ranks. Keep such a DDP hook to one bucket (bucket_cap_mb "
            "above the gradients' size) or issue every collective from one "
            "thread; gloo hangs here, NCCL runs the callbacks of CUDA work at "
            "issue]";
  }
  return desc;
}

std::exception_ptr makeDistError(const std::string& msg) {
  try {
    C10_THROW_ERROR(DistBackendError, msg);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

[[noreturn]] void throwStatus(gotree_status_t st, const std::string& msg) {
  if (st == GOTREE_ERR_INVALID_ARGUMENT) {
    C10_THROW_ERROR(ValueError, msg);
  }
  if (st == GOTREE_ERR_NOT_SUPPORTED) {
    C10_THROW_ERROR(NotImplementedError, msg);
  }
  C10_THROW_ERROR(DistBackendError, msg);
}

// ---------------------------------------------------------------------------
// Types.

std::string dtypeName(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kBool: return "torch.bool";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    case at::kComplexHalf: return "torch.complex32";
    default: {
      // Python's spelling: UInt16 -> uint16, Float8_e4m3fn -> float8_e4m3fn
      std::string s = c10::toString(t);
      for (auto& ch : s) {
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      }
      return "torch." + s;
    }
  }
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "ReduceOp.SUM";
    case c10d::ReduceOp::AVG: return "ReduceOp.AVG";
    case c10d::ReduceOp::PRODUCT: return "ReduceOp.PRODUCT";
    case c10d::ReduceOp::MIN: return "ReduceOp.MIN";
    case c10d::ReduceOp::MAX: return "ReduceOp.MAX";
    case c10d::ReduceOp::BAND: return "ReduceOp.BAND";
    case c10d::ReduceOp::BOR: return "ReduceOp.BOR";
    case c10d::ReduceOp::BXOR: return "ReduceOp.BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "ReduceOp.PREMUL_SUM";
    default: return "ReduceOp.<unknown>";
  }
}

const char* kSupportedReduceDtypes =
    "torch.float32, float64, float16, bfloat16, float8_e4m3fn, float8_e5m2, "
    "int8, uint8, int16, uint16, int32, uint32, int64, uint64, bool, complex64, "
    "complex128 (complex: SUM, AVG, PREMUL_SUM only)";

// Native ABI dtype of a torch dtype; false when the ABI has none.
bool nativeDtype(at::ScalarType t, gotree_dtype_t* out) {
  switch (t) {
    case at::kFloat: *out = GOTREE_FLOAT32; return true;
    case at::kDouble: *out = GOTREE_FLOAT64; return true;
    case at::kHalf: *out = GOTREE_FLOAT16; return true;
    case at::kBFloat16: *out = GOTREE_BFLOAT16; return true;
    case at::kChar: *out = GOTREE_INT8; return true;
    case at::kByte: *out = GOTREE_UINT8; return true;
    case at::kShort: *out = GOTREE_INT16; return true;
    case at::kInt: *out = GOTREE_INT32; return true;
    case at::kLong: *out = GOTREE_INT64; return true;
    case c10::ScalarType::UInt16: *out = GOTREE_UINT16; return true;
    case c10::ScalarType::UInt32: *out = GOTREE_UINT32; return true;
    case c10::ScalarType::UInt64: *out = GOTREE_UINT64; return true;
    case c10::ScalarType::Float8_e4m3fn: *out = GOTREE_FLOAT8_E4M3; return true;
    case c10::ScalarType::Float8_e5m2: *out = GOTREE_FLOAT8_E5M2; return true;
    default: return false;
  }
}

// How one tensor travels for a pure data-movement collective (broadcast,
// all-gather): its native ABI dtype, else raw bytes (any dtype moves
// correctly as bytes).
struct Wire {
  gotree_dtype_t dtype;
  uint64_t count;  // elements of `dtype`
};

Wire moveWire(const at::Tensor& t) {
  gotree_dtype_t d;
  if (nativeDtype(t.scalar_type(), &d)) {
    return {d, static_cast<uint64_t>(t.numel())};
  }
  return {GOTREE_UINT8, static_cast<uint64_t>(t.numel()) * t.element_size()};
}

// How a reduction travels: ABI dtype and op, element count on the wire, and
// what to do first (PREMUL_SUM's factor) — or a TypeError naming the problem.
struct ReducePlan {
  gotree_dtype_t dtype;
  gotree_op_t op;
  uint64_t factor_count_mult = 1;  // complex: 2 reals per element
  bool premul = false;
  double premul_double = 0.0;
  at::Tensor premul_tensor;
};

ReducePlan planReduce(
    at::ScalarType t, const c10d::ReduceOp& rop, const char* coll) {
  auto op = rop.op_;
  ReducePlan p;
  bool is_float = at::isFloatingType(t);
  bool is_complex = at::isComplexType(t);
  bool is_int = at::isIntegralType(t, /*includeBool=*/false);
  bool is_bool = t == at::kBool;

  if (is_complex) {
    // Complex numbers reduce as pairs of reals for the element-wise-linear
    // ops only (MIN/MAX/PRODUCT/bitwise have no such meaning).
    TORCH_CHECK_TYPE(
        op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG ||
            op == c10d::ReduceOp::PREMUL_SUM,
        "gotree: ", coll, ": ", opName(op), " is not supported for ",
        dtypeName(t), " tensors (complex tensors support SUM, AVG and "
        "PREMUL_SUM)");
    p.dtype = t == at::kComplexFloat ? GOTREE_FLOAT32 : GOTREE_FLOAT64;
    p.factor_count_mult = 2;
  } else if (is_bool) {
    // bool travels as uint8 0/1 with the logical meaning of each op, so the
    // result is always a valid bool (SUM would otherwise produce 2).
    p.dtype = GOTREE_UINT8;
  } else {
    TORCH_CHECK_TYPE(
        nativeDtype(t, &p.dtype), "gotree: ", coll, ": dtype ", dtypeName(t),
        " is not supported for reductions (supported: ",
        kSupportedReduceDtypes, ")");
  }

  switch (op) {
    case c10d::ReduceOp::SUM: p.op = is_bool ? GOTREE_MAX : GOTREE_SUM; break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_TYPE(
          !is_bool, "gotree: ", coll,
          ": ReduceOp.AVG is not supported for torch.bool tensors");
      p.op = GOTREE_AVG;
      break;
    case c10d::ReduceOp::PRODUCT: p.op = is_bool ? GOTREE_MIN : GOTREE_PROD; break;
    case c10d::ReduceOp::MIN: p.op = GOTREE_MIN; break;
    case c10d::ReduceOp::MAX: p.op = GOTREE_MAX; break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK_TYPE(
          is_int || is_bool, "gotree: ", coll, ": ", opName(op),
          " is only supported for integer and bool tensors, not ",
          dtypeName(t));
      if (is_bool) {
        p.op = op == c10d::ReduceOp::BAND  ? GOTREE_MIN
            : op == c10d::ReduceOp::BOR    ? GOTREE_MAX
                                           : GOTREE_BXOR;
      } else {
        p.op = op == c10d::ReduceOp::BAND  ? GOTREE_BAND
            : op == c10d::ReduceOp::BOR    ? GOTREE_BOR
                                           : GOTREE_BXOR;
      }
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK_TYPE(
          is_float || is_complex, "gotree: ", coll,
          ": ReduceOp.PREMUL_SUM is only supported for floating-point "
          "tensors, not ", dtypeName(t));
      auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(
          rop.supplement_.get());
      TORCH_CHECK_VALUE(
          sup != nullptr, "gotree: ", coll,
          ": ReduceOp.PREMUL_SUM without its factor (create it with "
          "torch.distributed._make_nccl_premul_sum)");
      p.premul = true;
      if (sup->tensor_factor.defined()) {
        p.premul_tensor = sup->tensor_factor;
      } else {
        p.premul_double = sup->double_factor;
      }
      p.op = GOTREE_SUM;
      break;
    }
    default:
      TORCH_CHECK_VALUE(
          false, "gotree: ", coll, ": unsupported reduction op ",
          static_cast<int>(op));
  }
  return p;
}

// ---------------------------------------------------------------------------
// Tensor checks.

// The error for a CUDA tensor gotree cannot serve: why says what refused it
// (torch, or the library's GOTREE_ERR_NOT_SUPPORTED text).
[[noreturn]] void throwCudaUnsupported(const c10::Device& d, std::string why) {
  while (!why.empty() && (why.back() == '.' || why.back() == ' ')) {
    why.pop_back();
  }
  C10_THROW_ERROR(
      NotImplementedError,
      c10::str("gotree: cannot run this on a CUDA tensor (tensor on ", d.str(),
               "); ", why, ". Use CPU tensors, or backend=\"cpu:gotree,cuda:nccl\"."));
}

// Why torch cannot give the CUDA path a stream on device d; empty when it can.
// (No CUDA runtime or device; or a stand-in runtime such as the one
// FakeTensorMode installs on machines without a GPU.)
std::string noCudaStream(const c10::Device& d) {
#if !GOTREE_HAVE_STREAM_HANDLE
  (void)d;
  return c10::str(
      "gotree was built against torch ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR,
      ", which gives extensions no CUDA stream handle (c10::Stream::native_handle, torch >= 2.11)");
#else
  if (!c10::impl::hasDeviceGuardImpl(d.type())) {
    return "this torch has no CUDA runtime";
  }
  c10::impl::VirtualGuardImpl impl(d.type());
  if (d.index() >= impl.deviceCount()) {
    return c10::str("torch sees ", static_cast<int>(impl.deviceCount()), " CUDA device(s)");
  }
  try {
    (void)impl.getStream(d).native_handle();
  } catch (const c10::Error& e) {
    return c10::str("torch has no CUDA stream there: ", e.msg());
  }
  return std::string();
#endif
}

// The CUDA stream handle of s; only reached for tensors noCudaStream
// accepted.
void* streamHandle(const c10::Stream& s) {
#if GOTREE_HAVE_STREAM_HANDLE
  return s.native_handle();
#else
  TORCH_CHECK(
      false, "gotree: internal error: a CUDA stream handle was asked of torch ",
      TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, " (", s, ")");
  return nullptr;
#endif
}

// The tensor lives on the CPU or on a CUDA device this process can use.
void checkDevice(const at::Tensor& t, const char* coll, const std::string& what) {
  if (t.device().is_cuda()) {
    // Refused before any data is touched.
    std::string why = noCudaStream(t.device());
    if (!why.empty()) {
      throwCudaUnsupported(
          t.device(), c10::str(coll, " got ", what, " on ", t.device().str(), ", but ", why));
    }
  } else {
    TORCH_CHECK(
        t.device().is_cpu(), "gotree: ", coll, ": ", what, " is on device ",
        t.device().str(), "; only CPU and CUDA tensors are supported");
  }
}

void checkTensor(const at::Tensor& t, const char* coll, const std::string& what) {
  TORCH_CHECK_VALUE(t.defined(), "gotree: ", coll, ": ", what, " is undefined");
  checkDevice(t, coll, what);
  TORCH_CHECK(
      t.layout() == at::kStrided, "gotree: ", coll, ": ", what,
      " has layout ", t.layout(), "; only dense (strided) tensors are supported",
      std::string(coll) == "allreduce" ? " (and sparse COO tensors, for SUM)" : "");
  TORCH_CHECK(
      !t.is_quantized(), "gotree: ", coll, ": ", what,
      " is quantized; quantized tensors are not supported");
}

// A tensor the collective writes into must own each of its elements once.
void checkWritable(const at::Tensor& t, const char* coll, const std::string& what) {
  TORCH_CHECK_VALUE(
      at::has_internal_overlap(t) != at::MemOverlap::Yes, "gotree: ", coll,
      ": ", what, " has overlapping memory (e.g. made by expand()); the "
      "collective cannot write into it. Pass a tensor that owns its elements "
      "(.clone() or .contiguous()).");
}

const at::Tensor& single(
    const std::vector<at::Tensor>& ts, const char* coll, const char* what) {
  TORCH_CHECK_VALUE(
      ts.size() == 1, "gotree: ", coll, ": expected exactly one tensor in ",
      what, " (one tensor per rank per call, like NCCL), got ", ts.size());
  return ts[0];
}

std::string describe(const at::Tensor& t) {
  std::ostringstream s;
  s << t.numel() << " x " << dtypeName(t.scalar_type());
  return s.str();
}

const char* bytePtr(const at::Tensor& t) {
  return static_cast<const char*>(t.data_ptr());
}

// ---------------------------------------------------------------------------
// Work.

class GotreeBackend;

class GotreeWork : public c10d::Work {
 public:
  GotreeWork(
      int rank, c10d::OpType opType, std::string name, uint64_t seq,
      std::vector<at::Tensor> outputs, c10::Device device,
      Clock::time_point deadline, milliseconds timeout, bool explicitTimeout)
      : c10d::Work(rank, opType),
        name_(std::move(name)),
        seq_(seq),
        outputs_(std::move(outputs)),
        device_(device),
        deadline_(deadline),
        timeout_(timeout),
        explicitTimeout_(explicitTimeout),
        pid_(currentPid()),
        // A device work's future is CUDA-aware: completing it records an
        // event on the current stream, and its consumers (wait, value, then)
        // make their current stream wait for that event.
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()),
            device.is_cpu() ? std::vector<c10::Device>{}
                            : std::vector<c10::Device>{device})) {}

  ~GotreeWork() override {
    if (currentPid() != pid_ || g_api == nullptr) {
      return;  // forked child: never call into Go
    }
    for (auto r : reqs_) {
      if (r != 0) {
        g_api->request_free(r);
      }
    }
  }

  // A device work is complete once its end event passed on the GPU.
  bool isCompleted() override {
    return hostCompleted() && (!end_ || end_->query());
  }

  bool hostCompleted() {
    if (completedFlag_.load()) {
      return true;
    }
    if (currentPid() != pid_) {
      return false;
    }
    if (!children_.empty()) {
      // A coalesced work (startCoalescing/endCoalescing): done when every
      // child is, failed with the first child's failure.
      for (auto& c : children_) {
        if (!c->isCompleted()) {
          return false;
        }
      }
      finish(firstChildException());
      waitCompleted();
      return true;
    }
    // Poll the library so isCompleted() is true as soon as the data is
    // there, not only after the completion thread noticed.
    const Api& a = *g_api;
    gotree_status_t worst = GOTREE_SUCCESS;
    int64_t failed = 0;
    for (auto r : reqs_) {
      int done = 0;
      gotree_status_t st = a.request_test(r, &done);
      if (!done) {
        return false;
      }
      if (st != GOTREE_SUCCESS && worst == GOTREE_SUCCESS) {
        worst = st;
        failed = r;
      }
    }
    finishFromStatus(worst, failed);
    waitCompleted();
    return true;
  }

  bool isSuccess() const override {
    std::lock_guard<std::mutex> g(mutex_);
    return completed_ && !exception_;
  }

  std::vector<at::Tensor> result() override {
    return outputs_;
  }

  int sourceRank() const override {
    TORCH_CHECK(
        sourceRank_ >= 0,
        "gotree: sourceRank() is only defined for the work of a receive");
    return sourceRank_;
  }

  // Makes the caller's current stream wait for a device work (like
  // ProcessGroupNCCL without blocking wait); nothing to do for the CPU.
  void synchronize() override {
    if (end_) {
      end_->block(c10::impl::VirtualGuardImpl(device_.type()).getStream(device_));
    }
  }

  bool wait(milliseconds timeout) override {
    checkNotForked(pid_, "Work.wait() was called");
    if (!completedFlag_.load() && !children_.empty()) {
      std::exception_ptr first;
      for (auto& c : children_) {
        try {
          c->wait(timeout);
        } catch (...) {
          if (!c->completedFlag_.load()) {
            throw;  // the caller's timeout ran out; the work continues
          }
          if (!first) {
            first = std::current_exception();
          }
        }
      }
      finish(first);
    }
    if (!completedFlag_.load()) {
      const Api& a = *g_api;
      bool user = timeout != ::kNoTimeout;
      auto deadline = user ? Clock::now() + timeout : deadline_;
      // Past the operation's own deadline the completion thread's watchdog
      // aborts the communicator and fails the work with the timeout; the
      // requests then fail too ("connection closed"), and finishing from
      // that status here would race the watchdog's message.
      bool watchdogFinishes = false;
      // Without a time limit of its own (neither the caller's nor the
      // operation's), the work's first wait has none either: the
      // library then runs a request that has not started yet on this
      // thread instead of waking its worker and then this thread (on 2
      // CPUs a 4-byte async allreduce + wait took 300 us that way, the
      // synchronous call 23 us). The library's deadline still applies.
      bool unbounded = !user && !explicitTimeout_ && !device_.is_cuda();
      for (auto r : reqs_) {
        gotree_status_t st;
        for (;;) {
          auto left = std::chrono::duration_cast<milliseconds>(
                          deadline - Clock::now())
                          .count();
          st = a.request_wait(r, unbounded ? -1 : left > 0 ? left : 0);
          unbounded = false;
          if (st != GOTREE_ERR_TIMEOUT) {
            break;
          }
          int done = 0;
          st = a.request_test(r, &done);
          if (done) {
            break;
          }
          if (user) {
            C10_THROW_ERROR(
                DistBackendError,
                c10::str(
                    "gotree: Work.wait(timeout=", timeout.count(), " ms) ran out: ",
                    label(), " has not finished (the operation continues; "
                    "wait again or destroy the process group)"));
          }
          // Past the operation's own deadline: the completion thread's
          // watchdog fails the work; wait for it to do so.
          if (completedFlag_.load()) {
            break;
          }
          std::this_thread::sleep_for(milliseconds(10));
        }
        if (completedFlag_.load()) {
          break;
        }
        if (st != GOTREE_SUCCESS) {
          if (!user && Clock::now() >= deadline_) {
            watchdogFinishes = true;  // waitCompleted() below waits for it
          } else {
            finishFromStatus(st, r);
          }
          break;
        }
      }
      if (!completedFlag_.load() && !watchdogFinishes) {
        finishFromStatus(GOTREE_SUCCESS, 0);
      }
    }
    waitCompleted();
    {
      std::lock_guard<std::mutex> g(mutex_);
      if (exception_) {
        std::rethrow_exception(exception_);
      }
    }
    synchronize();
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

  std::string label() const {
    return c10::str("gotree ", name_, " #", seq_, detail_.empty() ? "" : " (",
                    detail_, detail_.empty() ? "" : ")");
  }

  // Completes the work once, from whichever thread saw it finish.
  // Returns false when another thread already did.
  bool finish(std::exception_ptr ex) {
    if (claimed_.exchange(true)) {
      return false;
    }
    if (!ex && post_) {
      try {
        post_();
      } catch (...) {
        ex = std::current_exception();
      }
    }
    post_ = nullptr;  // keepalive_ is released by the completion thread
    {
      std::lock_guard<std::mutex> g(mutex_);
      completed_ = true;
      exception_ = ex;
    }
    completedFlag_.store(true);
    cv_.notify_all();
    // Completing the future runs its callbacks here. One that raises past
    // torch's own handling (a then() whose child future is already set)
    // must not end the completion thread, and with it the process. While
    // Python exits they are not run (GilRegion).
    GilRegion region;
    if (!region) {
      return true;
    }
    tlsInCallback++;
    try {
      if (ex) {
        future_->setError(ex);
      } else {
        future_->markCompleted(c10::IValue(outputs_));
      }
    } catch (abi::__forced_unwind&) {
      // pthread_exit (Python ends threads that want the GIL while it
      // shuts down) unwinds with this: it must go on.
      tlsInCallback--;
      throw;
    } catch (const std::exception& e) {
      std::cerr << "gotree: WARN a callback of " << label()
                << "'s future raised: " << e.what() << std::endl;
    } catch (...) {
      std::cerr << "gotree: WARN a callback of " << label()
                << "'s future raised an exception" << std::endl;
    }
    tlsInCallback--;
    return true;
  }

  bool finishFromStatus(gotree_status_t st, int64_t failedReq) {
    if (st == GOTREE_SUCCESS) {
      return finish(nullptr);
    }
    const Api& a = *g_api;
    std::string msg = c10::str(
        label(), " failed: ",
        st == GOTREE_ERR_TIMEOUT
            ? c10::str("Timed out (the group timeout is ", timeout_.count(), " ms): ")
            : std::string(),
        describeFailure(a, st, {failedReq, comm_, 0}));
    return finish(makeDistError(msg));
  }

  void waitCompleted() {
    std::unique_lock<std::mutex> g(mutex_);
    cv_.wait(g, [&] { return completed_; });
  }

  std::exception_ptr firstChildException() {
    for (auto& c : children_) {
      c->waitCompleted();
      auto ex = c->exception();
      if (ex) {
        return ex;
      }
    }
    return nullptr;
  }

  std::vector<c10::intrusive_ptr<GotreeWork>> children_;  // coalesced works

  const std::string name_;
  uint64_t seq_;
  std::string detail_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keepalive_;  // inputs and staging buffers
  const c10::Device device_;           // of every tensor: the CPU or one CUDA device
  std::optional<c10::Event> end_;      // device work: recorded on the internal stream after it
  std::function<void()> post_;         // copy-out after success
  std::vector<gotree_request_t> reqs_;
  gotree_comm_t comm_ = 0;
  int sourceRank_ = -1;
  bool sync_ = false;  // the caller waits at once: retired on its thread
  const Clock::time_point deadline_;
  const milliseconds timeout_;
  const bool explicitTimeout_;
  const pid_t pid_;
  std::atomic<bool> claimed_{false};
  std::atomic<bool> completedFlag_{false};
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// ---------------------------------------------------------------------------
// Backend.

class GotreeBackend : public c10d::Backend {
 public:
  GotreeBackend(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      milliseconds timeout)
      : c10d::Backend(rank, size), timeout_(timeout), pid_(currentPid()) {
    init();
    const Api& a = api();
    checkNotForked(a.pid, "a gotree process group was created");
    useSharedAllocatorFromEnv();
    TORCH_CHECK_VALUE(
        size >= 1 && rank >= 0 && rank < size, "gotree: invalid rank ", rank,
        " for group size ", size);
    if (timeout_.count() <= 0) {
      timeout_ = kBackendDefaultTimeout;
    }

    // Bootstrap like NCCL: rank 0 makes the unique id and publishes it in
    // the (per-group prefixed) store. A generation number from an atomic
    // counter keeps a re-created group (same prefix, same store) from
    // reading the previous group's id: all ranks of one generation add
    // before any of them can finish init, so generations never interleave.
    int64_t ticket = store->add("gotree/join", 1);
    int64_t gen = (ticket - 1) / size;
    std::string key = c10::str("gotree/uid/", gen);
    gotree_unique_id_t id;
    std::memset(&id, 0, sizeof(id));
    if (rank == 0) {
      gotree_status_t st = a.get_unique_id(&id);
      if (st != GOTREE_SUCCESS) {
        throwStatus(
            st, c10::str("gotree: rank 0 could not create the unique id: ",
                         describeFailure(a, st, {0})));
      }
      std::vector<uint8_t> bytes(
          reinterpret_cast<uint8_t*>(&id),
          reinterpret_cast<uint8_t*>(&id) + sizeof(id));
      store->set(key, bytes);
    } else {
      std::string why;
      try {
        store->wait({key}, timeout_);
      } catch (const c10::Error& e) {
        why = e.what_without_backtrace();  // the store's message, not a C++ backtrace
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (!why.empty()) {
        C10_THROW_ERROR(
            DistBackendError,
            c10::str("gotree: rank ", rank, " of ", size,
                     " timed out after ", timeout_.count(),
                     " ms waiting for rank 0 to publish the unique id (store key '",
                     key, "'); is rank 0 running and using backend gotree? (",
                     why, ")"));
      }
      std::vector<uint8_t> bytes = store->get(key);
      TORCH_CHECK(
          bytes.size() == sizeof(id), "gotree: the unique id in the store (key '",
          key, "') has ", bytes.size(), " bytes, expected ", sizeof(id));
      std::memcpy(&id, bytes.data(), sizeof(id));
    }

    gotree_options_t opts;
    std::memset(&opts, 0, sizeof(opts));
    opts.struct_size = sizeof(opts);
    opts.timeout_ms = timeout_.count();
    opts.host_id = nullptr;
    gotree_comm_t comm = 0;
    gotree_status_t st = a.comm_init_rank(&comm, &id, rank, size, &opts);
    if (st != GOTREE_SUCCESS) {
      throwStatus(
          st, c10::str("gotree: rank ", rank, " of ", size,
                       " could not join the communicator: ",
                       describeFailure(a, st, {comm, 0})));
    }
    comm_ = comm;
    completer_ = std::thread([this] { completionLoop(); });
  }

  ~GotreeBackend() override {
    try {
      stop(/*abort=*/false);
    } catch (...) {
    }
  }

  const std::string getBackendName() const override {
    return "gotree";
  }

  bool supportsSplitting() const override {
    return GOTREE_HAVE_SPLIT != 0;
  }

#if GOTREE_HAVE_SPLIT
  // A new communicator of the ranks listed (ranks of this group, in the
  // new group's rank order), bootstrapped through the store torch hands
  // over (already prefixed with the new group's name). Ranks not listed get
  // nullptr and take no part. Up to torch 2.11, ProcessGroup::splitGroup
  // calls this once per device type the backend serves (cpu and cuda: the
  // same object); later releases call it once per backend. A second call
  // of the same splitGroup (the same store object and group name) returns
  // the first call's backend instead of bootstrapping a twin; a later
  // splitGroup of the same ranks has the same name but a new store, and
  // gets a new communicator.
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
      const c10::intrusive_ptr<c10d::Backend::Options>& opts) override {
    checkUsable("split");
    const int n = getSize();
    std::vector<bool> seen(n, false);
    int newRank = -1;
    for (size_t i = 0; i < ranks.size(); i++) {
      int r = ranks[i];
      TORCH_CHECK_VALUE(
          r >= 0 && r < n, "gotree: split: rank ", r, " (entry ", i,
          " of the split ranks) is outside this group of ", n, " ranks");
      TORCH_CHECK_VALUE(
          !seen[r], "gotree: split: rank ", r, " is listed twice in the split ranks");
      seen[r] = true;
      if (r == getRank()) {
        newRank = static_cast<int>(i);
      }
    }
    if (newRank < 0) {
      return nullptr;
    }
    std::string name = opts ? opts->group_name : std::string();
    for (int r : ranks) {
      name += c10::str(",", r);
    }
    std::lock_guard<std::mutex> g(splitMu_);
    if (name == lastSplitName_ && store && lastSplitStore_.lock().get() == store.get()) {
      // The twin call of the same splitGroup: hand out the same backend,
      // once.
      lastSplitName_.clear();
      lastSplitStore_ = c10::weak_intrusive_ptr<c10d::Store>(c10::intrusive_ptr<c10d::Store>());
      auto prev = lastSplit_.lock();
      lastSplit_ = c10::weak_intrusive_ptr<c10d::Backend>(c10::intrusive_ptr<c10d::Backend>());
      if (prev) {
        return prev;
      }
    }
    milliseconds to = (opts && opts->timeout.count() > 0) ? opts->timeout : timeout_;
    auto make = [&] {
      return c10::make_intrusive<GotreeBackend>(
          store, newRank, static_cast<int>(ranks.size()), to);
    };
    c10::intrusive_ptr<GotreeBackend> child;
    if (Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release nogil;  // the bootstrap blocks on other ranks
      child = make();
    } else {
      child = make();
    }
    lastSplitName_ = name;
    lastSplitStore_ = c10::weak_intrusive_ptr<c10d::Store>(store);
    lastSplit_ = c10::weak_intrusive_ptr<c10d::Backend>(c10::intrusive_ptr<c10d::Backend>(child));
    return child;
  }
#endif

  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() {  // virtual in newer torch only: no `override` (torch 2.4 builds)
    return c10::make_intrusive<c10d::Backend::Options>("gotree", timeout_);
  }

  void setTimeout(milliseconds timeout) {  // virtual in newer torch only: no `override`
    timeout_ = timeout.count() > 0 ? timeout : kBackendDefaultTimeout;
  }

  void setSequenceNumberForGroup() override {
    seq_ = 0;
  }

  uint64_t getSequenceNumberForGroup() override {
    return seq_;
  }

  // The communicator's flight record as JSON (gotree_comm_flight_record):
  // its last operations, what each was, when it was issued, started and
  // ended, and how. Raises once the communicator is gone (destroyed, or
  // aborted after a failure: then GOTREE_TRACE_DUMP_FILE has the record).
  std::string flightRecord() {
    const Api& a = api();
    return readJson("flight_record", "; with GOTREE_TRACE_DUMP_FILE set, each rank wrote its record when it failed",
                    [&](char* buf, size_t n, size_t* len) { return a.comm_flight_record(comm_, buf, n, len); });
  }

  // What the communicator runs and why as JSON (gotree_comm_describe): its
  // rings, trees and links, and per collective and size (bytes; empty: the
  // library's default sizes) the algorithm that runs and what decided it.
  std::string describeComm(const std::vector<int64_t>& sizes) {
    const Api& a = api();
    return readJson("describe", "", [&](char* buf, size_t n, size_t* len) {
      return a.comm_describe(comm_, sizes.empty() ? nullptr : sizes.data(), sizes.size(), buf, n, len);
    });
  }

  // readJson reads a JSON text that get copies out (truncated to the
  // buffer, its full length in *len), growing the buffer while it grew;
  // what names the call in errors, gone adds to the error of a destroyed
  // or aborted communicator.
  std::string readJson(const char* what, const char* gone, const std::function<gotree_status_t(char*, size_t, size_t*)>& get) {
    TORCH_CHECK(
        currentPid() == pid_, "gotree: ", what, ": this group was created "
        "in another process (before a fork); its communicator is not usable here");
    TORCH_CHECK(
        comm_ != 0 && !stopped_.load() && !aborted_.load(), "gotree: ", what, ": "
        "the communicator of this group was destroyed or aborted", gone);
    const Api& a = api();
    std::string out(4096, '\0');
    for (int i = 0; i < 8; i++) {
      size_t len = 0;
      gotree_status_t st = get(out.data(), out.size(), &len);
      if (st != GOTREE_SUCCESS) {
        throwStatus(st, c10::str("gotree: ", what, ": ", describeFailure(a, st, {comm_, 0})));
      }
      if (len < out.size()) {
        out.resize(len);
        return out;
      }
      out.assign(len + 4096, '\0');  // it grew: room for a few more operations
    }
    C10_THROW_ERROR(DistBackendError, c10::str("gotree: ", what, ": the text kept growing while it was read"));
  }

#if GOTREE_HAVE_GET_ERROR
  // Whether the group still works (torch's Backend.get_error()): SUCCESS,
  // or the kind of the failure that broke it: TIMEOUT (an operation ran
  // past its timeout), REMOTE_ERROR (a peer failed, left or aborted), or
  // COMM_ERROR (the ranks issued different collectives, or the system
  // refused). A failure the library saw before any work of this group
  // retired it counts too. An abort() or shutdown() by the caller is no
  // failure.
  c10d::ErrorType getError() override {
    int kind = failureKind_.load();
    if (kind == kNoFailure && !stopped_.load() && comm_ != 0 && currentPid() == pid_) {
      gotree_status_t as = GOTREE_SUCCESS;
      if (api().comm_get_async_error(comm_, &as) == GOTREE_SUCCESS) {
        kind = failureKindOf(as);
      }
    }
    switch (kind) {
      case kTimeoutFailure:
        return c10d::ErrorType::TIMEOUT;
      case kRemoteFailure:
        return c10d::ErrorType::REMOTE_ERROR;
      case kCommFailure:
        return c10d::ErrorType::COMM_ERROR;
    }
    return c10d::ErrorType::SUCCESS;
  }
#endif

  void abort() {  // virtual in newer torch only: no `override`
    stop(/*abort=*/true);
  }

  void shutdown() {  // virtual in newer torch only: no `override`
    stop(/*abort=*/false);
  }

  // -- collectives -------------------------------------------------------

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override {
    const char* coll = "allreduce";
    checkUsable(coll);
    const at::Tensor& t = single(tensors, coll, "tensors");
    if (t.defined() && t.layout() == at::kSparse) {
      return allreduceSparse(t, opts);
    }
    checkTensor(t, coll, "the tensor");
    checkWritable(t, coll, "the tensor");
    TORCH_CHECK_VALUE(
        !opts.sparseIndices.has_value(), "gotree: allreduce with sparse indices "
        "for a dense tensor (NCCL's allreduce_sparse) is not supported; pass a "
        "sparse COO tensor instead");
    ReducePlan p = planReduce(t.scalar_type(), opts.reduceOp, coll);
    auto work = makeWork(c10d::OpType::ALLREDUCE, coll, {t}, {}, opts);
    work->detail_ = c10::str(describe(t), ", ", opName(opts.reduceOp.op_));
    issueLocked(work, [&](auto& calls) {
      addAllreduce(work, t, p, calls);
    });
    return work;
  }

  // torch sends a sparse CUDA tensor's all_reduce here (a sparse CPU
  // tensor's to allreduce): the same path, through host memory.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override {
    return allreduce(tensors, opts);
  }

  // allreduce of a sparse COO tensor, SUM only (as gloo offers it): the
  // sum of sparse tensors is sparse, with a number of elements no rank
  // knows in advance, so the ranks exchange what they hold and each builds
  // the sum itself. Two exchanges: a fixed-size header per rank (dtype,
  // dims, sizes, nnz; checked to agree), then every rank's coalesced indices
  // and values as bytes (all-gather, sized by the headers). Each rank
  // concatenates the pieces in rank order and coalesces, which adds the
  // duplicates in the same order everywhere: every rank gets the same bits.
  // The tensor is then replaced by the sum (its nnz changes), as with gloo.
  //
  // The call completes on the calling thread before it returns (the second
  // exchange depends on the first), holding issueMu_ throughout so that no
  // other thread's collective slips in between the two on some rank.
  // A CUDA tensor goes through host memory.
  static constexpr int64_t kSparseMaxDims = 32;
  static constexpr int64_t kSparseHeader = 5 + kSparseMaxDims;

  c10::intrusive_ptr<c10d::Work> allreduceSparse(
      const at::Tensor& t, const c10d::AllreduceOptions& opts) {
    const char* coll = "allreduce";
    checkDevice(t, coll, "the sparse tensor");
    TORCH_CHECK_VALUE(
        opts.reduceOp.op_ == c10d::ReduceOp::SUM, "gotree: allreduce of a "
        "sparse tensor supports ReduceOp.SUM only (as gloo), got ",
        opName(opts.reduceOp.op_));
    TORCH_CHECK_VALUE(
        !opts.sparseIndices.has_value(), "gotree: allreduce: sparse indices "
        "were passed with a sparse tensor; pass the sparse COO tensor alone");
    TORCH_CHECK_VALUE(
        t.dim() <= kSparseMaxDims, "gotree: allreduce: the sparse tensor has ",
        t.dim(), " dimensions; at most ", kSparseMaxDims, " are supported");
    std::lock_guard<std::recursive_mutex> g(issueMu_);
    TORCH_CHECK_VALUE(
        !coalescing_, "gotree: allreduce of a sparse tensor cannot be part of "
        "a coalesced batch (it completes before it returns); issue it outside "
        "the coalescing manager");
    at::AutoDispatchBelowAutograd belowAutograd;  // the sum is data, not a graph
    const int n = getSize();
    at::Tensor local = t.to(at::kCPU).coalesce();
    const int64_t sparseDim = local.sparse_dim();
    const int64_t denseDim = local.dense_dim();
    const int64_t nnz = local._nnz();  // local may be t itself, which the sum replaces

    at::Tensor header = at::zeros({kSparseHeader}, at::kLong);
    int64_t* h = header.data_ptr<int64_t>();
    h[0] = static_cast<int64_t>(local.scalar_type());
    h[1] = sparseDim;
    h[2] = denseDim;
    h[3] = nnz;
    h[4] = local.dim();
    for (int64_t d = 0; d < local.dim(); d++) {
      h[5 + d] = local.size(d);
    }
    at::Tensor headers = at::empty({n * kSparseHeader}, at::kLong);
    c10d::AllgatherOptions ag;
    ag.timeout = opts.timeout;
    setSyncOp(ag, 0);
    sparsePart(_allgather_base(headers, header, ag), "exchanging the tensors' shapes");

    const int64_t* all = headers.data_ptr<int64_t>();
    auto shapeOf = [&](int r) {
      const int64_t* hr = all + r * kSparseHeader;
      const int64_t dims = std::min(std::max<int64_t>(hr[4], 0), kSparseMaxDims);
      std::vector<int64_t> sizes(hr + 5, hr + 5 + dims);
      auto dt = static_cast<at::ScalarType>(hr[0]);
      return c10::str(
          "sizes ", c10::IntArrayRef(sizes), ", sparse_dim ", hr[1], ", ",
          hr[0] >= 0 && hr[0] < static_cast<int64_t>(at::ScalarType::NumOptions)
              ? dtypeName(dt) : c10::str("dtype #", hr[0]));
    };
    const int me = getRank();
    for (int r = 0; r < n; r++) {
      const int64_t* hr = all + r * kSparseHeader;
      // Every field but nnz must agree (every rank checks the same table,
      // so every rank raises the same error).
      bool same = std::equal(hr, hr + 3, all) &&
          std::equal(hr + 4, hr + kSparseHeader, all + 4);
      if (!same) {
        C10_THROW_ERROR(
            DistBackendError,
            c10::str("gotree: allreduce of a sparse tensor: rank ", r,
                     " passed ", shapeOf(r), ", rank 0 ", shapeOf(0),
                     " (this is rank ", me, "); every rank must pass the same "
                     "shape, sparse_dim and dtype"));
      }
    }

    // Rank r's bytes: its indices (sparse_dim x nnz int64), then its values
    // (nnz x the dense sizes).
    at::Tensor indices = local._indices().contiguous();
    at::Tensor values = local._values().contiguous();
    const int64_t denseNumel = c10::multiply_integers(local.sizes().slice(sparseDim));
    const int64_t rowBytes = sparseDim * 8 + denseNumel * values.element_size();
    at::Tensor send = at::empty({nnz * rowBytes}, at::kByte);
    const int64_t idxBytes = indices.numel() * 8;
    if (idxBytes) {
      std::memcpy(send.data_ptr(), indices.data_ptr(), idxBytes);
    }
    if (values.nbytes()) {
      std::memcpy(static_cast<char*>(send.data_ptr()) + idxBytes,
                  values.data_ptr(), values.nbytes());
    }
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < n; r++) {
      outs[0].push_back(at::empty({all[r * kSparseHeader + 3] * rowBytes}, at::kByte));
    }
    std::vector<at::Tensor> ins{send};
    sparsePart(allgather(outs, ins, ag), "gathering the indices and values");

    std::vector<at::Tensor> idxs, vals;
    std::vector<int64_t> valShape(local.sizes().begin() + sparseDim, local.sizes().end());
    valShape.insert(valShape.begin(), 0);
    for (int r = 0; r < n; r++) {
      const int64_t nz = all[r * kSparseHeader + 3];
      const char* src = static_cast<const char*>(outs[0][r].data_ptr());
      at::Tensor ir = at::empty({sparseDim, nz}, at::kLong);
      valShape[0] = nz;
      at::Tensor vr = at::empty(valShape, values.options());
      if (ir.nbytes()) {
        std::memcpy(ir.data_ptr(), src, ir.nbytes());
      }
      if (vr.nbytes()) {
        std::memcpy(vr.data_ptr(), src + ir.nbytes(), vr.nbytes());
      }
      idxs.push_back(ir);
      vals.push_back(vr);
    }
    at::Tensor sum = at::sparse_coo_tensor(
                         at::cat(idxs, 1), at::cat(vals, 0), local.sizes(),
                         local.options())
                         .coalesce();
    t.copy_(sum.to(t.device()));

    auto work = makeWork(c10d::OpType::ALLREDUCE, coll, {t}, {}, opts);
    work->seq_ = seq_;
    work->detail_ = c10::str("sparse ", t.sizes(), " x ", dtypeName(t.scalar_type()),
                             ", nnz ", nnz, " -> ", sum._nnz(), ", SUM");
    work->finish(nullptr);
    return work;
  }

  // Waits for one exchange of a sparse allreduce, naming it on failure.
  static void sparsePart(const c10::intrusive_ptr<c10d::Work>& w, const char* what) {
    try {
      w->wait();
    } catch (const c10::Error& e) {
      C10_THROW_ERROR(
          DistBackendError,
          c10::str("gotree: allreduce of a sparse tensor failed while ", what,
                   ": ", e.what_without_backtrace()));
    }
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override {
    const char* coll = "allreduce_coalesced";
    checkUsable(coll);
    std::vector<ReducePlan> plans;
    for (size_t i = 0; i < tensors.size(); i++) {
      std::string what = c10::str("tensors[", i, "]");
      checkTensor(tensors[i], coll, what);
      checkWritable(tensors[i], coll, what);
      plans.push_back(planReduce(tensors[i].scalar_type(), opts.reduceOp, coll));
    }
    auto work = makeWork(
        c10d::OpType::ALLREDUCE_COALESCED, coll, tensors, {}, opts);
    work->detail_ = c10::str(tensors.size(), " tensors, ", opName(opts.reduceOp.op_));
    issueLocked(work, [&](auto& calls) {
      for (size_t i = 0; i < tensors.size(); i++) {
        addAllreduce(work, tensors[i], plans[i], calls);
      }
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override {
    const char* coll = "broadcast";
    checkUsable(coll);
    const at::Tensor& t = single(tensors, coll, "tensors");
    checkTensor(t, coll, "the tensor");
    checkRoot(opts.rootRank, coll);
    TORCH_CHECK_VALUE(
        opts.rootTensor == 0, "gotree: broadcast: root tensor index ",
        opts.rootTensor, " is invalid (one tensor per rank, index 0)");
    if (getRank() != opts.rootRank) {
      checkWritable(t, coll, "the tensor");
    }
    auto work = makeWork(c10d::OpType::BROADCAST, coll, {t}, {}, opts);
    work->detail_ = c10::str(describe(t), ", root ", opts.rootRank);
    int root = static_cast<int>(opts.rootRank);
    issueLocked(work, [&](auto& calls) {
      at::Tensor buf = t;
      if (!t.is_contiguous()) {
        buf = t.contiguous();
        if (getRank() != root) {
          work->post_ = chainPost(work->post_, [t, buf]() mutable { t.copy_(buf); });
        }
      }
      work->keepalive_.push_back(buf);
      Wire w = moveWire(buf);
      void* ptr = buf.numel() ? buf.data_ptr() : nullptr;
      gotree_comm_t comm = comm_;
      const Api* a = &api();
      calls.push_back([=](int device, void* stream, gotree_request_t* r) {
        return a->broadcast(comm, ptr, ptr, w.count, w.dtype, GOTREE_SUM, root,
                            device, stream, r);
      });
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts) override {
    const char* coll = "allgather";
    checkUsable(coll);
    const at::Tensor& in = single(inputTensors, coll, "input_tensors");
    checkTensor(in, coll, "the input tensor");
    TORCH_CHECK_VALUE(
        outputTensors.size() == 1, "gotree: allgather: expected exactly one "
        "output list (one tensor per rank per call), got ", outputTensors.size());
    std::vector<at::Tensor>& outs = outputTensors[0];
    TORCH_CHECK_VALUE(
        static_cast<int>(outs.size()) == getSize(), "gotree: allgather: the "
        "output list has ", outs.size(), " tensors, expected ", getSize(),
        " (the group size)");
    bool uneven = false;
    for (size_t i = 0; i < outs.size(); i++) {
      std::string what = c10::str("output_tensors[0][", i, "]");
      checkTensor(outs[i], coll, what);
      checkWritable(outs[i], coll, what);
      TORCH_CHECK_TYPE(
          outs[i].scalar_type() == in.scalar_type(), "gotree: allgather: ",
          what, " has dtype ", dtypeName(outs[i].scalar_type()),
          ", expected ", dtypeName(in.scalar_type()), " (the input's)");
      uneven = uneven || outs[i].numel() != in.numel();
    }
    if (uneven) {
      return allgatherUneven(outs, in, opts);
    }
    auto work = makeWork(c10d::OpType::ALLGATHER, coll, outs, {in}, opts);
    work->detail_ = describe(in);
    issueLocked(work, [&](auto& calls) {
      const int64_t nbytes = in.numel() * in.element_size();
      // Directly into the outputs when they are consecutive pieces of one
      // buffer (e.g. list(flat.chunk(world))), else through a staging buffer.
      bool flat = true;
      for (size_t i = 0; i < outs.size() && flat; i++) {
        flat = outs[i].is_contiguous() &&
            (nbytes == 0 ||
             bytePtr(outs[i]) == bytePtr(outs[0]) + i * nbytes);
      }
      at::Tensor recv;
      char* recvPtr = nullptr;
      if (flat) {
        recvPtr = nbytes ? const_cast<char*>(bytePtr(outs[0])) : nullptr;
        work->keepalive_.insert(work->keepalive_.end(), outs.begin(), outs.end());
      } else {
        recv = at::empty({getSize() * in.numel()}, in.options());
        recvPtr = nbytes ? static_cast<char*>(recv.data_ptr()) : nullptr;
        work->keepalive_.push_back(recv);
        auto outsCopy = outs;
        int64_t n = in.numel();
        work->post_ = [outsCopy, recv, n]() mutable {
          for (size_t i = 0; i < outsCopy.size(); i++) {
            outsCopy[i].copy_(recv.narrow(0, i * n, n).view(outsCopy[i].sizes()));
          }
        };
      }
      addAllgather(work, in, recvPtr, nbytes, calls);
    });
    return work;
  }

  // all_gather whose outputs differ in size (rank i's input fills output i,
  // whatever its size; NCCL does this with one broadcast per rank, gloo
  // refuses it): every rank sends its input to every rank, through the
  // point-to-point links of all-to-all. A peer whose input is not the size
  // this rank's output list says fails the call on both sides.
  c10::intrusive_ptr<c10d::Work> allgatherUneven(
      std::vector<at::Tensor>& outs, const at::Tensor& in,
      const c10d::AllgatherOptions& opts) {
    const char* coll = "allgather";
    const int n = getSize();
    const int me = getRank();
    TORCH_CHECK_VALUE(
        outs[me].numel() == in.numel(), "gotree: allgather: output_tensors[0][",
        me, "] (this rank's own slot) has ", outs[me].numel(), " elements (sizes ",
        outs[me].sizes(), "), expected ", in.numel(), " (the input's, sizes ",
        in.sizes(), "); outputs of other ranks may differ in size");
    auto work = makeWork(c10d::OpType::ALLGATHER, coll, outs, {in}, opts);
    work->detail_ = c10::str(describe(in), ", uneven outputs");
    issueLocked(work, [&](auto& calls) {
      // The same send block (the whole input) for every rank.
      at::Tensor send = in.reshape({-1}).contiguous();
      std::vector<int64_t> counts(n, in.numel()), displs(n, 0);
      addAlltoallvInto(work, send, counts, displs, outs, calls);
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override {
    const char* coll = "all_gather_into_tensor";
    checkUsable(coll);
    checkWholeAndPart(output, input, /*outIsWhole=*/true, coll, "");
    auto work = makeWork(c10d::OpType::_ALLGATHER_BASE, coll, {output}, {input}, opts);
    work->detail_ = describe(input);
    issueLocked(work, [&](auto& calls) { addAllgatherBase(work, output, input, calls); });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    const char* coll = "allgather_into_tensor_coalesced";
    checkUsable(coll);
    TORCH_CHECK_VALUE(
        outputs.size() == inputs.size(), "gotree: ", coll, ": ",
        outputs.size(), " outputs for ", inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); i++) {
      checkWholeAndPart(outputs[i], inputs[i], /*outIsWhole=*/true, coll, c10::str("[", i, "]"));
    }
    auto work = makeWork(c10d::OpType::COALESCED, coll, outputs, inputs, opts);
    work->detail_ = c10::str(inputs.size(), " tensors");
    issueLocked(work, [&](auto& calls) {
      for (size_t i = 0; i < inputs.size(); i++) {
        addAllgatherBase(work, outputs[i], inputs[i], calls);
      }
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override {
    const char* coll = "barrier";
    checkUsable(coll);
    auto work = makeWork(c10d::OpType::BARRIER, coll, {}, {}, opts);
    issueLocked(work, [&](auto& calls) {
      gotree_comm_t comm = comm_;
      const Api* a = &api();
      calls.push_back([=](int, void*, gotree_request_t* r) { return a->barrier(comm, r); });
    });
    return work;
  }

  // -- reductions to one root / scattered ---------------------------------

  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override {
    const char* coll = "reduce";
    checkUsable(coll);
    const at::Tensor& t = single(tensors, coll, "tensors");
    checkTensor(t, coll, "the tensor");
    checkRoot(opts.rootRank, coll);
    TORCH_CHECK_VALUE(
        opts.rootTensor == 0, "gotree: reduce: root tensor index ",
        opts.rootTensor, " is invalid (one tensor per rank, index 0)");
    const int root = static_cast<int>(opts.rootRank);
    const bool isRoot = getRank() == root;
    if (isRoot) {
      checkWritable(t, coll, "the tensor");
    }
    ReducePlan p = planReduce(t.scalar_type(), opts.reduceOp, coll);
    auto work = makeWork(c10d::OpType::REDUCE, coll, {t}, {}, opts);
    work->detail_ = c10::str(describe(t), ", ", opName(opts.reduceOp.op_), ", root ", root);
    issueLocked(work, [&](auto& calls) {
      at::Tensor send = reduceInput(work, t, p);
      void* recvPtr = nullptr;
      if (isRoot) {
        at::Tensor recv = recvTarget(work, t, send);
        recvPtr = t.numel() ? recv.data_ptr() : nullptr;
      }
      uint64_t count = static_cast<uint64_t>(t.numel()) * p.factor_count_mult;
      const void* sp = count ? send.data_ptr() : nullptr;
      void* rp = count ? recvPtr : nullptr;
      gotree_comm_t comm = comm_;
      const Api* a = &api();
      gotree_dtype_t dt = p.dtype;
      gotree_op_t op = p.op;
      calls.push_back([=](int device, void* stream, gotree_request_t* r) {
        return a->reduce(comm, sp, rp, count, dt, op, root, device, stream, r);
      });
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ReduceScatterOptions& opts) override {
    const char* coll = "reduce_scatter";
    checkUsable(coll);
    const at::Tensor& out = single(outputTensors, coll, "output_tensors");
    checkTensor(out, coll, "the output tensor");
    checkWritable(out, coll, "the output tensor");
    TORCH_CHECK_VALUE(
        inputTensors.size() == 1, "gotree: reduce_scatter: expected exactly one "
        "input list (one tensor per rank per call), got ", inputTensors.size());
    auto& ins = inputTensors[0];
    TORCH_CHECK_VALUE(
        static_cast<int>(ins.size()) == getSize(), "gotree: reduce_scatter: the "
        "input list has ", ins.size(), " tensors, expected ", getSize(),
        " (the group size)");
    bool uneven = false;
    for (size_t i = 0; i < ins.size(); i++) {
      std::string what = c10::str("input_list[", i, "]");
      checkTensor(ins[i], coll, what);
      TORCH_CHECK_TYPE(
          ins[i].scalar_type() == out.scalar_type(), "gotree: reduce_scatter: ",
          what, " has dtype ", dtypeName(ins[i].scalar_type()), ", expected ",
          dtypeName(out.scalar_type()), " (the output's)");
      uneven = uneven || ins[i].numel() != out.numel();
    }
    const int me = getRank();
    TORCH_CHECK_VALUE(
        ins[me].numel() == out.numel(), "gotree: reduce_scatter: input_list[", me,
        "] (this rank's block) has ", ins[me].numel(), " elements (sizes ",
        ins[me].sizes(), "), expected ", out.numel(), " (the output's, sizes ",
        out.sizes(), "); the blocks of other ranks may differ in size");
    ReducePlan p = planReduce(out.scalar_type(), opts.reduceOp, coll);
    if (uneven) {
      return reduceScatterUneven(out, ins, p, opts);
    }
    auto work = makeWork(c10d::OpType::REDUCE_SCATTER, coll, {out}, ins, opts);
    work->detail_ = c10::str(describe(out), ", ", opName(opts.reduceOp.op_));
    issueLocked(work, [&](auto& calls) {
      std::vector<at::Tensor> flat;
      for (auto& x : ins) {
        flat.push_back(x.reshape({-1}));
      }
      at::Tensor cat = at::cat(flat);  // a new contiguous buffer
      applyPremul(cat, p);
      work->keepalive_.push_back(cat);
      addReduceScatter(work, out, cat, p, calls);
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override {
    const char* coll = "reduce_scatter_tensor";
    checkUsable(coll);
    checkWholeAndPart(output, input, /*outIsWhole=*/false, coll, "");
    ReducePlan p = planReduce(input.scalar_type(), opts.reduceOp, coll);
    auto work = makeWork(c10d::OpType::_REDUCE_SCATTER_BASE, coll, {output}, {input}, opts);
    work->detail_ = c10::str(describe(output), ", ", opName(opts.reduceOp.op_));
    issueLocked(work, [&](auto& calls) {
      at::Tensor send = reduceInput(work, input, p);
      addReduceScatter(work, output, send, p, calls);
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    const char* coll = "reduce_scatter_tensor_coalesced";
    checkUsable(coll);
    TORCH_CHECK_VALUE(
        outputs.size() == inputs.size(), "gotree: ", coll, ": ",
        outputs.size(), " outputs for ", inputs.size(), " inputs");
    std::vector<ReducePlan> plans;
    for (size_t i = 0; i < inputs.size(); i++) {
      checkWholeAndPart(outputs[i], inputs[i], /*outIsWhole=*/false, coll, c10::str("[", i, "]"));
      plans.push_back(planReduce(inputs[i].scalar_type(), opts.reduceOp, coll));
    }
    auto work = makeWork(c10d::OpType::COALESCED, coll, outputs, inputs, opts);
    work->detail_ = c10::str(inputs.size(), " tensors, ", opName(opts.reduceOp.op_));
    issueLocked(work, [&](auto& calls) {
      for (size_t i = 0; i < inputs.size(); i++) {
        at::Tensor send = reduceInput(work, inputs[i], plans[i]);
        addReduceScatter(work, outputs[i], send, plans[i], calls);
      }
    });
    return work;
  }

  // -- gather / scatter / all-to-all ----------------------------------------

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    // outputLists[r][i] receives rank r's inputs[i].
    const char* coll = "allgather_coalesced";
    checkUsable(coll);
    TORCH_CHECK_VALUE(
        static_cast<int>(outputLists.size()) == getSize(), "gotree: ", coll,
        ": expected ", getSize(), " output lists (one per rank), got ",
        outputLists.size());
    for (size_t i = 0; i < inputs.size(); i++) {
      checkTensor(inputs[i], coll, c10::str("input_tensor_list[", i, "]"));
    }
    std::vector<at::Tensor> flatOuts;
    for (size_t r = 0; r < outputLists.size(); r++) {
      TORCH_CHECK_VALUE(
          outputLists[r].size() == inputs.size(), "gotree: ", coll,
          ": output_tensor_lists[", r, "] has ", outputLists[r].size(),
          " tensors, expected ", inputs.size(), " (one per input tensor)");
      for (size_t i = 0; i < inputs.size(); i++) {
        const at::Tensor& o = outputLists[r][i];
        std::string what = c10::str("output_tensor_lists[", r, "][", i, "]");
        checkTensor(o, coll, what);
        checkWritable(o, coll, what);
        TORCH_CHECK_TYPE(
            o.scalar_type() == inputs[i].scalar_type(), "gotree: ", coll, ": ",
            what, " has dtype ", dtypeName(o.scalar_type()), ", expected ",
            dtypeName(inputs[i].scalar_type()));
        TORCH_CHECK_VALUE(
            o.numel() == inputs[i].numel(), "gotree: ", coll, ": ", what,
            " has ", o.numel(), " elements, expected ", inputs[i].numel());
        flatOuts.push_back(o);
      }
    }
    auto work = makeWork(c10d::OpType::ALLGATHER_COALESCED, coll, flatOuts, inputs, opts);
    work->detail_ = c10::str(inputs.size(), " tensors");
    issueLocked(work, [&](auto& calls) {
      for (size_t i = 0; i < inputs.size(); i++) {
        const at::Tensor& in = inputs[i];
        int64_t n = in.numel();
        at::Tensor recv = at::empty({getSize() * n}, in.options());
        work->keepalive_.push_back(recv);
        std::vector<at::Tensor> dsts;
        for (auto& l : outputLists) {
          dsts.push_back(l[i]);
        }
        work->post_ = chainPost(work->post_, [dsts, recv, n]() mutable {
          for (size_t r = 0; r < dsts.size(); r++) {
            dsts[r].copy_(recv.narrow(0, r * n, n).view(dsts[r].sizes()));
          }
        });
        const int64_t nbytes = n * in.element_size();
        addAllgather(work, in, nbytes ? static_cast<char*>(recv.data_ptr()) : nullptr, nbytes, calls);
      }
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::GatherOptions& opts) override {
    const char* coll = "gather";
    checkUsable(coll);
    const at::Tensor& in = single(inputTensors, coll, "input_tensors");
    checkTensor(in, coll, "the input tensor");
    checkRoot(opts.rootRank, coll);
    const int root = static_cast<int>(opts.rootRank);
    const bool isRoot = getRank() == root;
    std::vector<at::Tensor> outs =
        rootList(outputTensors, in, coll, "output", "gather_list", root, true);
    auto work = makeWork(c10d::OpType::GATHER, coll, outs, {in}, opts);
    work->detail_ = c10::str(describe(in), ", root ", root);
    issueLocked(work, [&](auto& calls) {
      at::Tensor send = in.contiguous();
      work->keepalive_.push_back(send);
      Wire w = moveWire(send);
      char* rp = nullptr;
      if (isRoot) {
        rp = flatTarget(work, outs, in);
      }
      const void* sp = w.count ? send.data_ptr() : nullptr;
      if (!w.count) {
        rp = nullptr;
      }
      gotree_comm_t comm = comm_;
      const Api* a = &api();
      calls.push_back([=](int device, void* stream, gotree_request_t* r) {
        return a->gather(comm, sp, rp, w.count, w.dtype, GOTREE_SUM, root,
                         device, stream, r);
      });
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ScatterOptions& opts) override {
    const char* coll = "scatter";
    checkUsable(coll);
    const at::Tensor& out = single(outputTensors, coll, "output_tensors");
    checkTensor(out, coll, "the output tensor");
    checkWritable(out, coll, "the output tensor");
    checkRoot(opts.rootRank, coll);
    const int root = static_cast<int>(opts.rootRank);
    const bool isRoot = getRank() == root;
    std::vector<at::Tensor> ins =
        rootList(inputTensors, out, coll, "input", "scatter_list", root, false);
    auto work = makeWork(c10d::OpType::SCATTER, coll, {out}, ins, opts);
    work->detail_ = c10::str(describe(out), ", root ", root);
    issueLocked(work, [&](auto& calls) {
      at::Tensor send;
      if (isRoot) {
        std::vector<at::Tensor> flat;
        for (auto& x : ins) {
          flat.push_back(x.reshape({-1}));
        }
        send = at::cat(flat);
        work->keepalive_.push_back(send);
      }
      at::Tensor recv = recvTarget(work, out, send);
      Wire w = moveWire(recv);
      const void* sp = (isRoot && w.count) ? send.data_ptr() : nullptr;
      void* rp = w.count ? recv.data_ptr() : nullptr;
      gotree_comm_t comm = comm_;
      const Api* a = &api();
      calls.push_back([=](int device, void* stream, gotree_request_t* r) {
        return a->scatter(comm, sp, rp, w.count, w.dtype, GOTREE_SUM, root,
                          device, stream, r);
      });
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const c10d::AllToAllOptions& opts) override {
    const char* coll = "all_to_all_single";
    checkUsable(coll);
    checkTensor(input, coll, "the input tensor");
    checkTensor(output, coll, "the output tensor");
    checkWritable(output, coll, "the output tensor");
    TORCH_CHECK_TYPE(
        output.scalar_type() == input.scalar_type(), "gotree: ", coll,
        ": the output tensor has dtype ", dtypeName(output.scalar_type()),
        ", the input ", dtypeName(input.scalar_type()), "; they must match");
    TORCH_CHECK_VALUE(
        input.dim() >= 1 && output.dim() >= 1, "gotree: ", coll,
        ": the input and output must have at least one dimension (split along dim 0)");
    const int n = getSize();
    bool equal = inputSplitSizes.empty() && outputSplitSizes.empty();
    int64_t inRow = rowElems(input), outRow = rowElems(output);
    TORCH_CHECK_VALUE(
        equal || inRow == outRow, "gotree: ", coll, ": input rows have ", inRow,
        " elements (sizes ", input.sizes(), ") but output rows have ", outRow,
        " (sizes ", output.sizes(), ")");
    auto splits = [&](std::vector<int64_t>& given, const at::Tensor& t,
                      const char* which) {
      std::vector<int64_t> s;
      if (given.empty()) {
        TORCH_CHECK_VALUE(
            t.size(0) % n == 0, "gotree: ", coll, ": no ", which,
            " split sizes given, so dim 0 of the ", which, " (", t.size(0),
            ") must divide by the group size ", n);
        s.assign(n, t.size(0) / n);
      } else {
        TORCH_CHECK_VALUE(
            static_cast<int>(given.size()) == n, "gotree: ", coll, ": ",
            which, "_split_sizes has ", given.size(), " entries, expected ", n,
            " (the group size)");
        int64_t sum = 0;
        for (size_t i = 0; i < given.size(); i++) {
          TORCH_CHECK_VALUE(
              given[i] >= 0, "gotree: ", coll, ": ", which, "_split_sizes[",
              i, "] = ", given[i], " is negative");
          sum += given[i];
        }
        TORCH_CHECK_VALUE(
            sum == t.size(0), "gotree: ", coll, ": ", which,
            "_split_sizes add up to ", sum, " but dim 0 of the ", which,
            " is ", t.size(0));
        s = given;
      }
      return s;
    };
    std::vector<int64_t> ins = splits(inputSplitSizes, input, "input");
    std::vector<int64_t> outs = splits(outputSplitSizes, output, "output");
    if (equal) {
      // Equal splits of dim 0 are equal pieces of the flat tensor.
      TORCH_CHECK_VALUE(
          input.numel() == output.numel(), "gotree: ", coll, ": the output has ",
          output.numel(), " elements but the input ", input.numel(),
          " (equal splits need equal sizes)");
    }
    auto work = makeWork(c10d::OpType::ALLTOALL_BASE, coll, {output}, {input}, opts);
    work->detail_ = c10::str(describe(input), equal ? ", equal splits" : ", uneven splits");
    issueLocked(work, [&](auto& calls) {
      at::Tensor send = input.contiguous();
      if (at::get_overlap_status(send, output) != at::MemOverlapStatus::No) {
        send = input.clone(at::MemoryFormat::Contiguous);
      }
      work->keepalive_.push_back(send);
      at::Tensor recv = recvTarget(work, output, send);
      Wire w = moveWire(send);
      uint64_t per = static_cast<uint64_t>(inRow) * wirePer(send);
      std::vector<uint64_t> sc(n), sd(n), rc(n), rd(n);
      uint64_t so = 0, ro = 0;
      for (int i = 0; i < n; i++) {
        sc[i] = ins[i] * per;
        sd[i] = so;
        so += sc[i];
        rc[i] = outs[i] * per;
        rd[i] = ro;
        ro += rc[i];
      }
      const void* sp = so ? send.data_ptr() : nullptr;
      void* rp = ro ? recv.data_ptr() : nullptr;
      gotree_comm_t comm = comm_;
      const Api* a = &api();
      gotree_dtype_t dt = w.dtype;
      if (equal) {
        uint64_t count = n ? so / n : 0;
        calls.push_back([=](int device, void* stream, gotree_request_t* r) {
          return a->alltoall(comm, sp, rp, count, dt, GOTREE_SUM, 0,
                             device, stream, r);
        });
      } else {
        calls.push_back([=](int device, void* stream, gotree_request_t* r) {
          return a->alltoallv(comm, sp, sc.data(), sd.data(), rp, rc.data(),
                              rd.data(), dt, device, stream, r);
        });
      }
    });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllToAllOptions& opts) override {
    const char* coll = "all_to_all";
    checkUsable(coll);
    const int n = getSize();
    TORCH_CHECK_VALUE(
        static_cast<int>(inputTensors.size()) == n, "gotree: ", coll,
        ": the input list has ", inputTensors.size(), " tensors, expected ", n,
        " (the group size)");
    TORCH_CHECK_VALUE(
        static_cast<int>(outputTensors.size()) == n, "gotree: ", coll,
        ": the output list has ", outputTensors.size(), " tensors, expected ", n,
        " (the group size)");
    at::ScalarType dtype = inputTensors[0].scalar_type();
    for (int i = 0; i < n; i++) {
      std::string wi = c10::str("input_tensor_list[", i, "]");
      std::string wo = c10::str("output_tensor_list[", i, "]");
      checkTensor(inputTensors[i], coll, wi);
      checkTensor(outputTensors[i], coll, wo);
      checkWritable(outputTensors[i], coll, wo);
      TORCH_CHECK_TYPE(
          inputTensors[i].scalar_type() == dtype &&
              outputTensors[i].scalar_type() == dtype,
          "gotree: ", coll, ": every tensor must have dtype ", dtypeName(dtype),
          " (", wi, ": ", dtypeName(inputTensors[i].scalar_type()), ", ", wo,
          ": ", dtypeName(outputTensors[i].scalar_type()), ")");
    }
    auto work = makeWork(c10d::OpType::ALLTOALL, coll, outputTensors, inputTensors, opts);
    work->detail_ = c10::str(n, " tensors of ", dtypeName(dtype));
    issueLocked(work, [&](auto& calls) {
      std::vector<at::Tensor> flat;
      std::vector<int64_t> counts(n), displs(n);
      int64_t off = 0;
      for (int i = 0; i < n; i++) {
        flat.push_back(inputTensors[i].reshape({-1}));
        counts[i] = inputTensors[i].numel();
        displs[i] = off;
        off += counts[i];
      }
      addAlltoallvInto(work, at::cat(flat), counts, displs, outputTensors, calls);
    });
    return work;
  }

  // -- point to point -------------------------------------------------------

  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors, int dstRank, int /*tag*/) override {
    const char* coll = "send";
    checkUsable(coll);
    const at::Tensor& t = single(tensors, coll, "tensors");
    checkTensor(t, coll, "the tensor");
    checkPeer(dstRank, coll, "destination");
    auto work = makeWork(c10d::OpType::SEND, coll, {t}, {}, c10d::kUnsetTimeout);
    work->detail_ = c10::str(describe(t), " to rank ", dstRank);
    issueLocked(work, [&](auto& calls) {
      at::Tensor buf = t.contiguous();
      work->keepalive_.push_back(buf);
      Wire w = moveWire(buf);
      const void* p = w.count ? buf.data_ptr() : nullptr;
      gotree_comm_t comm = comm_;
      const Api* a = &api();
      calls.push_back([=](int device, void* stream, gotree_request_t* r) {
        return a->send(comm, p, w.count, w.dtype, dstRank, device, stream, r);
      });
    }, /*p2p=*/true);
    return work;
  }

  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors, int srcRank, int /*tag*/) override {
    const char* coll = "recv";
    checkUsable(coll);
    const at::Tensor& t = single(tensors, coll, "tensors");
    checkTensor(t, coll, "the tensor");
    checkWritable(t, coll, "the tensor");
    checkPeer(srcRank, coll, "source");
    auto work = makeWork(c10d::OpType::RECV, coll, {t}, {}, c10d::kUnsetTimeout);
    work->detail_ = c10::str(describe(t), " from rank ", srcRank);
    work->sourceRank_ = srcRank;
    auto run = [this, work, t, srcRank]() {
      issueLocked(work, [&](auto& calls) {
        at::Tensor buf = recvTarget(work, t, at::Tensor());
        Wire w = moveWire(buf);
        void* p = w.count ? buf.data_ptr() : nullptr;
        gotree_comm_t comm = comm_;
        const Api* a = &api();
        calls.push_back([=](int device, void* stream, gotree_request_t* r) {
          return a->recv(comm, p, w.count, w.dtype, srcRank, device, stream, r);
        });
      }, /*p2p=*/true);
    };
    issueRecv(work, run);
    return work;
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(
      std::vector<at::Tensor>& tensors, int /*tag*/) override {
    const char* coll = "recv (any source)";
    checkUsable(coll);
    const at::Tensor& t = single(tensors, coll, "tensors");
    checkTensor(t, coll, "the tensor");
    checkWritable(t, coll, "the tensor");
    TORCH_CHECK(
        getSize() > 1, "gotree: ", coll, ": rank ", getRank(),
        " is alone in its group, so no rank can send to it");
    TORCH_CHECK(
        t.numel() > 0, "gotree: ", coll, ": the tensor has 0 elements; a "
        "receive of 0 elements must name its source (src=), because a "
        "zero-element send puts no message on the wire");
    auto work = makeWork(c10d::OpType::RECVANYSOURCE, coll, {t}, {}, c10d::kUnsetTimeout);
    work->detail_ = c10::str(describe(t), " from any rank");
    auto run = [this, work, t]() {
      issueLocked(work, [&](auto& calls) {
        at::Tensor buf = recvTarget(work, t, at::Tensor());
        // Learn the sender before the work (and its future) completes; the
        // completion thread runs post_ only after the request was issued.
        GotreeWork* wp = work.get();
        const Api* a = &api();
        work->post_ = chainPost([wp, a]() {
          int src = -1;
          if (!wp->reqs_.empty()) {
            a->request_source(wp->reqs_[0], &src);
          }
          wp->sourceRank_ = src;
        }, work->post_);
        Wire w = moveWire(buf);
        void* p = buf.data_ptr();
        gotree_comm_t comm = comm_;
        calls.push_back([=](int device, void* stream, gotree_request_t* r) {
          return a->recv(comm, p, w.count, w.dtype, GOTREE_ANY_SOURCE, device, stream, r);
        });
      }, /*p2p=*/true);
    };
    issueRecv(work, run);
    return work;
  }

  // A receive into CUDA memory runs through host memory and returns only
  // when its message is on the device, blocking the calling thread. In a
  // coalesced batch (batch_isend_irecv) it is therefore issued at
  // endCoalescing, after every send of the batch (a device send returns
  // once its bytes are on the host): ranks that each receive before they
  // send in their batch would otherwise wait for each other until the
  // timeout. Any other receive is issued now (run).
  void issueRecv(const c10::intrusive_ptr<GotreeWork>& work, std::function<void()> run) {
    {
      std::lock_guard<std::recursive_mutex> g(issueMu_);
      if (coalescing_ && work->device_.is_cuda()) {
        coalesced_.push_back(work);
        deferredRecvs_.emplace_back(work, std::move(run));
        return;
      }
    }
    run();
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override {
    checkUsable("monitored_barrier");
    milliseconds to = (opts.timeout != c10d::kUnsetTimeout && opts.timeout.count() > 0)
        ? opts.timeout : timeout_;
    const int n = getSize();
    const int me = getRank();
    if (n == 1) {
      return;
    }
    const Api& a = api();
    auto deadline = Clock::now() + to;
    auto left = [&]() {
      return std::max<int64_t>(
          0, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
    };
    // Buffers live on the heap and are released only when their request
    // finished: a request abandoned at the deadline may still be written.
    auto issueP2P = [&](bool isSend, int64_t* buf, int peer, uint64_t count) {
      gotree_request_t r = 0;
      gotree_status_t st = isSend
          ? a.send(comm_, buf, count, GOTREE_INT64, peer, GOTREE_DEVICE_CPU, nullptr, &r)
          : a.recv(comm_, buf, count, GOTREE_INT64, peer, GOTREE_DEVICE_CPU, nullptr, &r);
      if (st != GOTREE_SUCCESS) {
        throwStatus(st, c10::str("gotree: monitored_barrier: could not ",
                                 isSend ? "send to" : "receive from", " rank ", peer,
                                 ": ", describeFailure(a, st, {comm_, 0})));
      }
      return r;
    };
    auto waitReq = [&](gotree_request_t r, int64_t ms) {
      gotree_status_t st = a.request_wait(r, ms);
      int done = 0;
      if (st == GOTREE_ERR_TIMEOUT) {
        st = a.request_test(r, &done);
        if (!done) {
          return GOTREE_ERR_TIMEOUT;
        }
      }
      return st;
    };
    if (me != 0) {
      auto* tok = new int64_t[1]{me};
      auto* ack = new int64_t[n]();
      gotree_request_t rs = issueP2P(true, tok, 0, 1);
      gotree_request_t rr = issueP2P(false, ack, 0, n);
      gotree_status_t st = waitReq(rs, left());
      if (st == GOTREE_SUCCESS) {
        st = waitReq(rr, left());
      }
      if (st != GOTREE_SUCCESS) {
        // Leak tok/ack: the library may still own them.
        C10_THROW_ERROR(
            DistBackendError,
            c10::str("gotree: monitored_barrier: rank ", me, " did not hear back "
                     "from rank 0 within ", to.count(), " ms (",
                     describeFailure(a, st, {rr, rs, comm_, 0}),
                     "); rank 0 is missing, or reported other ranks missing"));
      }
      a.request_free(rs);
      a.request_free(rr);
      std::vector<int> missing;
      for (int i = 1; i < n; i++) {
        if (ack[i] == 0) {
          missing.push_back(i);
        }
      }
      delete[] tok;
      delete[] ack;
      TORCH_CHECK(
          missing.empty(), "gotree: monitored_barrier: rank 0 reports that rank(s) ",
          c10::Join(", ", missing), " did not reach the barrier within ",
          to.count(), " ms");
      return;
    }
    std::vector<gotree_request_t> reqs(n, 0);
    auto* toks = new int64_t[n]();
    for (int i = 1; i < n; i++) {
      reqs[i] = issueP2P(false, &toks[i], i, 1);
    }
    std::vector<int> missing;
    std::string detail;
    bool abandoned = false;
    for (int i = 1; i < n; i++) {
      if (!missing.empty() && !waitAllRanks) {
        // Only the first missing rank is named; still look at the rest
        // without waiting.
        gotree_status_t st = waitReq(reqs[i], 0);
        if (st != GOTREE_SUCCESS) {
          abandoned = true;
        }
        continue;
      }
      gotree_status_t st = waitReq(reqs[i], left());
      if (st != GOTREE_SUCCESS) {
        missing.push_back(i);
        abandoned = true;
        if (st != GOTREE_ERR_TIMEOUT && detail.empty()) {
          detail = c10::str("; rank ", i, ": ", describeFailure(a, st, {reqs[i], comm_, 0}));
        }
      }
    }
    // Tell every rank which ranks arrived (1) so all of them can raise.
    auto* ack = new int64_t[n]();
    ack[0] = 1;
    for (int i = 1; i < n; i++) {
      int done = 0;
      ack[i] = (a.request_test(reqs[i], &done) == GOTREE_SUCCESS && done) ? 1 : 0;
    }
    std::vector<gotree_request_t> sends;
    for (int i = 1; i < n; i++) {
      if (ack[i]) {
        sends.push_back(issueP2P(true, ack, i, n));
      }
    }
    bool sendsDone = true;
    for (auto r : sends) {
      if (waitReq(r, std::max<int64_t>(left(), 1000)) != GOTREE_SUCCESS) {
        sendsDone = false;
      } else {
        a.request_free(r);
      }
    }
    if (sendsDone) {
      delete[] ack;
    }
    if (!abandoned) {
      for (int i = 1; i < n; i++) {
        a.request_free(reqs[i]);
      }
      delete[] toks;
    }
    if (!missing.empty()) {
      std::string names = c10::Join(", ", missing);
      C10_THROW_ERROR(
          DistBackendError,
          c10::str("gotree: monitored_barrier: rank(s) ", names,
                   " did not reach the barrier within ", to.count(), " ms", detail,
                   waitAllRanks ? "" : " (the first one missing; pass wait_all_ranks=True to name all)"));
    }
  }

  // -- coalescing (batch_isend_irecv, _coalescing_manager) ------------------

  bool supportsCoalescing() const {  // virtual in newer torch only: no `override`
    return true;
  }

  void startCoalescing() override {
    std::lock_guard<std::recursive_mutex> g(issueMu_);
    TORCH_CHECK(!coalescing_, "gotree: startCoalescing called twice without endCoalescing");
    coalescing_ = true;
    coalesced_.clear();
    deferredRecvs_.clear();
  }

  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    std::vector<c10::intrusive_ptr<GotreeWork>> children;
    std::vector<std::pair<c10::intrusive_ptr<GotreeWork>, std::function<void()>>> deferred;
    {
      std::lock_guard<std::recursive_mutex> g(issueMu_);
      TORCH_CHECK(coalescing_, "gotree: endCoalescing without startCoalescing");
      coalescing_ = false;
      children.swap(coalesced_);
      deferred.swap(deferredRecvs_);
    }
    // The batch's receives into CUDA memory (issueRecv), in order.
    for (size_t i = 0; i < deferred.size(); i++) {
      try {
        deferred[i].second();
      } catch (...) {
        auto failure = std::current_exception();
        for (size_t j = i; j < deferred.size(); j++) {
          deferred[j].first->finish(failure);  // a no-op where it already finished
        }
        throw;
      }
    }
    std::vector<at::Tensor> outs;
    for (auto& c : children) {
      outs.insert(outs.end(), c->outputs_.begin(), c->outputs_.end());
    }
    auto work = makeWork(c10d::OpType::COALESCED, "coalesced", outs, {}, c10d::kUnsetTimeout);
    work->detail_ = c10::str(children.size(), " operations");
    work->children_ = std::move(children);
    if (work->children_.empty()) {
      work->finish(nullptr);
      return work;
    }
    if (work->device_.is_cuda()) {
      // The children completed (on the host) when they were issued; the
      // batch ends after the last of them on the internal stream.
      c10::StreamGuard onStream(internalStream(work->device_));
      work->finish(work->firstChildException());
      markOnStream(*work);
    }
    {
      std::lock_guard<std::recursive_mutex> g(issueMu_);
      work->seq_ = seq_;
      enqueue(work);
    }
    return work;
  }

 private:
  // One library call, given the device and stream to run on
  // (GOTREE_DEVICE_CPU and nullptr for host memory).
  using Call = std::function<gotree_status_t(int, void*, gotree_request_t*)>;

  void checkPeer(int peer, const char* coll, const char* what) {
    TORCH_CHECK_VALUE(
        peer >= 0 && peer < getSize(), "gotree: ", coll, ": ", what, " rank ",
        peer, " is outside the group (valid: 0 to ", getSize() - 1, ")");
    TORCH_CHECK_VALUE(
        peer != getRank(), "gotree: ", coll, ": ", what, " rank ", peer,
        " is this rank itself");
  }

  void checkSameShapeList(
      const std::vector<at::Tensor>& ts, const at::Tensor& ref, const char* coll,
      const char* name, bool writable) {
    for (size_t i = 0; i < ts.size(); i++) {
      std::string what = c10::str(name, "[", i, "]");
      checkTensor(ts[i], coll, what);
      if (writable) {
        checkWritable(ts[i], coll, what);
      }
      TORCH_CHECK_TYPE(
          ts[i].scalar_type() == ref.scalar_type(), "gotree: ", coll, ": ", what,
          " has dtype ", dtypeName(ts[i].scalar_type()), ", expected ",
          dtypeName(ref.scalar_type()));
      TORCH_CHECK_VALUE(
          ts[i].numel() == ref.numel(), "gotree: ", coll, ": ", what, " has ",
          ts[i].numel(), " elements (sizes ", ts[i].sizes(), "), expected ",
          ref.numel(), " (sizes ", ref.sizes(), ")");
    }
  }

  // rootList checks the list of tensors that only the root of a gather
  // (outputs, writable) or scatter (inputs) passes: one list of group-size
  // tensors shaped like ref at the root, nothing elsewhere. It returns the
  // root's list (empty on the other ranks).
  std::vector<at::Tensor> rootList(
      const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& ref,
      const char* coll, const char* kind, const char* name, int root,
      bool writable) {
    if (getRank() != root) {
      TORCH_CHECK_VALUE(
          lists.empty() || (lists.size() == 1 && lists[0].empty()),
          "gotree: ", coll, ": only the root (rank ", root, ") passes ", kind,
          " tensors; rank ", getRank(), " passed ", lists.size(), " list(s)");
      return {};
    }
    TORCH_CHECK_VALUE(
        lists.size() == 1, "gotree: ", coll, ": the root expects exactly one ",
        kind, " list, got ", lists.size());
    const std::vector<at::Tensor>& ts = lists[0];
    TORCH_CHECK_VALUE(
        static_cast<int>(ts.size()) == getSize(), "gotree: ", coll, ": the ",
        kind, " list has ", ts.size(), " tensors, expected ", getSize(),
        " (the group size)");
    checkSameShapeList(ts, ref, coll, name, writable);
    return ts;
  }

  // checkWholeAndPart checks the tensors of a collective that gathers the
  // group's parts into one whole (allgather: the output is the whole) or
  // scatters a whole into parts (reduce-scatter: the input is): one dtype,
  // and the whole holds the group size times the part's elements.
  void checkWholeAndPart(
      const at::Tensor& out, const at::Tensor& in, bool outIsWhole,
      const char* coll, const std::string& idx) {
    checkTensor(in, coll, "the input tensor" + idx);
    checkTensor(out, coll, "the output tensor" + idx);
    checkWritable(out, coll, "the output tensor" + idx);
    TORCH_CHECK_TYPE(
        out.scalar_type() == in.scalar_type(), "gotree: ", coll,
        ": the output tensor", idx, " has dtype ", dtypeName(out.scalar_type()),
        ", the input ", dtypeName(in.scalar_type()), "; they must match");
    const at::Tensor& whole = outIsWhole ? out : in;
    const at::Tensor& part = outIsWhole ? in : out;
    const char* wholeName = outIsWhole ? "output" : "input";
    const char* partName = outIsWhole ? "input" : "output";
    TORCH_CHECK_VALUE(
        whole.numel() == part.numel() * getSize(), "gotree: ", coll,
        ": the ", wholeName, " tensor", idx, " has ", whole.numel(),
        " elements, expected ", part.numel() * getSize(), " (group size ",
        getSize(), " x ", partName, " ", part.numel(), ")");
  }

  static int64_t rowElems(const at::Tensor& t) {
    int64_t r = 1;
    for (int64_t d = 1; d < t.dim(); d++) {
      r *= t.size(d);
    }
    return r;
  }

  // Wire elements per tensor element for data movement (see moveWire).
  static uint64_t wirePer(const at::Tensor& t) {
    gotree_dtype_t d;
    return nativeDtype(t.scalar_type(), &d) ? 1 : t.element_size();
  }

  // Scales buf in place by PREMUL_SUM's factor (nothing for other ops).
  // castFactor: a tensor factor is cast to buf's dtype first (reduce and
  // reduce_scatter); allreduce multiplies by it as given. float8 tensors,
  // which torch gives no arithmetic, go through float32 and are rounded
  // back once (gotree's own float8 semantics).
  static void applyPremul(at::Tensor& buf, const ReducePlan& p, bool castFactor = true) {
    if (!p.premul) {
      return;
    }
    auto t = buf.scalar_type();
    if (t == c10::ScalarType::Float8_e4m3fn || t == c10::ScalarType::Float8_e5m2) {
      at::Tensor wide = buf.to(at::kFloat);
      if (p.premul_tensor.defined()) {
        wide.mul_(p.premul_tensor.to(buf.device()).to(at::kFloat));
      } else {
        wide.mul_(p.premul_double);
      }
      buf.copy_(wide);
    } else if (p.premul_tensor.defined()) {
      at::Tensor f = p.premul_tensor.to(buf.device());
      buf.mul_(castFactor ? f.to(t) : f);
    } else {
      buf.mul_(p.premul_double);
    }
  }

  // The contiguous buffer a reduction sends: the tensor itself, or a copy
  // (non-contiguous, or PREMUL_SUM: the caller's tensor is never scaled).
  at::Tensor reduceInput(
      const c10::intrusive_ptr<GotreeWork>& work, const at::Tensor& t,
      const ReducePlan& p) {
    at::Tensor send;
    if (p.premul) {
      send = t.clone(at::MemoryFormat::Contiguous);
      applyPremul(send, p);
    } else {
      send = t.contiguous();
    }
    work->keepalive_.push_back(send);
    return send;
  }

  // Where a collective writes `out`: out itself when contiguous and not
  // overlapping `avoid` (unless it is exactly `avoid`: in place), else (or
  // when the caller says so: `stage`) a staging buffer copied into out on
  // success.
  at::Tensor recvTarget(
      const c10::intrusive_ptr<GotreeWork>& work, const at::Tensor& out,
      const at::Tensor& avoid, bool stage = false) {
    stage = stage || !out.is_contiguous();
    if (!stage && avoid.defined() && out.numel() && avoid.numel()) {
      bool same = avoid.data_ptr() == out.data_ptr() && avoid.numel() == out.numel();
      stage = !same && at::get_overlap_status(out, avoid) != at::MemOverlapStatus::No;
    }
    if (!stage) {
      work->keepalive_.push_back(out);
      return out;
    }
    at::Tensor recv = at::empty({out.numel()}, out.options());
    at::Tensor dst = out;
    work->post_ = chainPost(work->post_, [dst, recv]() mutable {
      dst.copy_(recv.view(dst.sizes()));
    });
    work->keepalive_.push_back(recv);
    return recv;
  }

  // Receive buffer for n equal pieces: the outputs themselves when they are
  // consecutive pieces of one buffer, else a staging buffer copied out.
  char* flatTarget(
      const c10::intrusive_ptr<GotreeWork>& work,
      const std::vector<at::Tensor>& outs, const at::Tensor& in) {
    const int64_t nbytes = in.numel() * in.element_size();
    bool flat = true;
    for (size_t i = 0; i < outs.size() && flat; i++) {
      flat = outs[i].is_contiguous() &&
          (nbytes == 0 || bytePtr(outs[i]) == bytePtr(outs[0]) + i * nbytes);
    }
    if (flat) {
      work->keepalive_.insert(work->keepalive_.end(), outs.begin(), outs.end());
      return nbytes ? const_cast<char*>(bytePtr(outs[0])) : nullptr;
    }
    at::Tensor recv = at::empty({static_cast<int64_t>(outs.size()) * in.numel()}, in.options());
    work->keepalive_.push_back(recv);
    auto outsCopy = outs;
    int64_t n = in.numel();
    work->post_ = chainPost(work->post_, [outsCopy, recv, n]() mutable {
      for (size_t i = 0; i < outsCopy.size(); i++) {
        outsCopy[i].copy_(recv.narrow(0, i * n, n).view(outsCopy[i].sizes()));
      }
    });
    return nbytes ? static_cast<char*>(recv.data_ptr()) : nullptr;
  }

  // reduce_scatter whose input blocks differ in size (block i, of every
  // rank, is reduced into rank i's output; NCCL does this with one reduce
  // per rank): one reduce per rank, rooted at the block's owner, in one
  // work. An output that overlaps another rank's block (sent in a later
  // reduce) receives through a staging copy.
  c10::intrusive_ptr<c10d::Work> reduceScatterUneven(
      const at::Tensor& out, std::vector<at::Tensor>& ins, const ReducePlan& p,
      const c10d::ReduceScatterOptions& opts) {
    const char* coll = "reduce_scatter";
    const int n = getSize();
    const int me = getRank();
    auto work = makeWork(c10d::OpType::REDUCE_SCATTER, coll, {out}, ins, opts);
    work->detail_ = c10::str(describe(out), ", ", opName(opts.reduceOp.op_), ", uneven blocks");
    issueLocked(work, [&](auto& calls) {
      bool overlapsOther = false;
      for (int j = 0; j < n && out.numel(); j++) {
        overlapsOther = overlapsOther ||
            (j != me && ins[j].numel() &&
             at::get_overlap_status(out, ins[j]) != at::MemOverlapStatus::No);
      }
      gotree_comm_t comm = comm_;
      const Api* a = &api();
      gotree_dtype_t dt = p.dtype;
      gotree_op_t op = p.op;
      for (int i = 0; i < n; i++) {
        at::Tensor send = reduceInput(work, ins[i], p);
        void* rp = nullptr;
        if (i == me && out.numel()) {
          at::Tensor recv = recvTarget(work, out, send, /*stage=*/overlapsOther);
          rp = recv.data_ptr();
        }
        uint64_t count = static_cast<uint64_t>(ins[i].numel()) * p.factor_count_mult;
        const void* sp = count ? send.data_ptr() : nullptr;
        calls.push_back([=](int device, void* stream, gotree_request_t* r) {
          return a->reduce(comm, sp, count ? rp : nullptr, count, dt, op, i, device, stream, r);
        });
      }
    });
    return work;
  }

  // An all-to-all of send (flat, contiguous) whose block for rank i is
  // counts[i] elements at displs[i], received into outs (rank i's block into
  // outs[i], whatever its size and strides) through one staging buffer.
  void addAlltoallvInto(
      const c10::intrusive_ptr<GotreeWork>& work, const at::Tensor& send,
      const std::vector<int64_t>& counts, const std::vector<int64_t>& displs,
      const std::vector<at::Tensor>& outs, std::vector<Call>& calls) {
    const int n = getSize();
    int64_t total = 0;
    for (auto& o : outs) {
      total += o.numel();
    }
    at::Tensor recv = at::empty({total}, send.options());
    work->keepalive_.push_back(send);
    work->keepalive_.push_back(recv);
    auto dsts = outs;
    work->post_ = chainPost(work->post_, [dsts, recv]() mutable {
      int64_t off = 0;
      for (auto& d : dsts) {
        d.copy_(recv.narrow(0, off, d.numel()).view(d.sizes()));
        off += d.numel();
      }
    });
    Wire w = moveWire(send);
    uint64_t per = wirePer(send);
    std::vector<uint64_t> sc(n), sd(n), rc(n), rd(n);
    uint64_t ro = 0;
    for (int i = 0; i < n; i++) {
      sc[i] = counts[i] * per;
      sd[i] = displs[i] * per;
      rc[i] = outs[i].numel() * per;
      rd[i] = ro;
      ro += rc[i];
    }
    const void* sp = send.numel() ? send.data_ptr() : nullptr;
    void* rp = ro ? recv.data_ptr() : nullptr;
    gotree_comm_t comm = comm_;
    const Api* a = &api();
    gotree_dtype_t dt = w.dtype;
    calls.push_back([=](int device, void* stream, gotree_request_t* r) {
      return a->alltoallv(comm, sp, sc.data(), sd.data(), rp, rc.data(),
                          rd.data(), dt, device, stream, r);
    });
  }

  void addReduceScatter(
      const c10::intrusive_ptr<GotreeWork>& work, const at::Tensor& out,
      const at::Tensor& send, const ReducePlan& p, std::vector<Call>& calls) {
    at::Tensor recv = recvTarget(work, out, send);
    uint64_t count = static_cast<uint64_t>(out.numel()) * p.factor_count_mult;
    const void* sp = count ? send.data_ptr() : nullptr;
    void* rp = count ? recv.data_ptr() : nullptr;
    gotree_comm_t comm = comm_;
    const Api* a = &api();
    gotree_dtype_t dt = p.dtype;
    gotree_op_t op = p.op;
    calls.push_back([=](int device, void* stream, gotree_request_t* r) {
      return a->reduce_scatter(comm, sp, rp, count, dt, op, 0, device, stream, r);
    });
  }

  static std::function<void()> chainPost(
      std::function<void()> first, std::function<void()> second) {
    if (!first) {
      return second;
    }
    if (!second) {
      return first;
    }
    return [first, second]() {
      first();
      second();
    };
  }

  void checkUsable(const char* coll) {
    checkNotForked(pid_, c10::str("collective ", coll, " was called").c_str());
    TORCH_CHECK(
        !stopped_.load(), "gotree: ", coll, " on a process group that was ",
        abortedByUser_ ? "aborted" : "shut down",
        "; create a new process group");
    if (failed_.load()) {
      std::lock_guard<std::mutex> g(queueMu_);
      C10_THROW_ERROR(
          DistBackendError,
          c10::str("gotree: ", coll, " on a communicator that was aborted after "
                   "an earlier failure: ", firstFailure_));
    }
  }

  void checkRoot(int64_t root, const char* coll) {
    TORCH_CHECK_VALUE(
        root >= 0 && root < getSize(), "gotree: ", coll, ": root rank ", root,
        " is outside the group (valid: 0 to ", getSize() - 1, ")");
  }

  // makeWork for a collective called with options opts: a synchronous
  // call (asyncOp false) is waited for on the calling thread.
  template <typename O>
  c10::intrusive_ptr<GotreeWork> makeWork(
      c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
      const std::vector<at::Tensor>& inputs, const O& opts) {
    auto work = makeWork(type, name, std::move(outputs), inputs, opts.timeout);
    work->sync_ = !isAsyncOp(opts, 0);
    return work;
  }

  // inputs: the tensors the work reads that are not among its outputs. All
  // tensors of one work are on one device: the CPU, or one CUDA device.
  c10::intrusive_ptr<GotreeWork> makeWork(
      c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
      const std::vector<at::Tensor>& inputs, milliseconds opTimeout) {
    c10::Device device = !outputs.empty() ? outputs[0].device()
        : !inputs.empty()                   ? inputs[0].device()
                                            : c10::Device(c10::kCPU);
    for (c10::ArrayRef<at::Tensor> list :
         {c10::ArrayRef<at::Tensor>(outputs), c10::ArrayRef<at::Tensor>(inputs)}) {
      for (const auto& t : list) {
        TORCH_CHECK_VALUE(
            t.device() == device, "gotree: ", name, ": all tensors must be on "
            "one device (the CPU or one CUDA device); got ", device.str(),
            " and ", t.device().str());
      }
    }
    bool explicitTimeout = opTimeout != c10d::kUnsetTimeout && opTimeout.count() > 0;
    milliseconds to = explicitTimeout ? opTimeout : timeout_;
    auto work = c10::make_intrusive<GotreeWork>(
        getRank(), type, name, 0, std::move(outputs), device, Clock::now() + to,
        to, explicitTimeout && to < timeout_);
    work->comm_ = comm_;
    if (device.is_cuda()) {
      work->keepalive_ = inputs;  // the stream may read them after the call returns
    }
    return work;
  }

  // This backend's stream for device works on device d, made on first use.
  c10::Stream internalStream(c10::Device d) {
    std::lock_guard<std::mutex> g(streamMu_);
    auto it = streams_.find(d.index());
    if (it == streams_.end()) {
      c10::impl::VirtualGuardImpl impl(d.type());
      it = streams_.emplace(d.index(), impl.getStreamFromGlobalPool(d)).first;
    }
    return it->second;
  }

  // Ends the host side of a device work, with its internal stream current:
  // every tensor's memory stays reserved until the stream passed this point
  // (the caching allocator records the stream), and the end event marks it.
  static void markOnStream(GotreeWork& work) {
    c10::impl::VirtualGuardImpl impl(work.device_.type());
    c10::Stream stream = impl.getStream(work.device_);
    for (const auto* list : {&work.keepalive_, &work.outputs_}) {
      for (const auto& t : *list) {
        impl.recordDataPtrOnStream(t.storage().data_ptr(), stream);
      }
    }
    work.end_.emplace(work.device_.type());
    work.end_->record(stream);
  }

  // Builds the library calls of one work (may stage buffers and set the
  // copy-out), then issues them under issueMu_ and queues the work. All
  // validation happened before, so a failure here is the library's.
  //
  // A device work runs on this backend's internal stream of its device,
  // after what the caller's current stream holds so far. The staging copies
  // (build, and the copy-out in finish) run there too; the library enqueues
  // the collective there and returns requests that are already complete.
  template <typename Builder>
  void issueLocked(
      const c10::intrusive_ptr<GotreeWork>& work, Builder&& build, bool p2p = false) {
    const bool onDevice = work->device_.is_cuda();
    if (tlsInCallback > 0) {
      g_issuedFromCallback.store(true);
    }
    std::optional<c10::StreamGuard> onStream;
    int device = GOTREE_DEVICE_CPU;
    void* stream = nullptr;
    if (onDevice) {
      c10::Stream internal = internalStream(work->device_);
      c10::Event ready(work->device_.type());
      ready.record(c10::impl::VirtualGuardImpl(work->device_.type()).getStream(work->device_));
      ready.block(internal);
      onStream.emplace(internal);
      device = work->device_.index();
      stream = streamHandle(internal);
    }
    std::vector<Call> calls;
    build(calls);
    // A synchronous call (asyncOp false) with nothing queued before it is
    // waited for here, on the calling thread; a single library call is
    // also announced (gotree_comm_will_wait) so that the library runs it
    // on this thread without waking its own (a device call only enqueues).
    const bool sync = work->sync_ && !coalescing_ && !p2p && idle();
    const bool announce = sync && !work->explicitTimeout_ && calls.size() == 1 && !onDevice;
    const Api& a = api();
    std::unique_lock<std::recursive_mutex> issue(issueMu_);
    work->seq_ = p2p ? seq_ : ++seq_;
    gotree_status_t st = GOTREE_SUCCESS;
    for (auto& call : calls) {
      gotree_request_t r = 0;
      if (announce) {
        a.comm_will_wait(comm_, 1);
      }
      st = call(device, stream, &r);
      if (st != GOTREE_SUCCESS) {
        if (announce) {
          a.comm_will_wait(comm_, 0);
        }
        break;
      }
      work->reqs_.push_back(r);
    }
    if (onDevice) {
      if (st == GOTREE_SUCCESS) {
        // Queues the copy-out; the future records its event after it.
        work->finish(nullptr);
      }
      markOnStream(*work);
    }
    if (st != GOTREE_SUCCESS) {
      std::string msg = c10::str(
          work->label(), " could not be issued",
          onDevice ? c10::str(" on ", work->device_.str()) : std::string(), ": ",
          describeFailure(a, st, {comm_, 0}));
      if (onDevice && st == GOTREE_ERR_NOT_SUPPORTED && work->reqs_.empty()) {
        throwCudaUnsupported(work->device_, msg);
      }
      if (work->reqs_.empty()) {
        throwStatus(st, msg);
      }
      // Part of a coalesced work was issued: let the completion thread
      // retire those requests, and fail the work.
      work->finish(makeDistError(msg));
      enqueue(work);
      throwStatus(st, msg);
    }
    if (sync) {
      // Retire the work here, saving the hand-off to the completion thread
      // and back. An announced call is waited for without a time limit, as
      // promised (the library's own deadline still applies); an operation
      // with its own shorter timeout keeps the watchdog's bounded waits.
      issue.unlock();
      if (announce) {
        a.request_wait(work->reqs_[0], -1);
      }
      retire(a, work);
      return;
    }
    enqueue(work);
    if (coalescing_) {
      coalesced_.push_back(work);
    }
  }

  bool idle() {
    std::lock_guard<std::mutex> g(queueMu_);
    return queue_.empty() && retiring_ == 0;
  }

  void enqueue(const c10::intrusive_ptr<GotreeWork>& work) {
    {
      std::lock_guard<std::mutex> g(queueMu_);
      queue_.push_back(work);
      // Queued from a future callback on a completion thread, with every
      // completion thread busy: that callback may wait for this work's
      // future, which only a completion thread completes. Add one.
      if (tlsCompleting == this && retiring_ == completers_ && !stopping_) {
        completers_++;
        helpers_.emplace_back([this] { completionLoop(); });
      }
    }
    queueCv_->notify_one();
  }

  void addAllreduce(
      const c10::intrusive_ptr<GotreeWork>& work, const at::Tensor& t,
      const ReducePlan& p, std::vector<Call>& calls) {
    at::Tensor buf = t;
    if (!t.is_contiguous() || (p.premul && t.is_cuda())) {
      // Staged: reduce a contiguous copy, copy back on success. A CUDA
      // PREMUL_SUM scales a copy too, so that a call the library refuses
      // leaves the tensor as it was.
      buf = t.clone(at::MemoryFormat::Contiguous);
      at::Tensor dst = t;
      work->post_ = chainPost(work->post_, [dst, buf]() mutable { dst.copy_(buf); });
    }
    // The result overwrites the tensor anyway: scale it (or its copy) in place.
    applyPremul(buf, p, /*castFactor=*/false);
    at::Tensor wire = buf;
    if (at::isComplexType(buf.scalar_type())) {
      wire = at::view_as_real(buf);
    }
    work->keepalive_.push_back(buf);
    uint64_t count = static_cast<uint64_t>(buf.numel()) * p.factor_count_mult;
    void* ptr = count ? wire.data_ptr() : nullptr;
    gotree_comm_t comm = comm_;
    const Api* a = &api();
    gotree_dtype_t dt = p.dtype;
    gotree_op_t op = p.op;
    calls.push_back([=](int device, void* stream, gotree_request_t* r) {
      return a->allreduce(comm, ptr, ptr, count, dt, op, 0, device, stream, r);
    });
  }

  // sendbuf: the input (staged when non-contiguous or when it overlaps the
  // output anywhere but its own slot); recvPtr: size x nbytes.
  void addAllgather(
      const c10::intrusive_ptr<GotreeWork>& work, const at::Tensor& in,
      char* recvPtr, int64_t nbytes, std::vector<Call>& calls) {
    at::Tensor send = in.is_contiguous() ? in : in.contiguous();
    const char* sendPtr = nbytes ? bytePtr(send) : nullptr;
    if (nbytes && recvPtr) {
      const char* lo = recvPtr;
      const char* hi = recvPtr + getSize() * nbytes;
      bool overlaps = sendPtr < hi && sendPtr + nbytes > lo;
      bool ownSlot = sendPtr == recvPtr + getRank() * nbytes;
      if (overlaps && !ownSlot) {
        send = in.clone(at::MemoryFormat::Contiguous);
        sendPtr = bytePtr(send);
      }
    }
    work->keepalive_.push_back(send);
    Wire w = moveWire(send);
    gotree_comm_t comm = comm_;
    const Api* a = &api();
    const void* sp = sendPtr;
    void* rp = recvPtr;
    calls.push_back([=](int device, void* stream, gotree_request_t* r) {
      return a->allgather(comm, sp, rp, w.count, w.dtype, GOTREE_SUM, 0,
                          device, stream, r);
    });
  }

  void addAllgatherBase(
      const c10::intrusive_ptr<GotreeWork>& work, const at::Tensor& out,
      const at::Tensor& in, std::vector<Call>& calls) {
    const int64_t nbytes = in.numel() * in.element_size();
    at::Tensor recv = out;
    if (!out.is_contiguous()) {
      recv = at::empty({out.numel()}, out.options());
      at::Tensor dst = out;
      work->post_ = chainPost(work->post_, [dst, recv]() mutable {
        dst.copy_(recv.view(dst.sizes()));
      });
    }
    work->keepalive_.push_back(recv);
    char* recvPtr = nbytes ? static_cast<char*>(recv.data_ptr()) : nullptr;
    addAllgather(work, in, recvPtr, nbytes, calls);
  }

  // The completion thread (and its helpers, see enqueue) retire the queued
  // works in issue order; a work leaves the queue when a thread takes it.
  void completionLoop() {
    const Api& a = *g_api;
    tlsCompleting = this;
    // Named for top -H, py-spy, gdb (15 characters at most), as torch names
    // ProcessGroupNCCL's watchdog.
    pthread_setname_np(pthread_self(), "gotree-complete");
    for (;;) {
      c10::intrusive_ptr<GotreeWork> work;
      {
        std::unique_lock<std::mutex> g(queueMu_);
        queueCv_->wait(g, [&] { return !queue_.empty() || stopping_; });
        if (queue_.empty()) {
          return;  // stopping and drained
        }
        work = queue_.front();
        queue_.pop_front();
        retiring_++;
      }
      retire(a, work);
      // Its last reference may free tensors: not under the lock, and not
      // once Python exits (GilRegion).
      {
        GilRegion region;
        if (region) {
          work.reset();
        } else {
          (void)work.release();
        }
      }
      {
        std::lock_guard<std::mutex> g(queueMu_);
        retiring_--;
      }
    }
  }

  void retire(const Api& a, const c10::intrusive_ptr<GotreeWork>& work) {
    // The library's own communicator timeout normally fails a stuck request
    // first (with a message naming the peer); the watchdog is a backstop,
    // and enforces per-operation timeouts shorter than the group's.
    // Every request is waited for even when Work.wait() already completed
    // the work: the buffers it uses (keepalive_) are released only here,
    // once the library is done with all of them.
    auto grace = work->explicitTimeout_ ? milliseconds(0) : milliseconds(2000);
    auto watchdog = work->deadline_ + grace;
    bool allDone = true;
    for (auto r : work->reqs_) {
      for (;;) {
        auto left = std::chrono::duration_cast<milliseconds>(watchdog - Clock::now());
        int64_t slice = std::max<int64_t>(0, std::min<int64_t>(left.count(), 200));
        gotree_status_t st = a.request_wait(r, slice);
        int done = 1;
        if (st == GOTREE_ERR_TIMEOUT) {
          st = a.request_test(r, &done);
        }
        if (done) {
          if (st != GOTREE_SUCCESS) {
            work->finishFromStatus(st, r);
            recordFailure(work, st, r);
          }
          break;
        }
        if (Clock::now() >= watchdog) {
          std::string msg = c10::str(
              work->label(), " timed out after ", work->timeout_.count(),
              " ms", work->explicitTimeout_ ? " (its timeout argument)" : " (the group timeout)",
              "; the communicator was aborted. A rank that never issued this "
              "collective, or issued a different one, is the usual cause.");
          setFailure(msg, kTimeoutFailure);
          if (!aborted_.exchange(true)) {
            a.comm_dump_flight_record(comm_, msg.c_str());  // GOTREE_TRACE_DUMP_FILE
            a.comm_abort(comm_);
          }
          // After the abort every request should finish promptly; the
          // buffers must outlive it, so wait (bounded) before failing the work.
          int d = 0;
          for (int i = 0; i < 20 && !d; i++) {
            a.request_wait(r, 500);
            a.request_test(r, &d);
          }
          work->finish(makeDistError(msg));
          if (!d) {
            allDone = false;
          }
          break;
        }
      }
    }
    if (!work->children_.empty()) {
      // Issued after its children, so they were retired before it.
      work->finish(work->firstChildException());
    }
    work->finish(nullptr);  // no-op when already completed
    if (allDone) {
      // A device work keeps its tensors until it is destroyed (the caching
      // allocator also holds their memory until its stream passed the op).
      GilRegion region;
      if (!work->device_.is_cuda() && region) {
        work->keepalive_.clear();
      }
    } else {
      // The library never released a request even after abort: never free
      // memory it might still write (leak instead of use-after-free).
      new std::vector<at::Tensor>(std::move(work->keepalive_));
      new std::vector<at::Tensor>(work->outputs_);
    }
  }

  void recordFailure(const c10::intrusive_ptr<GotreeWork>& work,
                     gotree_status_t st, int64_t r) {
    if (st == GOTREE_ERR_ABORTED || st == GOTREE_ERR_REMOTE ||
        st == GOTREE_ERR_TIMEOUT || st == GOTREE_ERR_SYSTEM ||
        st == GOTREE_ERR_INTERNAL) {
      const Api& a = *g_api;
      setFailure(c10::str(work->label(), " failed: ",
                          describeFailure(a, st, {r, comm_, 0})),
                 failureKindOf(st));
    }
  }

  // The first failure's kind, for getError (the values of c10d::ErrorType,
  // which older torch releases lack).
  static constexpr int kNoFailure = 0, kTimeoutFailure = 1, kCommFailure = 2, kRemoteFailure = 3;

  int failureKindOf(gotree_status_t st) const {
    switch (st) {
      case GOTREE_SUCCESS:
        return kNoFailure;
      case GOTREE_ERR_TIMEOUT:
        return kTimeoutFailure;
      case GOTREE_ERR_REMOTE:
        return kRemoteFailure;
      case GOTREE_ERR_ABORTED:
        // The library aborts the communicator on the first failure; an
        // abort the caller asked for is none.
        return abortedByUser_ ? kNoFailure : kCommFailure;
      default:
        return kCommFailure;
    }
  }

  void setFailure(const std::string& msg, int kind) {
    std::lock_guard<std::mutex> g(queueMu_);
    if (firstFailure_.empty()) {
      firstFailure_ = msg;
      int none = kNoFailure;
      failureKind_.compare_exchange_strong(none, kind);
    }
    failed_.store(true);
  }

  void stop(bool abort) {
    if (stopped_.exchange(true)) {
      return;
    }
    abortedByUser_ = abort;
    if (currentPid() != pid_) {
      // Forked child: the completion thread does not exist here and Go must
      // not run. Leak what the parent's thread was using instead of
      // destroying it (a std::thread that is still joinable would
      // terminate, a condition variable with a phantom waiter would hang).
      (void)queueCv_.release();
      if (completer_.joinable()) {
        (void)new std::thread(std::move(completer_));
      }
      (void)new std::vector<std::thread>(std::move(helpers_));
      return;
    }
    auto body = [&] {
      const Api& a = *g_api;
      if (comm_ != 0) {
        if (abort) {
          if (!aborted_.exchange(true)) {
            a.comm_abort(comm_);
          }
        } else if (failed_.load()) {
          // A collective already failed: peers may be gone, so do not wait
          // for the issued collectives (destroy would, up to the timeout).
          if (!aborted_.exchange(true)) {
            a.comm_abort(comm_);
          }
        } else if (!aborted_.load()) {
          // Waits for the issued collectives, then releases.
          a.comm_destroy(comm_);
        }
      }
      {
        std::lock_guard<std::mutex> g(queueMu_);
        stopping_ = true;
      }
      queueCv_->notify_all();
      // No helper starts once stopping_ is set: helpers_ no longer changes.
      helpers_.push_back(std::move(completer_));
      for (auto& t : helpers_) {
        if (!t.joinable()) {
          continue;
        }
        if (t.get_id() == std::this_thread::get_id()) {
          t.detach();  // last reference dropped by a future callback
        } else {
          t.join();
        }
      }
    };
    // The completion thread may run Python future callbacks that need the
    // GIL: never block on it while holding the GIL.
    if (Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release nogil;
      body();
    } else {
      body();
    }
  }

  milliseconds timeout_;
  const pid_t pid_;
  gotree_comm_t comm_ = 0;
  uint64_t seq_ = 0;
  bool coalescing_ = false;                               // under issueMu_
  std::vector<c10::intrusive_ptr<GotreeWork>> coalesced_;  // under issueMu_
  // Receives into CUDA memory of the open batch, issued at endCoalescing
  // (issueRecv); under issueMu_.
  std::vector<std::pair<c10::intrusive_ptr<GotreeWork>, std::function<void()>>> deferredRecvs_;
  // Recursive: a sparse allreduce holds it across the collectives it is
  // made of, which take it again each.
  std::recursive_mutex issueMu_;
  std::mutex splitMu_;
  std::string lastSplitName_;  // the group, store and backend of the last split
  // A weak reference keeps the store's memory, so no later store can take
  // its address while this is held.
  c10::weak_intrusive_ptr<c10d::Store> lastSplitStore_{c10::intrusive_ptr<c10d::Store>()};
  c10::weak_intrusive_ptr<c10d::Backend> lastSplit_{c10::intrusive_ptr<c10d::Backend>()};
  std::mutex streamMu_;
  std::map<c10::DeviceIndex, c10::Stream> streams_;  // internal streams, under streamMu_
  std::mutex queueMu_;
  // Held by pointer so that a forked child can leak it: the parent's
  // completion thread was waiting on it at fork time, and destroying a
  // condition variable with a waiter that no longer exists blocks forever.
  std::unique_ptr<std::condition_variable> queueCv_ = std::make_unique<std::condition_variable>();
  std::deque<c10::intrusive_ptr<GotreeWork>> queue_;
  int completers_ = 1;  // completion threads (completer_ and helpers_), under queueMu_
  int retiring_ = 0;    // of them, those retiring a work now, under queueMu_
  std::vector<std::thread> helpers_;  // under queueMu_ until stopping_
  // The backend whose completion thread this is, if any.
  static thread_local const GotreeBackend* tlsCompleting;
  bool stopping_ = false;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> failed_{false};
  std::atomic<int> failureKind_{kNoFailure};  // of firstFailure_ (getError)
  bool abortedByUser_ = false;
  std::string firstFailure_;
  std::thread completer_;
};

thread_local const GotreeBackend* GotreeBackend::tlsCompleting = nullptr;

}  // namespace gotree_ext

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  gotree_ext::refreshPid();
  pthread_atfork(nullptr, nullptr, gotree_ext::refreshPid);
  pthread_atfork(gotree_ext::SharedCPUAllocator::lockForFork, gotree_ext::SharedCPUAllocator::unlockAfterFork,
                 gotree_ext::SharedCPUAllocator::unlockAfterFork);
  using gotree_ext::GotreeBackend;
  m.doc() = "gotree's torch.distributed backend (loads libgotree.so at run time)";
  m.attr("ABI_VERSION") = GOTREE_ABI_VERSION;

  m.def(
      "_quiesce_for_exit",
      [](double seconds) {
        return gotree_ext::quiesceForExit(std::chrono::milliseconds(
            static_cast<int64_t>(seconds * 1000)));
      },
      py::arg("seconds") = 5.0,
      "Stops completion threads from running future callbacks and freeing "
      "Python-made tensors, and waits up to `seconds` for those under way; "
      "registered with atexit when the module loads.");
  py::module_::import("atexit").attr("register")(m.attr("_quiesce_for_exit"));

  m.def(
      "load_library",
      [](const std::string& path) {
        const auto& a = gotree_ext::loadApi(path);
        char buf[256];
        a.version(buf, sizeof(buf));
        return std::string(buf);
      },
      py::arg("path"),
      "dlopen libgotree.so (RTLD_LAZY|RTLD_LOCAL), resolve the C ABI, check "
      "its version; returns the library's version string. Idempotent: the "
      "first path loaded wins (one Go runtime per process).");

  m.def(
      "probe_handoff",
      [](int64_t bytes, int rounds) {
        const auto& a = gotree_ext::api();
        TORCH_CHECK_VALUE(bytes > 0, "gotree: probe_handoff: bytes must be positive, got ", bytes);
        double us = 0;
        gotree_status_t st;
        {
          py::gil_scoped_release nogil;
          st = a.probe_handoff(static_cast<size_t>(bytes), rounds, &us);
        }
        if (st == GOTREE_ERR_INVALID_ARGUMENT) {
          TORCH_CHECK_VALUE(false, gotree_ext::errorText(a, 0));
        }
        if (st == GOTREE_ERR_NOT_SUPPORTED) {
          TORCH_CHECK_NOT_IMPLEMENTED(false, gotree_ext::errorText(a, 0));
        }
        TORCH_CHECK(st == GOTREE_SUCCESS, "gotree: probe_handoff failed (",
                    gotree_ext::statusName(a, st), "): ", gotree_ext::errorText(a, 0));
        return us;
      },
      py::arg("bytes"), py::arg("rounds"),
      "The C ABI's gotree_probe_handoff: median microseconds to hand `bytes` "
      "written on one CPU to a second CPU (gotree.probe_handoff wraps it).");

  m.def(
      "shared_bytes",
      [](int64_t bytes) {
        const auto& a = gotree_ext::api();
        TORCH_CHECK_VALUE(bytes > 0, "gotree: shared_bytes: bytes must be positive, got ", bytes);
        void* p = nullptr;
        gotree_status_t st = a.mem_alloc(static_cast<size_t>(bytes), &p);
        if (st == GOTREE_ERR_INVALID_ARGUMENT) {
          TORCH_CHECK_VALUE(false, gotree_ext::errorText(a, 0));
        }
        TORCH_CHECK(st == GOTREE_SUCCESS && p != nullptr, "gotree: gotree_mem_alloc of ", bytes, " bytes failed (",
                    gotree_ext::statusName(a, st), "): ", gotree_ext::errorText(a, 0));
        auto release = a.mem_free;  // the library stays loaded for the process's life
        return torch::from_blob(
            p, {bytes}, [release](void* q) { release(q); }, torch::TensorOptions().dtype(torch::kUInt8));
      },
      py::arg("bytes"),
      "The C ABI's gotree_mem_alloc as a uint8 CPU tensor of `bytes` zeroed "
      "bytes that the host's ranks can map; gotree_mem_free runs when its "
      "storage is freed (gotree.empty wraps it).");

  m.def(
      "use_shared_allocator",
      [](int64_t min_bytes, int64_t cache_bytes) {
        TORCH_CHECK_VALUE(min_bytes >= 0 && cache_bytes >= 0,
                          "gotree: use_shared_allocator: min_bytes and cache_bytes must not be negative, got ",
                          min_bytes, " and ", cache_bytes);
        gotree_ext::useSharedAllocator(static_cast<size_t>(min_bytes), static_cast<size_t>(cache_bytes));
      },
      py::arg("min_bytes"), py::arg("cache_bytes"),
      "Makes torch's CPU allocator put tensors of at least min_bytes in shared "
      "buffers (0: none), keeping up to cache_bytes of freed ones for reuse "
      "(gotree.use_shared_allocator wraps it).");

  m.def("shared_allocator", []() -> py::object {
    auto* s = gotree_ext::SharedCPUAllocator::installed;
    py::dict d;
    d["installed"] = s != nullptr;
    d["active"] = s != nullptr && c10::GetCPUAllocator() == s;
    d["min_bytes"] = s ? s->minBytes() : 0;
    d["fallbacks"] = s ? s->fallbacks() : 0;
    return d;
  });

  m.def("loaded_library_path", []() -> py::object {
    std::lock_guard<std::mutex> g(gotree_ext::g_api_mu);
    if (gotree_ext::g_api == nullptr) {
      return py::none();
    }
    return py::str(gotree_ext::g_api->path);
  });

  py::class_<GotreeBackend, c10d::Backend, c10::intrusive_ptr<GotreeBackend>>(
      m, "GotreeBackend")
      .def(
          py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank,
                      int size, std::chrono::milliseconds timeout) {
            return c10::make_intrusive<GotreeBackend>(store, rank, size, timeout);
          }),
          py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
          py::call_guard<py::gil_scoped_release>(),
          "Joins the gotree communicator of this group (blocks until every "
          "rank joined or the timeout passes).")
      // new_group() on a rank outside the new group calls this on the
      // backend it would split from; gotree's split builds a fresh
      // communicator of the members only, so there is nothing to do.
      .def("perform_nocolor_split", [](GotreeBackend&, py::object) {})
      .def("flight_record", &GotreeBackend::flightRecord,
           py::call_guard<py::gil_scoped_release>(),
           "The communicator's last operations as JSON (gotree.flight_record "
           "parses it).")
      .def("describe", &GotreeBackend::describeComm, py::arg("sizes"),
           py::call_guard<py::gil_scoped_release>(),
           "What the communicator runs and why, as JSON (gotree.describe "
           "parses it).")
#if GOTREE_HAVE_GET_ERROR
      // torch binds get_error() for ProcessGroupNCCL only; gotree.get_error
      // reaches this one.
      .def("get_error", &GotreeBackend::getError,
           py::call_guard<py::gil_scoped_release>(),
           "Whether the group still works: ErrorType.SUCCESS, or the kind of "
           "the failure that broke it (TIMEOUT, COMM_ERROR, REMOTE_ERROR).")
#endif
      ;
}
