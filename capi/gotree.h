/*
 * gotree.h - the C ABI of libgotree.so, gotree's collective communication
 * library. Hand-written C99; stable within one GOTREE_ABI_VERSION.
 *
 * Model (the same as NCCL's):
 *   1. One process (rank 0) calls gotree_get_unique_id() and hands the
 *      resulting bytes to every other rank out of band (torch's c10d
 *      Store, a file, MPI, ...).
 *   2. Every rank calls gotree_comm_init_rank(&comm, &id, rank, nranks, &opts).
 *      The call blocks until all nranks ranks have joined or the timeout
 *      passes.
 *   3. Collectives are asynchronous: each returns a request handle at
 *      once. gotree_request_test() polls it, gotree_request_wait() blocks
 *      with a deadline, gotree_request_free() releases it. Collectives on
 *      one communicator run in the order they were issued; every rank must
 *      issue the same sequence. Any number may be in flight.
 *   4. gotree_comm_destroy() releases everything; gotree_comm_abort()
 *      fails every pending and future call at once, then releases.
 *
 * Handles are opaque 64-bit integers; 0 is never a valid handle. No Go
 * pointer crosses this boundary. Buffers passed to a collective belong to
 * the caller and must stay valid and untouched until the request is
 * complete.
 *
 * Errors: every function returns a gotree_status_t. When it is not
 * GOTREE_SUCCESS, gotree_error_text(handle, ...) returns a sentence naming
 * what was wrong (which rank, which argument, expected vs got). The text of
 * a failure that has no handle yet (a bad argument to gotree_get_unique_id
 * or gotree_comm_init_rank, an invalid handle) is kept under handle 0,
 * process-wide, overwritten by the next such failure.
 *
 * Thread safety: all functions may be called from any thread. Collectives
 * on one communicator must be issued in the same order on every rank; the
 * library does not reorder them.
 *
 * fork(): the Go runtime inside this library does not survive fork(). A
 * forked child must not call any function of this library; every function
 * returns GOTREE_ERR_INVALID_ARGUMENT there, with an explanation from
 * gotree_error_text.
 *
 * Loading: the library binds NVML (through go-nvml) lazily, so some NVML
 * symbols stay undefined until a GPU query runs. Load it with
 * dlopen(RTLD_LAZY), or link against it with -Wl,--allow-shlib-undefined;
 * LD_BIND_NOW=1 and RTLD_NOW are unsupported.
 */
#ifndef GOTREE_H
#define GOTREE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change. Compare with gotree_abi_version(). */
#define GOTREE_ABI_VERSION 1

/* Status codes. */
typedef enum gotree_status {
  GOTREE_SUCCESS = 0,
  GOTREE_ERR_INVALID_ARGUMENT = 1, /* a null pointer, bad dtype/op/rank/count... */
  GOTREE_ERR_INVALID_HANDLE = 2,   /* unknown, freed or wrong-kind handle */
  GOTREE_ERR_TIMEOUT = 3,          /* a deadline passed (wait or the communicator's timeout) */
  GOTREE_ERR_ABORTED = 4,          /* the communicator was aborted earlier */
  GOTREE_ERR_REMOTE = 5,           /* a peer failed, disconnected or disagreed */
  GOTREE_ERR_NOT_SUPPORTED = 6,    /* valid but not implemented (e.g. CUDA without a driver) */
  GOTREE_ERR_SYSTEM = 7,           /* the operating system refused (sockets, memory) */
  GOTREE_ERR_INTERNAL = 8,         /* a bug in gotree: please report the error text */
  GOTREE_IN_PROGRESS = 9           /* gotree_request_test: not finished yet */
} gotree_status_t;

/* Element types. */
typedef enum gotree_dtype {
  GOTREE_FLOAT32 = 0,
  GOTREE_FLOAT64 = 1,
  GOTREE_FLOAT16 = 2,
  GOTREE_BFLOAT16 = 3,
  GOTREE_INT8 = 4,
  GOTREE_UINT8 = 5,
  GOTREE_INT16 = 6,
  GOTREE_INT32 = 7,
  GOTREE_INT64 = 8,
  GOTREE_BOOL = 9,
  GOTREE_COMPLEX64 = 10,
  GOTREE_COMPLEX128 = 11,
  GOTREE_UINT16 = 12,
  GOTREE_UINT32 = 13,
  GOTREE_UINT64 = 14,
  GOTREE_FLOAT8_E4M3 = 15, /* torch.float8_e4m3fn: no infinities, max 448 */
  GOTREE_FLOAT8_E5M2 = 16  /* torch.float8_e5m2: max 57344 */
} gotree_dtype_t;

/* Reduction operators. AVG is a true average (sum / nranks, rounded as the
 * dtype rounds; integer AVG truncates toward zero). */
typedef enum gotree_op {
  GOTREE_SUM = 0,
  GOTREE_AVG = 1,
  GOTREE_PROD = 2,
  GOTREE_MIN = 3,
  GOTREE_MAX = 4,
  GOTREE_BAND = 5,
  GOTREE_BOR = 6,
  GOTREE_BXOR = 7,
  GOTREE_PREMUL_SUM = 8 /* not accepted by ABI version 1 */
} gotree_op_t;

/* The CPU pseudo-device for the `device` argument of collectives. */
#define GOTREE_DEVICE_CPU (-1)

/* The peer of gotree_recv that takes the first message any rank sends. */
#define GOTREE_ANY_SOURCE (-1)

/* Opaque handles; 0 is never valid. */
typedef int64_t gotree_comm_t;
typedef int64_t gotree_request_t;

/* The bytes every rank needs to join one communicator: the bootstrap
 * address and a random secret. Treat as opaque; copy it whole. */
#define GOTREE_UNIQUE_ID_BYTES 128
typedef struct gotree_unique_id {
  char internal[GOTREE_UNIQUE_ID_BYTES];
} gotree_unique_id_t;

/* Options for gotree_comm_init_rank. Zero-initialise, then set
 * struct_size = sizeof(gotree_options_t); a NULL pointer means defaults. */
typedef struct gotree_options {
  uint32_t struct_size;
  /* Deadline in milliseconds for init and for every blocking step of a
   * collective; <= 0 means the default (GOTREE_TIMEOUT_MS, else 30 min). */
  int64_t timeout_ms;
  /* Identifies the machine for locality decisions; ranks with equal host
   * ids share memory. NULL: GOTREE_HOST_ID, else hostname + boot id. */
  const char *host_id;
} gotree_options_t;

/* Library identity. */
int gotree_abi_version(void);
/* Writes a NUL-terminated version string ("gotree 0.1.0 (go1.x)") into buf
 * (truncated to buflen) and returns the full length. */
size_t gotree_version(char *buf, size_t buflen);

/* Short English name of a status ("invalid argument"); never NULL, static. */
const char *gotree_status_string(gotree_status_t status);

/* Copies the last error text of a handle (or of handle 0, see above) into
 * buf, NUL-terminated and truncated to buflen, and returns the full length
 * (0 when there is no error). buf may be NULL when buflen is 0. */
size_t gotree_error_text(int64_t handle, char *buf, size_t buflen);

/* Machine-state probe (a diagnostic; no communicator needed). Two threads
 * pinned to two CPUs of the caller's affinity set hand a block of `bytes`
 * back and forth `rounds` times: one writes it with ordinary stores and
 * raises a flag, the other reads it and answers. *us is the median time of
 * one hand-off in microseconds (the first 4 rounds untimed, or all but the
 * last when there are fewer). Every shared-memory algorithm repeats that step, so the value says
 * which state a machine whose memory speed changes over time is in (on a
 * 2-vCPU VM: 512 KiB took 70-110 us in one state and 240-370 us in the
 * other). Blocks for the rounds; a hand-off unanswered for 2 s fails it with
 * GOTREE_ERR_SYSTEM. GOTREE_ERR_NOT_SUPPORTED with fewer than two CPUs in
 * the set; GOTREE_ERR_INVALID_ARGUMENT outside 1 B-64 MiB or 1-1000 rounds
 * or for a NULL us. Error text on handle 0. */
gotree_status_t gotree_probe_handoff(size_t bytes, int rounds, double *us);

/* Shared buffers (no communicator needed; the counterpart of ncclMemAlloc).
 * gotree_mem_alloc returns `bytes` of zeroed memory, page-aligned, that the
 * other ranks of this host can map: it lives in a memfd instead of the
 * process's private pages. Use it like any buffer. When a direct (single-
 * copy) plan runs on buffers that lie in such memory - an allreduce, an
 * allgather or reduce-scatter run direct (GOTREE_ALGO, GOTREE_CPU_ALLOCATOR),
 * or the single-copy blocks of all-to-all, gather and scatter - each peer maps the
 * buffer once (through /proc/<pid>/fd, which needs the permission that
 * process_vm_readv needs) and reads and writes it with plain loads and
 * stores, without a system call per fragment or a copy through scratch
 * memory. Any mix of such and ordinary buffers is allowed, across ranks and
 * between input and output: nothing has to be agreed, each rank decides per
 * peer buffer. gotree_mem_free releases it; a peer that mapped it keeps its
 * mapping (up to 1024 buffers and 4 GiB per process, the least recently
 * used unmapped first),
 * so the memory returns to the system once those are gone too. Each buffer
 * holds one file descriptor (its memfd) until it is freed: allocate a few
 * large buffers and place tensors in them rather than thousands of small
 * ones.
 * GOTREE_ERR_INVALID_ARGUMENT for 0 bytes, more than 64 TiB, a NULL ptr, or
 * a pointer gotree_mem_alloc did not return; GOTREE_ERR_SYSTEM when the
 * memory cannot be had. Error text on handle 0. */
gotree_status_t gotree_mem_alloc(size_t bytes, void **ptr);
gotree_status_t gotree_mem_free(void *ptr);

/* gotree_mem_alloc_uninit is gotree_mem_alloc without zeroing: the
 * contents are undefined, as malloc's are (a buffer from the cache below
 * keeps what it held). For allocators. */
gotree_status_t gotree_mem_alloc_uninit(size_t bytes, void **ptr);

/* Keeps up to `bytes` of freed shared buffers (their whole mappings,
 * header page included) for gotree_mem_alloc and gotree_mem_alloc_uninit
 * to hand out again: the smallest that holds the request with at most a
 * quarter to spare. A reused buffer keeps its identity, so the peers that
 * mapped it reach it through their existing mapping, and its pages stay
 * allocated: no system call or page fault on either side. Its memory and
 * file descriptor stay with the process until the least recently freed
 * buffers are released to make room, or the limit is lowered. 0 (the
 * default) releases each buffer when it is freed. */
gotree_status_t gotree_mem_set_cache(size_t bytes);

/* The environment's GOTREE_CPU_ALLOCATOR: *min_bytes is the smallest CPU
 * tensor that a framework binding should allocate with
 * gotree_mem_alloc_uninit (0: leave its allocator alone, the default),
 * *cache_bytes what to pass to gotree_mem_set_cache. The torch extension
 * acts on it when a gotree process group is created. "shared" gives
 * 256 KiB and 1 GiB; "shared,min_bytes:1M,cache_bytes:2G" sets both.
 * GOTREE_ERR_INVALID_ARGUMENT (with text on handle 0) for NULL pointers or
 * a malformed environment. */
gotree_status_t gotree_cpu_allocator_config(size_t *min_bytes, size_t *cache_bytes);

/* Creates a unique id whose bootstrap listener lives in this process until
 * the communicator made from it on this process (normally rank 0) is
 * destroyed, or the process exits. */
gotree_status_t gotree_get_unique_id(gotree_unique_id_t *id);

/* Joins communicator `id` as `rank` of `nranks`. Blocks until all ranks
 * joined (or the timeout). On success *comm is a new handle. */
gotree_status_t gotree_comm_init_rank(gotree_comm_t *comm, const gotree_unique_id_t *id,
                                      int rank, int nranks, const gotree_options_t *opts);

/* Rank and size of a communicator. */
gotree_status_t gotree_comm_rank(gotree_comm_t comm, int *rank);
gotree_status_t gotree_comm_size(gotree_comm_t comm, int *nranks);

/* Waits for issued collectives to finish (within the timeout), then releases
 * the communicator. Requests issued on it stay valid until freed. */
gotree_status_t gotree_comm_destroy(gotree_comm_t comm);
/* Fails every pending and future operation at once and releases the
 * communicator's sockets and threads. Peers see GOTREE_ERR_REMOTE. */
gotree_status_t gotree_comm_abort(gotree_comm_t comm);

/* Whether the communicator still works, without blocking (NCCL's
 * ncclCommGetAsyncError): sets *async_status to GOTREE_SUCCESS while it
 * does, or to the status of the failure that aborted it, whose text
 * gotree_error_text(comm) then returns: GOTREE_ERR_TIMEOUT (an operation
 * ran past the timeout), GOTREE_ERR_REMOTE (a peer failed or
 * disconnected), GOTREE_ERR_INVALID_ARGUMENT (the ranks issued different
 * operations), GOTREE_ERR_ABORTED, GOTREE_ERR_SYSTEM or GOTREE_ERR_INTERNAL.
 * Every operation issued after such a failure fails with it. The returned
 * status is that of the query itself (an unknown handle, a NULL pointer). */
gotree_status_t gotree_comm_get_async_error(gotree_comm_t comm, gotree_status_t *async_status);

/* The communicator's flight record: its last operations (up to
 * GOTREE_TRACE_BUFFER_SIZE, default 2000) — each collective's description
 * and sequence number, each send and receive, the algorithm, when it was
 * issued, started and ended, and how — as JSON (the format `gotree trace`
 * reads; GOTREE_TRACE_DUMP_FILE writes the same on a failure). Copies it
 * into buf, NUL-terminated and truncated to buflen, and sets *len to its
 * full length: call again with a larger buffer while *len >= buflen (the
 * record may have grown in between). buf may be NULL when buflen is 0.
 * Never blocks; works on a failed communicator too. */
gotree_status_t gotree_comm_flight_record(gotree_comm_t comm, char *buf, size_t buflen, size_t *len);

/* What the communicator runs and why, as JSON: its ranks and nodes, the
 * links this rank opened for collectives (peer, channel, shm or tcp),
 * every channel's ring (from rank 0) and tree (each rank's parent; this
 * rank's parent, children and role: root, internal or leaf), and for
 * allreduce, allgather, reducescatter, broadcast and reduce at each of the
 * nsizes sizes (bytes as nccl-tests counts them; allgather and
 * reducescatter sizes rounded down to a multiple of the ranks) the
 * algorithm, protocol and channels that run, the cost model's time of
 * every algorithm allowed there, and what decided: "model", "autotuning"
 * (with the measured times) or "exploring" (autotuning measures it now);
 * "device_choices" says the same for buffers on a CUDA device (the ring and
 * tree kernels, the model with NCCL's constants for GPU links).
 * sizes NULL with nsizes 0: 4 B to 256 MiB by factors of 4. A negative
 * size is GOTREE_ERR_INVALID_ARGUMENT. buf, buflen and *len as for
 * gotree_comm_flight_record. Issues nothing and never blocks on peers. */
gotree_status_t gotree_comm_describe(gotree_comm_t comm, const int64_t *sizes, size_t nsizes, char *buf, size_t buflen,
                                     size_t *len);

/* Writes the flight record to GOTREE_TRACE_DUMP_FILE when that is set (a
 * no-op otherwise), as the library does itself when the communicator
 * fails. reason (may be NULL) stands as the record's failure while the
 * communicator has none: call it before gotree_comm_abort when the caller
 * gives up on an operation by its own deadline. */
gotree_status_t gotree_comm_dump_flight_record(gotree_comm_t comm, const char *reason);

/* will_wait = 1 announces that the caller waits for the next collective it
 * issues on comm (including all-to-all, gather, scatter; not send/recv) at
 * once, with gotree_request_wait(request, -1) on the issuing thread. When
 * nothing is queued before it, the operation then runs on that waiting
 * thread and no library thread is woken: two thread hand-offs fewer per
 * call, which is most of a small blocking collective's cost. The next issue
 * consumes the announcement; will_wait = 0 withdraws it (after an issue
 * that failed). An operation whose caller breaks the promise starts when it
 * is tested, waited for with a time limit, or followed by another one. */
gotree_status_t gotree_comm_will_wait(gotree_comm_t comm, int will_wait);

/*
 * Collectives. All take the same arguments; each documents which it uses.
 *   sendbuf, recvbuf: may be equal (in place). NULL is allowed only when the
 *                     byte count involved is 0.
 *   count:   elements (see each function for whose).
 *   dtype, op: element type and reduction.
 *   root:    a rank in [0, nranks) where the collective has one.
 *   device:  GOTREE_DEVICE_CPU for host memory; a CUDA ordinal otherwise.
 *   stream:  a CUDA stream for device buffers; ignored for the CPU.
 *   request: receives a new request handle.
 *
 * Device buffers (device >= 0; allreduce, broadcast, reduce, allgather and
 * reduce_scatter): like NCCL, the call queues the work on `stream` and
 * returns; the request it hands back is already complete, and the result
 * is there when the stream gets there (record an event after the call).
 * The buffers must stay valid until then. The first call of each plan also
 * connects this rank with its peers (CUDA IPC within a node, host-staged
 * TCP between nodes), so every rank must issue the same device calls in
 * the same order. In place: sendbuf = recvbuf, or NCCL's layout (allgather
 * sendbuf = recvbuf + rank*count elements, reduce_scatter recvbuf = sendbuf
 * + rank*count).
 * A failure found after a call returned (a peer that never launched, a
 * lost connection) is returned by the next device call.
 *
 * alltoall, alltoallv, gather and scatter on device buffers run through
 * pinned host memory: the call copies this rank's send buffer to the host
 * after the work queued on `stream`, runs the CPU collective, copies the
 * result back on `stream` and waits for it, so it returns (blocking the
 * calling thread) with the result in place. Correct, not fast: every byte
 * crosses PCIe twice. They cannot be captured in a CUDA graph.
 * Without an NVIDIA driver, and for the host-staged collectives, send and
 * receive on a capturing stream, the status is GOTREE_ERR_NOT_SUPPORTED
 * and gotree_error_text says why.
 */

/* recvbuf[i] = op over ranks of sendbuf[i], for i < count. */
gotree_status_t gotree_allreduce(gotree_comm_t comm, const void *sendbuf, void *recvbuf,
                                 uint64_t count, gotree_dtype_t dtype, gotree_op_t op,
                                 int root, int device, void *stream,
                                 gotree_request_t *request);

/* recvbuf = root's sendbuf, count elements. sendbuf is read on root only;
 * op is ignored. */
gotree_status_t gotree_broadcast(gotree_comm_t comm, const void *sendbuf, void *recvbuf,
                                 uint64_t count, gotree_dtype_t dtype, gotree_op_t op,
                                 int root, int device, void *stream,
                                 gotree_request_t *request);

/* recvbuf[r*count .. (r+1)*count) = rank r's sendbuf (count elements per
 * rank; recvbuf holds nranks*count). op and root are ignored. In place:
 * sendbuf == recvbuf + rank*count elements (NCCL's form). */
gotree_status_t gotree_allgather(gotree_comm_t comm, const void *sendbuf, void *recvbuf,
                                 uint64_t count, gotree_dtype_t dtype, gotree_op_t op,
                                 int root, int device, void *stream,
                                 gotree_request_t *request);

/* recvbuf on root = op over ranks of sendbuf (count elements); recvbuf is
 * not touched elsewhere and may be NULL there. */
gotree_status_t gotree_reduce(gotree_comm_t comm, const void *sendbuf, void *recvbuf,
                              uint64_t count, gotree_dtype_t dtype, gotree_op_t op, int root,
                              int device, void *stream, gotree_request_t *request);

/* sendbuf holds nranks*count elements; rank r's recvbuf (count elements)
 * receives block r of the reduction. root is ignored. */
gotree_status_t gotree_reduce_scatter(gotree_comm_t comm, const void *sendbuf, void *recvbuf,
                                      uint64_t count, gotree_dtype_t dtype, gotree_op_t op,
                                      int root, int device, void *stream,
                                      gotree_request_t *request);

/* Equal-split all-to-all: sendbuf and recvbuf hold nranks*count elements;
 * block p of sendbuf goes to rank p, block p of recvbuf comes from rank p.
 * op and root are ignored. */
gotree_status_t gotree_alltoall(gotree_comm_t comm, const void *sendbuf, void *recvbuf,
                                uint64_t count, gotree_dtype_t dtype, gotree_op_t op, int root,
                                int device, void *stream, gotree_request_t *request);

/* Uneven all-to-all: sendcounts[p] elements at sendbuf + sdispls[p]
 * (elements) go to rank p; recvcounts[p] elements from rank p land at
 * recvbuf + rdispls[p]. Each array has nranks entries and is read before
 * the call returns. Rank p's sendcounts[r] must equal rank r's
 * recvcounts[p]; a mismatch fails the request on the receiver. */
gotree_status_t gotree_alltoallv(gotree_comm_t comm, const void *sendbuf,
                                 const uint64_t *sendcounts, const uint64_t *sdispls,
                                 void *recvbuf, const uint64_t *recvcounts,
                                 const uint64_t *rdispls, gotree_dtype_t dtype, int device,
                                 void *stream, gotree_request_t *request);

/* Root's recvbuf (nranks*count elements) receives every rank's sendbuf in
 * rank order; recvbuf may be NULL elsewhere. op is ignored. */
gotree_status_t gotree_gather(gotree_comm_t comm, const void *sendbuf, void *recvbuf,
                              uint64_t count, gotree_dtype_t dtype, gotree_op_t op, int root,
                              int device, void *stream, gotree_request_t *request);

/* Block r (count elements) of root's sendbuf (nranks*count elements) goes
 * to rank r's recvbuf; sendbuf may be NULL elsewhere. op is ignored. */
gotree_status_t gotree_scatter(gotree_comm_t comm, const void *sendbuf, void *recvbuf,
                               uint64_t count, gotree_dtype_t dtype, gotree_op_t op, int root,
                               int device, void *stream, gotree_request_t *request);

/* Point-to-point. Sends to one peer complete in issue order, and so do
 * receives from one peer; sends and receives progress independently of
 * each other and of collectives (a rank may post a large send and a
 * receive to the same peer that does the same). The receive's count and
 * dtype must match the send's.
 *
 * gotree_recv with peer GOTREE_ANY_SOURCE takes the next message of
 * whichever rank's send is ready first (the one that rank's next receive
 * would have matched); gotree_request_source then names that rank. It
 * starts after every receive issued before it finished, and receives
 * issued after it wait for it.
 *
 * Device buffers (device >= 0) go through host memory. gotree_send copies
 * the buffer to the host after the work queued on `stream` (waiting for
 * the stream) and returns; its request completes when the message has
 * left, and the device buffer is free for reuse at once. gotree_recv
 * blocks the calling thread until the message has arrived and been copied
 * to the device on `stream` (waited for), and returns a complete request.
 * So a rank issues its sends before a receive from a peer that itself
 * receives before it sends; a blocked receive ends at the communicator's
 * timeout. Neither can be captured in a CUDA graph. */
gotree_status_t gotree_send(gotree_comm_t comm, const void *buf, uint64_t count,
                            gotree_dtype_t dtype, int peer, int device, void *stream,
                            gotree_request_t *request);
gotree_status_t gotree_recv(gotree_comm_t comm, void *buf, uint64_t count, gotree_dtype_t dtype,
                            int peer, int device, void *stream, gotree_request_t *request);

/* Completes on a rank once every rank has entered the barrier. */
gotree_status_t gotree_barrier(gotree_comm_t comm, gotree_request_t *request);

/* *done = 1 when the request finished (successfully or not), else 0.
 * Returns the request's error status once finished, else GOTREE_SUCCESS. */
gotree_status_t gotree_request_test(gotree_request_t request, int *done);

/* Blocks until the request finishes or timeout_ms passes (< 0: the
 * communicator's timeout plus 2 s, so that the operation's own deadline,
 * which aborts the communicator with a precise error, fires first). With
 * timeout_ms < 0, a collective that has not started and whose predecessor
 * finished runs on the calling thread (no library thread is woken for it).
 * Returns the request's status, or GOTREE_ERR_TIMEOUT when the wait ran
 * out (the request stays valid and keeps running; gotree_request_test tells
 * the two apart). */
gotree_status_t gotree_request_wait(gotree_request_t request, int64_t timeout_ms);

/* *source = the rank a finished receive from GOTREE_ANY_SOURCE took its
 * message from; -1 for any other request, or one not (successfully)
 * finished. */
gotree_status_t gotree_request_source(gotree_request_t request, int *source);

/* Releases a request handle. Freeing an unfinished request waits for it
 * (within the communicator's timeout) first. */
gotree_status_t gotree_request_free(gotree_request_t request);

#ifdef __cplusplus
}
#endif

#endif /* GOTREE_H */
