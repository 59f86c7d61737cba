// The public C entry points of libgotree.so. Each checks that the process
// was not forked since the library loaded (the Go runtime does not survive
// fork, and entering it in a child hangs) and then calls the Go
// implementation (gotreego_*, exported from main.go).
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "gotree.h"
#include "_cgo_export.h"

// Set in the child of every fork() (pthread_atfork), so that the check on
// each call costs a load, not a getpid system call (about 0.2 µs here, and
// torch makes several calls per collective).
static volatile int gotree_in_child;

static void gotree_mark_child(void) { gotree_in_child = 1; }

__attribute__((constructor)) static void gotree_watch_fork(void) {
  pthread_atfork(NULL, NULL, gotree_mark_child);
}

static const char fork_msg[] =
    "gotree: this process is a fork() child of the process that loaded gotree; "
    "the Go runtime inside gotree does not survive fork, so no gotree call works here "
    "(use the spawn or forkserver start method for worker processes that need gotree)";

static int forked(void) { return gotree_in_child; }

#define GUARD() \
  do {                                 \
    if (forked()) return GOTREE_ERR_INVALID_ARGUMENT; \
  } while (0)

int gotree_abi_version(void) { return GOTREE_ABI_VERSION; }

static size_t copy_text(const char *s, size_t n, char *buf, size_t buflen) {
  if (buf != NULL && buflen > 0) {
    size_t k = n < buflen - 1 ? n : buflen - 1;
    memcpy(buf, s, k);
    buf[k] = '\0';
  }
  return n;
}

size_t gotree_version(char *buf, size_t buflen) {
  if (forked()) return copy_text("gotree (forked child)", 21, buf, buflen);
  return (size_t)gotreego_version(buf, (int64_t)buflen);
}

gotree_status_t gotree_probe_handoff(size_t bytes, int rounds, double *us) {
  GUARD();
  // out of range either way: Go refuses it and says why
  if (bytes > (size_t)INT64_MAX) bytes = (size_t)INT64_MAX;
  return (gotree_status_t)gotreego_probe_handoff((int64_t)bytes, rounds, us);
}

gotree_status_t gotree_mem_alloc(size_t bytes, void **ptr) {
  GUARD();
  if (bytes > (size_t)INT64_MAX) bytes = (size_t)INT64_MAX;  // Go refuses it and says why
  return (gotree_status_t)gotreego_mem_alloc((int64_t)bytes, 1, ptr);
}

gotree_status_t gotree_mem_alloc_uninit(size_t bytes, void **ptr) {
  GUARD();
  if (bytes > (size_t)INT64_MAX) bytes = (size_t)INT64_MAX;
  return (gotree_status_t)gotreego_mem_alloc((int64_t)bytes, 0, ptr);
}

gotree_status_t gotree_mem_set_cache(size_t bytes) {
  GUARD();
  if (bytes > (size_t)INT64_MAX) bytes = (size_t)INT64_MAX;
  return (gotree_status_t)gotreego_mem_set_cache((int64_t)bytes);
}

gotree_status_t gotree_cpu_allocator_config(size_t *min_bytes, size_t *cache_bytes) {
  GUARD();
  int64_t lo = 0, cache = 0;
  gotree_status_t st = (gotree_status_t)gotreego_cpu_allocator_config(min_bytes ? &lo : NULL, cache_bytes ? &cache : NULL);
  if (st == GOTREE_SUCCESS) {
    *min_bytes = (size_t)lo;
    *cache_bytes = (size_t)cache;
  }
  return st;
}

gotree_status_t gotree_mem_free(void *ptr) {
  GUARD();
  return (gotree_status_t)gotreego_mem_free(ptr);
}

const char *gotree_status_string(gotree_status_t s) {
  switch (s) {
    case GOTREE_SUCCESS: return "success";
    case GOTREE_ERR_INVALID_ARGUMENT: return "invalid argument";
    case GOTREE_ERR_INVALID_HANDLE: return "invalid handle";
    case GOTREE_ERR_TIMEOUT: return "timed out";
    case GOTREE_ERR_ABORTED: return "communicator aborted";
    case GOTREE_ERR_REMOTE: return "peer failure";
    case GOTREE_ERR_NOT_SUPPORTED: return "not supported";
    case GOTREE_ERR_SYSTEM: return "system error";
    case GOTREE_ERR_INTERNAL: return "internal error";
    case GOTREE_IN_PROGRESS: return "in progress";
  }
  return "unknown status";
}

size_t gotree_error_text(int64_t handle, char *buf, size_t buflen) {
  if (forked()) return copy_text(fork_msg, sizeof(fork_msg) - 1, buf, buflen);
  return (size_t)gotreego_error_text(handle, buf, (int64_t)buflen);
}

gotree_status_t gotree_get_unique_id(gotree_unique_id_t *id) {
  GUARD();
  return (gotree_status_t)gotreego_get_unique_id((void *)id);
}

gotree_status_t gotree_comm_init_rank(gotree_comm_t *comm, const gotree_unique_id_t *id, int rank,
                                      int nranks, const gotree_options_t *opts) {
  GUARD();
  int64_t timeout_ms = 0;
  const char *host_id = NULL;
  if (opts != NULL) {
    if (opts->struct_size >= offsetof(gotree_options_t, timeout_ms) + sizeof(opts->timeout_ms))
      timeout_ms = opts->timeout_ms;
    if (opts->struct_size >= offsetof(gotree_options_t, host_id) + sizeof(opts->host_id))
      host_id = opts->host_id;
  }
  return (gotree_status_t)gotreego_comm_init_rank((int64_t *)comm, (void *)id, rank, nranks,
                                                  opts == NULL ? -1 : (int)opts->struct_size,
                                                  timeout_ms, (char *)host_id);
}

gotree_status_t gotree_comm_rank(gotree_comm_t comm, int *rank) {
  GUARD();
  return (gotree_status_t)gotreego_comm_info(comm, rank, NULL);
}

gotree_status_t gotree_comm_size(gotree_comm_t comm, int *nranks) {
  GUARD();
  return (gotree_status_t)gotreego_comm_info(comm, NULL, nranks);
}

gotree_status_t gotree_comm_destroy(gotree_comm_t comm) {
  GUARD();
  return (gotree_status_t)gotreego_comm_destroy(comm, 0);
}

gotree_status_t gotree_comm_abort(gotree_comm_t comm) {
  GUARD();
  return (gotree_status_t)gotreego_comm_destroy(comm, 1);
}

gotree_status_t gotree_comm_get_async_error(gotree_comm_t comm, gotree_status_t *async_status) {
  GUARD();
  int st = 0;
  gotree_status_t rc = (gotree_status_t)gotreego_comm_async_error(comm, async_status ? &st : NULL);
  if (rc == GOTREE_SUCCESS) *async_status = (gotree_status_t)st;
  return rc;
}

gotree_status_t gotree_comm_flight_record(gotree_comm_t comm, char *buf, size_t buflen, size_t *len) {
  GUARD();
  int64_t n = 0;
  gotree_status_t rc = (gotree_status_t)gotreego_comm_flight_record(comm, buf, (int64_t)buflen, len ? &n : NULL);
  if (rc == GOTREE_SUCCESS) *len = (size_t)n;
  return rc;
}

gotree_status_t gotree_comm_describe(gotree_comm_t comm, const int64_t *sizes, size_t nsizes, char *buf, size_t buflen,
                                     size_t *len) {
  GUARD();
  int64_t n = 0;
  gotree_status_t rc = (gotree_status_t)gotreego_comm_describe(comm, (int64_t *)sizes, (int64_t)nsizes, buf, (int64_t)buflen,
                                                               len ? &n : NULL);
  if (rc == GOTREE_SUCCESS) *len = (size_t)n;
  return rc;
}

gotree_status_t gotree_comm_dump_flight_record(gotree_comm_t comm, const char *reason) {
  GUARD();
  return (gotree_status_t)gotreego_comm_dump_flight_record(comm, (char *)reason);
}

gotree_status_t gotree_comm_will_wait(gotree_comm_t comm, int will_wait) {
  GUARD();
  return (gotree_status_t)gotreego_comm_will_wait(comm, will_wait);
}

enum {
  COLL_ALLREDUCE = 0,
  COLL_BROADCAST = 1,
  COLL_ALLGATHER = 2,
  COLL_BARRIER = 3,
  COLL_REDUCE = 4,
  COLL_REDUCE_SCATTER = 5,
  COLL_ALLTOALL = 6,
  COLL_GATHER = 7,
  COLL_SCATTER = 8
};

#define COLLECTIVE(name, kind)                                                                  \
  gotree_status_t name(gotree_comm_t comm, const void *sendbuf, void *recvbuf, uint64_t count,  \
                       gotree_dtype_t dtype, gotree_op_t op, int root, int device, void *stream, \
                       gotree_request_t *request) {                                             \
    GUARD();                                                                                    \
    return (gotree_status_t)gotreego_collective(kind, comm, (void *)sendbuf, recvbuf, count,     \
                                                (int)dtype, (int)op, root, device, stream,      \
                                                (int64_t *)request);                            \
  }

COLLECTIVE(gotree_allreduce, COLL_ALLREDUCE)
COLLECTIVE(gotree_broadcast, COLL_BROADCAST)
COLLECTIVE(gotree_allgather, COLL_ALLGATHER)
COLLECTIVE(gotree_reduce, COLL_REDUCE)
COLLECTIVE(gotree_reduce_scatter, COLL_REDUCE_SCATTER)
COLLECTIVE(gotree_alltoall, COLL_ALLTOALL)
COLLECTIVE(gotree_gather, COLL_GATHER)
COLLECTIVE(gotree_scatter, COLL_SCATTER)

gotree_status_t gotree_alltoallv(gotree_comm_t comm, const void *sendbuf,
                                 const uint64_t *sendcounts, const uint64_t *sdispls,
                                 void *recvbuf, const uint64_t *recvcounts,
                                 const uint64_t *rdispls, gotree_dtype_t dtype, int device,
                                 void *stream, gotree_request_t *request) {
  GUARD();
  return (gotree_status_t)gotreego_alltoallv(comm, (void *)sendbuf, (uint64_t *)sendcounts,
                                             (uint64_t *)sdispls, recvbuf, (uint64_t *)recvcounts,
                                             (uint64_t *)rdispls, (int)dtype, device, stream,
                                             (int64_t *)request);
}

gotree_status_t gotree_send(gotree_comm_t comm, const void *buf, uint64_t count,
                            gotree_dtype_t dtype, int peer, int device, void *stream,
                            gotree_request_t *request) {
  GUARD();
  return (gotree_status_t)gotreego_p2p(1, comm, (void *)buf, count, (int)dtype, peer, device,
                                       stream, (int64_t *)request);
}

gotree_status_t gotree_recv(gotree_comm_t comm, void *buf, uint64_t count, gotree_dtype_t dtype,
                            int peer, int device, void *stream, gotree_request_t *request) {
  GUARD();
  return (gotree_status_t)gotreego_p2p(0, comm, buf, count, (int)dtype, peer, device, stream,
                                       (int64_t *)request);
}

gotree_status_t gotree_barrier(gotree_comm_t comm, gotree_request_t *request) {
  GUARD();
  return (gotree_status_t)gotreego_collective(COLL_BARRIER, comm, NULL, NULL, 0, 0, 0, 0,
                                              GOTREE_DEVICE_CPU, NULL, (int64_t *)request);
}

gotree_status_t gotree_request_test(gotree_request_t request, int *done) {
  GUARD();
  return (gotree_status_t)gotreego_request_test(request, done);
}

gotree_status_t gotree_request_source(gotree_request_t request, int *source) {
  GUARD();
  return (gotree_status_t)gotreego_request_source(request, source);
}

gotree_status_t gotree_request_wait(gotree_request_t request, int64_t timeout_ms) {
  GUARD();
  return (gotree_status_t)gotreego_request_wait(request, timeout_ms);
}

gotree_status_t gotree_request_free(gotree_request_t request) {
  GUARD();
  return (gotree_status_t)gotreego_request_free(request);
}
