/* abi_test: drives libgotree.so through capi/gotree.h with several processes
 * and no torch. Rank 0 makes the unique id and spawns ranks 1..n-1 as new
 * processes (exec, never a bare fork: the Go runtime does not survive
 * fork). Every rank checks every result against values computed here.
 *
 *   abi_test --nranks N
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gotree.h"

extern char **environ;

static int rank = 0, nranks = 1, failures = 0, checks = 0;

#define CHECK(cond, ...)                                               \
  do {                                                                 \
    checks++;                                                          \
    if (!(cond)) {                                                     \
      failures++;                                                      \
      fprintf(stderr, "abi_test rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                    \
      fprintf(stderr, "\n");                                           \
    }                                                                  \
  } while (0)

static const char *errtext(int64_t h) {
  static char buf[4096];
  gotree_error_text(h, buf, sizeof buf);
  return buf;
}

#define OK(call, h)                                                                  \
  do {                                                                               \
    gotree_status_t st_ = (call);                                                    \
    CHECK(st_ == GOTREE_SUCCESS, "%s -> %s: %s", #call, gotree_status_string(st_), errtext(h)); \
  } while (0)

static gotree_status_t run(gotree_request_t req) {
  gotree_status_t st = gotree_request_wait(req, 60000);
  gotree_request_free(req);
  return st;
}

/* Value rank r contributes at element i: small, exact in every dtype. */
static int64_t val(int r, uint64_t i) { return (int64_t)((i * 7 + (uint64_t)r * 13) % 97) - 40; }

/* Buffers of test_allreduce: malloc's, or shared (gotree_mem_alloc). */
static int shm_buffers = 0;

static void *alloc(size_t n) {
  if (!shm_buffers) return malloc(n);
  void *p = NULL;
  OK(gotree_mem_alloc(n, &p), 0);
  return p;
}

static void release(void *p) {
  if (!shm_buffers) free(p);
  else OK(gotree_mem_free(p), 0);
}

static void test_allreduce(gotree_comm_t comm, uint64_t count, int inplace) {
  int64_t *send = alloc((count + 1) * sizeof *send), *recv = alloc((count + 1) * sizeof *recv);
  double *ds = alloc((count + 1) * sizeof *ds), *dr = alloc((count + 1) * sizeof *dr);
  for (uint64_t i = 0; i < count; i++) {
    send[i] = val(rank, i);
    recv[i] = -999999;
    ds[i] = (double)val(rank, i) * 0.5;
    dr[i] = NAN;
  }
  gotree_request_t req = 0;
  /* int64 SUM, announced as waited for at once (runs on this thread) */
  OK(gotree_comm_will_wait(comm, 1), comm);
  OK(gotree_allreduce(comm, send, inplace ? send : recv, count, GOTREE_INT64, GOTREE_SUM, 0,
                      GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(gotree_request_wait(req, -1), req);
  gotree_request_free(req);
  int64_t *res = inplace ? send : recv;
  int bad = 0;
  for (uint64_t i = 0; i < count; i++) {
    int64_t want = 0;
    for (int r = 0; r < nranks; r++) want += val(r, i);
    if (res[i] != want && bad++ < 3)
      CHECK(0, "int64 sum count %llu inplace %d: element %llu = %lld, want %lld",
            (unsigned long long)count, inplace, (unsigned long long)i, (long long)res[i], (long long)want);
  }
  CHECK(bad == 0, "int64 sum count %llu: %d wrong elements", (unsigned long long)count, bad);
  /* float64 MAX */
  OK(gotree_allreduce(comm, ds, inplace ? ds : dr, count, GOTREE_FLOAT64, GOTREE_MAX, 0,
                      GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  double *dres = inplace ? ds : dr;
  bad = 0;
  for (uint64_t i = 0; i < count; i++) {
    double want = -1e300;
    for (int r = 0; r < nranks; r++) want = fmax(want, val(r, i) * 0.5);
    if (dres[i] != want) bad++;
  }
  CHECK(bad == 0, "float64 max count %llu inplace %d: %d wrong elements", (unsigned long long)count, inplace, bad);
  /* uint32 MIN: the negative values are the largest unsigned ones */
  uint32_t *us = alloc((count + 1) * sizeof *us), *ur = alloc((count + 1) * sizeof *ur);
  for (uint64_t i = 0; i < count; i++) us[i] = (uint32_t)val(rank, i);
  OK(gotree_allreduce(comm, us, inplace ? us : ur, count, GOTREE_UINT32, GOTREE_MIN, 0,
                      GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  uint32_t *ures = inplace ? us : ur;
  bad = 0;
  for (uint64_t i = 0; i < count; i++) {
    uint32_t want = UINT32_MAX;
    for (int r = 0; r < nranks; r++) want = (uint32_t)val(r, i) < want ? (uint32_t)val(r, i) : want;
    if (ures[i] != want) bad++;
  }
  CHECK(bad == 0, "uint32 min count %llu inplace %d: %d wrong elements", (unsigned long long)count, inplace, bad);
  /* float8_e4m3fn SUM of 1.0 (0x38) from every rank: 1, 2, 3, 4 are 0x38, 0x40, 0x44, 0x48 */
  static const unsigned char f8[] = {0, 0x38, 0x40, 0x44, 0x48};
  unsigned char *fs = alloc(count + 1), *fr = alloc(count + 1);
  memset(fs, 0x38, count + 1);
  OK(gotree_allreduce(comm, fs, inplace ? fs : fr, count, GOTREE_FLOAT8_E4M3, GOTREE_SUM, 0,
                      GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  unsigned char *fres = inplace ? fs : fr;
  bad = 0;
  for (uint64_t i = 0; i < count && nranks <= 4; i++) bad += fres[i] != f8[nranks];
  CHECK(bad == 0, "float8_e4m3fn sum count %llu inplace %d: %d wrong elements", (unsigned long long)count, inplace, bad);
  void *bufs[] = {send, recv, ds, dr, us, ur, fs, fr};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) release(bufs[i]);
}

/* Shared buffers: the argument checks, then test_allreduce on them. Under
 * GOTREE_ALGO=allreduce:direct (make test-abi) every rank maps its peers'
 * buffers, which describe counts. */
static void test_shared_buffers(gotree_comm_t comm) {
  void *p = NULL;
  gotree_status_t st = gotree_mem_alloc(0, &p);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(0), "not 0"), "mem_alloc 0: %s / %s", gotree_status_string(st), errtext(0));
  st = gotree_mem_alloc(16, NULL);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(0), "ptr is NULL"), "mem_alloc NULL: %s / %s", gotree_status_string(st), errtext(0));
  st = gotree_mem_free(NULL);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(0), "ptr is NULL"), "mem_free NULL: %s / %s", gotree_status_string(st), errtext(0));
  int on_stack = 0;
  st = gotree_mem_free(&on_stack);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(0), "not the start of"), "mem_free of other memory: %s / %s", gotree_status_string(st), errtext(0));
  OK(gotree_mem_alloc(4097, &p), 0);
  CHECK(p != NULL && ((uintptr_t)p & 4095) == 0, "mem_alloc: %p is not page-aligned", p);
  if (p) {
    CHECK(((unsigned char *)p)[4096] == 0, "mem_alloc: not zeroed");
    OK(gotree_mem_free(p), 0);
    CHECK(gotree_mem_free(p) == GOTREE_ERR_INVALID_ARGUMENT, "mem_free twice accepted");
  }
  /* The cache: a freed buffer comes back (same address) for a request it
   * holds with at most a quarter to spare, uninitialised or zeroed. */
  st = gotree_mem_alloc_uninit(16, NULL);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(0), "gotree_mem_alloc_uninit: ptr is NULL"), "mem_alloc_uninit NULL: %s / %s", gotree_status_string(st), errtext(0));
  OK(gotree_mem_set_cache(1 << 20), 0);
  void *q = NULL, *r = NULL;
  OK(gotree_mem_alloc_uninit(100000, &q), 0);
  if (q) {
    memset(q, 0x5a, 100000);
    OK(gotree_mem_free(q), 0);
    OK(gotree_mem_alloc_uninit(90001, &r), 0);
    CHECK(r == q && ((unsigned char *)r)[90000] == 0x5a, "mem_alloc_uninit: %p is not the cached %p (or its bytes changed)", r, q);
    OK(gotree_mem_free(r), 0);
    OK(gotree_mem_alloc(99999, &r), 0);
    CHECK(r == q && ((unsigned char *)r)[99998] == 0, "mem_alloc from the cache: %p, %p, not zeroed?", r, q);
    OK(gotree_mem_free(r), 0);
  }
  OK(gotree_mem_set_cache(0), 0);
  /* GOTREE_CPU_ALLOCATOR as the environment gave it when the library
   * loaded (Go reads its own copy: a later setenv does not reach it):
   * unset, or make test-abi's "shared,min_bytes:1M". */
  size_t lo = 1, cache = 1;
  const char *ca = getenv("GOTREE_CPU_ALLOCATOR");
  OK(gotree_cpu_allocator_config(&lo, &cache), 0);
  if (ca == NULL) CHECK(lo == 0 && cache == 0, "cpu_allocator_config unset: %zu %zu", lo, cache);
  else if (strcmp(ca, "shared,min_bytes:1M") == 0) CHECK(lo == (1u << 20) && cache == (1u << 30), "cpu_allocator_config %s: %zu %zu", ca, lo, cache);
  st = gotree_cpu_allocator_config(NULL, &cache);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(0), "NULL"), "cpu_allocator_config NULL: %s / %s", gotree_status_string(st), errtext(0));
  shm_buffers = 1;
  uint64_t counts[] = {1, 1000003, (1u << 20) + 3};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
    for (int inplace = 0; inplace < 2; inplace++) test_allreduce(comm, counts[k], inplace);
  shm_buffers = 0;
  const char *algo = getenv("GOTREE_ALGO");
  if (nranks > 1 && algo && strstr(algo, "allreduce:direct")) {
    int64_t sizes[] = {8};
    size_t len = 0;
    char d[65536];
    OK(gotree_comm_describe(comm, sizes, 1, d, sizeof d, &len), comm);
    const char *m = strstr(d, "\"peer_buffers_mapped\":");
    long mapped = m ? strtol(m + 22, NULL, 10) : -1;
    CHECK(m && mapped >= (long)(nranks - 1) && strstr(d, "\"peer_buffers_copied\":0"), "direct allreduce on shared buffers mapped none: %.300s", m ? m : d);
  }
}

static void test_broadcast_allgather(gotree_comm_t comm, uint64_t count) {
  int root = nranks - 1;
  int32_t *b = malloc((count + 1) * 4), *g = malloc((count * nranks + 1) * 4), *s = malloc((count + 1) * 4);
  for (uint64_t i = 0; i < count; i++) {
    b[i] = rank == root ? (int32_t)val(root, i) : -1;
    s[i] = (int32_t)val(rank, i);
  }
  for (uint64_t i = 0; i < count * nranks; i++) g[i] = -5;
  gotree_request_t req;
  OK(gotree_broadcast(comm, b, b, count, GOTREE_INT32, GOTREE_SUM, root, GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  int bad = 0;
  for (uint64_t i = 0; i < count; i++) bad += b[i] != (int32_t)val(root, i);
  CHECK(bad == 0, "broadcast count %llu: %d wrong", (unsigned long long)count, bad);
  OK(gotree_allgather(comm, s, g, count, GOTREE_INT32, GOTREE_SUM, 0, GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  bad = 0;
  for (int r = 0; r < nranks; r++)
    for (uint64_t i = 0; i < count; i++) bad += g[r * count + i] != (int32_t)val(r, i);
  CHECK(bad == 0, "allgather count %llu: %d wrong", (unsigned long long)count, bad);
  free(b); free(g); free(s);
}

/* reduce, reduce_scatter, alltoall(v), gather, scatter, send/recv on int64. */
static void test_more(gotree_comm_t comm, uint64_t count) {
  int n = nranks, root = n / 2;
  uint64_t all = count * (uint64_t)n;
  int64_t *a = malloc((all + 1) * 8), *b = malloc((all + 1) * 8);
  gotree_request_t req;
  int bad = 0;
  for (uint64_t i = 0; i < all; i++) a[i] = val(rank, i), b[i] = -7;
  OK(gotree_reduce(comm, a, rank == root ? b : NULL, count, GOTREE_INT64, GOTREE_SUM, root, GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  if (rank == root)
    for (uint64_t i = 0; i < count; i++) {
      int64_t want = 0;
      for (int r = 0; r < n; r++) want += val(r, i);
      bad += b[i] != want;
    }
  CHECK(bad == 0, "reduce count %llu: %d wrong", (unsigned long long)count, bad);
  OK(gotree_reduce_scatter(comm, a, b, count, GOTREE_INT64, GOTREE_MIN, 0, GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  bad = 0;
  for (uint64_t i = 0; i < count; i++) {
    int64_t want = val(0, rank * count + i);
    for (int r = 1; r < n; r++) want = val(r, rank * count + i) < want ? val(r, rank * count + i) : want;
    bad += b[i] != want;
  }
  CHECK(bad == 0, "reduce_scatter count %llu: %d wrong", (unsigned long long)count, bad);
  OK(gotree_alltoall(comm, a, b, count, GOTREE_INT64, GOTREE_SUM, 0, GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  bad = 0;
  for (int p = 0; p < n; p++)
    for (uint64_t i = 0; i < count; i++) bad += b[p * count + i] != val(p, rank * count + i);
  CHECK(bad == 0, "alltoall count %llu: %d wrong", (unsigned long long)count, bad);
  /* alltoallv: rank r sends min(count, p + r) elements to p, packed. */
  uint64_t sc[64], sd[64], rc[64], rd[64], so = 0, ro = 0;
  for (int p = 0; p < n; p++) {
    sc[p] = (uint64_t)(p + rank) < count ? (uint64_t)(p + rank) : count;
    rc[p] = sc[p];
    sd[p] = so, rd[p] = ro;
    so += sc[p], ro += rc[p];
  }
  for (uint64_t i = 0; i < ro; i++) b[i] = -7;
  OK(gotree_alltoallv(comm, a, sc, sd, b, rc, rd, GOTREE_INT64, GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  bad = 0;
  for (int p = 0; p < n; p++) {
    /* rank p's send displacement for us: sum over q < rank of min(count, q+p) */
    uint64_t off = 0;
    for (int q = 0; q < rank; q++) off += (uint64_t)(q + p) < count ? (uint64_t)(q + p) : count;
    for (uint64_t i = 0; i < rc[p]; i++) bad += b[rd[p] + i] != val(p, off + i);
  }
  CHECK(bad == 0, "alltoallv count %llu: %d wrong", (unsigned long long)count, bad);
  OK(gotree_gather(comm, a, rank == root ? b : NULL, count, GOTREE_INT64, GOTREE_SUM, root, GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  bad = 0;
  if (rank == root)
    for (int p = 0; p < n; p++)
      for (uint64_t i = 0; i < count; i++) bad += b[p * count + i] != val(p, i);
  CHECK(bad == 0, "gather count %llu: %d wrong", (unsigned long long)count, bad);
  OK(gotree_scatter(comm, rank == root ? a : NULL, b, count, GOTREE_INT64, GOTREE_SUM, root, GOTREE_DEVICE_CPU, NULL, &req), comm);
  OK(run(req), req);
  bad = 0;
  for (uint64_t i = 0; i < count; i++) bad += b[i] != val(root, rank * count + i);
  CHECK(bad == 0, "scatter count %llu: %d wrong", (unsigned long long)count, bad);
  if (n > 1) { /* ring exchange: send to next and receive from previous, both posted first */
    gotree_request_t s, r;
    OK(gotree_send(comm, a, count, GOTREE_INT64, (rank + 1) % n, GOTREE_DEVICE_CPU, NULL, &s), comm);
    OK(gotree_recv(comm, b, count, GOTREE_INT64, (rank + n - 1) % n, GOTREE_DEVICE_CPU, NULL, &r), comm);
    OK(run(s), s);
    OK(run(r), r);
    bad = 0;
    for (uint64_t i = 0; i < count; i++) bad += b[i] != val((rank + n - 1) % n, i);
    CHECK(bad == 0, "send/recv count %llu: %d wrong", (unsigned long long)count, bad);
    /* every other rank sends to rank 0, which receives from any source */
    if (count == 0) {
      gotree_status_t st = gotree_recv(comm, b, 0, GOTREE_INT64, GOTREE_ANY_SOURCE, GOTREE_DEVICE_CPU, NULL, &r);
      CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "name its source"), "any-source recv of 0 elements: %s / %s", gotree_status_string(st), errtext(comm));
    } else if (rank != 0) {
      OK(gotree_send(comm, a, count, GOTREE_INT64, 0, GOTREE_DEVICE_CPU, NULL, &s), comm);
      OK(run(s), s);
    } else {
      int seen = 0;
      for (int k = 1; k < n; k++) {
        int src = -2;
        OK(gotree_recv(comm, b, count, GOTREE_INT64, GOTREE_ANY_SOURCE, GOTREE_DEVICE_CPU, NULL, &r), comm);
        OK(gotree_request_wait(r, 60000), r);
        OK(gotree_request_source(r, &src), r);
        gotree_request_free(r);
        CHECK(src >= 1 && src < n && !(seen & (1 << src)), "any-source recv %d: source %d", k, src);
        if (src >= 1 && src < n) {
          seen |= 1 << src;
          bad = 0;
          for (uint64_t i = 0; i < count; i++) bad += b[i] != val(src, i);
          CHECK(bad == 0, "any-source recv count %llu from %d: %d wrong", (unsigned long long)count, src, bad);
        }
      }
    }
  }
  free(a); free(b);
}

static void test_bad_input(gotree_comm_t comm) {
  gotree_request_t req = 0;
  int32_t x[4] = {0};
  gotree_status_t st = gotree_allreduce(comm, NULL, x, 4, GOTREE_INT32, GOTREE_SUM, 0, GOTREE_DEVICE_CPU, NULL, &req);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "sendbuf"), "NULL sendbuf: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_allreduce(comm, x, x, 4, (gotree_dtype_t)77, GOTREE_SUM, 0, GOTREE_DEVICE_CPU, NULL, &req);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "dtype"), "bad dtype: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_allreduce(comm, x, x, 4, GOTREE_FLOAT32, GOTREE_BXOR, 0, GOTREE_DEVICE_CPU, NULL, &req);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "bxor"), "bxor on float: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_broadcast(comm, x, x, 4, GOTREE_INT32, GOTREE_SUM, nranks, GOTREE_DEVICE_CPU, NULL, &req);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "root"), "bad root: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_send(comm, x, 4, GOTREE_INT32, rank, GOTREE_DEVICE_CPU, NULL, &req);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "peer"), "send to self: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_alltoallv(comm, x, NULL, NULL, x, NULL, NULL, GOTREE_INT32, GOTREE_DEVICE_CPU, NULL, &req);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "sendcounts"), "alltoallv NULL counts: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_allreduce(comm, x, x, 4, GOTREE_INT32, GOTREE_SUM, 0, 0, NULL, &req);
  CHECK(st == GOTREE_ERR_NOT_SUPPORTED && strstr(errtext(comm), "NVIDIA driver"), "device 0 without a driver: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_alltoall(comm, x, x, 1, GOTREE_INT32, GOTREE_SUM, 0, 0, NULL, &req);
  CHECK(st == GOTREE_ERR_NOT_SUPPORTED && strstr(errtext(comm), "NVIDIA driver"), "device alltoall (host-staged) without a driver: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_send(comm, x, 1, GOTREE_INT32, (rank + 1) % nranks, 0, NULL, &req);
  CHECK(st == GOTREE_ERR_NOT_SUPPORTED && strstr(errtext(comm), "NVIDIA driver"), "device send (host-staged) without a driver: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_recv(comm, x, 1, GOTREE_INT32, GOTREE_ANY_SOURCE, 0, NULL, &req);
  CHECK(st == GOTREE_ERR_NOT_SUPPORTED && strstr(errtext(comm), "NVIDIA driver"), "device recv (host-staged) without a driver: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_allreduce(comm, x, x, 4, GOTREE_INT32, GOTREE_SUM, 0, GOTREE_DEVICE_CPU, NULL, NULL);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT, "NULL request: %s", gotree_status_string(st));
  st = gotree_request_wait(123456789, 0);
  CHECK(st == GOTREE_ERR_INVALID_HANDLE && strstr(errtext(0), "123456789"), "bad request handle: %s / %s", gotree_status_string(st), errtext(0));
  int r = -1;
  st = gotree_comm_rank(987654321, &r);
  CHECK(st == GOTREE_ERR_INVALID_HANDLE, "bad comm handle: %s", gotree_status_string(st));
  st = gotree_comm_init_rank(NULL, NULL, 0, 1, NULL);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && errtext(0)[0] != 0, "init NULL: %s", gotree_status_string(st));
  // Refused input leaves the communicator working.
  gotree_status_t as = GOTREE_ERR_INTERNAL;
  st = gotree_comm_get_async_error(comm, &as);
  CHECK(st == GOTREE_SUCCESS && as == GOTREE_SUCCESS, "async error after bad input: %s / %s", gotree_status_string(st), gotree_status_string(as));
  st = gotree_comm_get_async_error(comm, NULL);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "async_status"), "async error NULL: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_comm_get_async_error(987654321, &as);
  CHECK(st == GOTREE_ERR_INVALID_HANDLE, "async error of a bad handle: %s", gotree_status_string(st));
}

// gotree_comm_describe: asked for its length, then read whole, at two
// sizes; names this rank, has a ring per channel with every rank in it,
// and a choice for each size of allreduce (the 1000-byte allgather
// rounded down to a multiple of the ranks). Bad arguments are refused.
static void test_describe(gotree_comm_t comm) {
  int64_t sizes[] = {8, 1000};
  size_t len = 0;
  OK(gotree_comm_describe(comm, sizes, 2, NULL, 0, &len), comm);
  CHECK(len > 0, "describe length %zu", len);
  char *d = malloc(len + 1);
  size_t len2 = 0;
  OK(gotree_comm_describe(comm, sizes, 2, d, len + 1, &len2), comm);
  CHECK(len2 == len && strlen(d) == len, "describe read whole: %zu, then %zu, strlen %zu", len, len2, strlen(d));
  char want[96];
  snprintf(want, sizeof want, "\"rank\":%d,\"nranks\":%d,", rank, nranks);
  CHECK(strstr(d, want) != NULL, "describe lacks %s: %.300s", want, d);
  CHECK(strstr(d, "\"coll\":\"allreduce\",\"bytes\":8,") && strstr(d, "\"coll\":\"allreduce\",\"bytes\":1000,"),
        "describe lacks the allreduce choices: %.600s", d);
  snprintf(want, sizeof want, "\"coll\":\"allgather\",\"bytes\":%d,", 1000 - 1000 % nranks);
  CHECK(strstr(d, want) != NULL, "describe lacks %s: %.600s", want, d);
  const char *ring = strstr(d, "\"ring\":[");
  CHECK(ring != NULL, "describe has no ring: %.300s", d);
  if (ring) {
    int commas = 0;
    for (const char *p = ring; *p && *p != ']'; p++) commas += *p == ',';
    CHECK(commas == nranks - 1, "ring of %d ranks: %.80s", commas + 1, ring);
  }
  free(d);
  OK(gotree_comm_describe(comm, NULL, 0, NULL, 0, &len), comm);
  CHECK(len > len2, "describe of the default sizes (%zu bytes) is not longer than of two (%zu)", len, len2);
  int64_t neg = -4;
  gotree_status_t st = gotree_comm_describe(comm, &neg, 1, NULL, 0, &len);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "-4"), "describe of -4 bytes: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_comm_describe(comm, NULL, 3, NULL, 0, &len);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "3 sizes"), "describe NULL sizes: %s / %s", gotree_status_string(st), errtext(comm));
  st = gotree_comm_describe(comm, sizes, 2, NULL, 0, NULL);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "len is NULL"), "describe NULL len: %s", gotree_status_string(st));
}

// Ranks that issue different counts all fail, and the communicator then
// reports that failure (the rank that saw the disagreement as invalid
// argument, the ones it told as a peer's failure), with its text.
static void test_async_error_after_mismatch(gotree_comm_t comm) {
  int64_t x[5] = {0};
  gotree_request_t req = 0;
  OK(gotree_allreduce(comm, x, x, rank == 0 ? 3 : 5, GOTREE_INT64, GOTREE_SUM, 0, GOTREE_DEVICE_CPU, NULL, &req), comm);
  gotree_status_t st = gotree_request_wait(req, 60000);
  CHECK(st == GOTREE_ERR_INVALID_ARGUMENT || st == GOTREE_ERR_REMOTE, "mismatched allreduce: %s / %s", gotree_status_string(st), errtext(req));
  gotree_request_free(req);
  gotree_status_t as = GOTREE_SUCCESS;
  OK(gotree_comm_get_async_error(comm, &as), comm);
  CHECK((as == GOTREE_ERR_INVALID_ARGUMENT || as == GOTREE_ERR_REMOTE) && strstr(errtext(comm), "allreduce #"),
        "async error after a mismatch: %s / %s", gotree_status_string(as), errtext(comm));
  // The flight record of the failed communicator: asked for its length
  // first, then read whole; the mismatched allreduce is in it, failed, and
  // so is the communicator's failure.
  size_t len = 0;
  OK(gotree_comm_flight_record(comm, NULL, 0, &len), comm);
  CHECK(len > 0, "flight record length %zu", len);
  char *rec = malloc(len + 1);
  size_t len2 = 0;
  OK(gotree_comm_flight_record(comm, rec, len + 1, &len2), comm);
  CHECK(len2 == len && strlen(rec) == len, "flight record read whole: %zu, then %zu, strlen %zu", len, len2, strlen(rec));
  char want[64];
  snprintf(want, sizeof want, "\"rank\":%d,", rank);
  CHECK(strstr(rec, want) && strstr(rec, "\"comm\":\"") && strstr(rec, "\"failure\":\"") &&
            strstr(rec, "\"state\":\"failed\""),
        "flight record after a mismatch: %.600s", rec);
  char small[8];
  OK(gotree_comm_flight_record(comm, small, sizeof small, &len2), comm);
  CHECK(len2 >= len && strlen(small) == sizeof small - 1, "flight record truncated: %zu, strlen %zu", len2, strlen(small));
  free(rec);
  gotree_status_t st2 = gotree_comm_flight_record(comm, small, sizeof small, NULL);
  CHECK(st2 == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(comm), "len is NULL"), "flight record NULL len: %s", gotree_status_string(st2));
  // Without GOTREE_TRACE_DUMP_FILE the dump is a no-op; a bad handle is refused.
  OK(gotree_comm_dump_flight_record(comm, "a reason"), comm);
  OK(gotree_comm_dump_flight_record(comm, NULL), comm);
  st2 = gotree_comm_dump_flight_record(987654321, NULL);
  CHECK(st2 == GOTREE_ERR_INVALID_HANDLE, "dump of a bad handle: %s", gotree_status_string(st2));
}

static void test_fork_guard(void) {
  pid_t p = fork();
  if (p == 0) {
    gotree_unique_id_t id;
    gotree_status_t st = gotree_get_unique_id(&id);
    char buf[512];
    gotree_error_text(0, buf, sizeof buf);
    _exit(st == GOTREE_ERR_INVALID_ARGUMENT && strstr(buf, "fork") ? 0 : 1);
  }
  int status = 0;
  waitpid(p, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child was not refused cleanly (status %d)", status);
}

static void hex(const unsigned char *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static int unhex(const char *s, unsigned char *b, size_t n) {
  if (strlen(s) != 2 * n) return -1;
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
    b[i] = (unsigned char)v;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *uidhex = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--nranks")) nranks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rank")) rank = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--uid")) uidhex = argv[i + 1];
  }
  CHECK(gotree_abi_version() == GOTREE_ABI_VERSION, "ABI version %d, header %d", gotree_abi_version(), GOTREE_ABI_VERSION);
  char ver[128];
  CHECK(gotree_version(ver, sizeof ver) > 0 && strstr(ver, "gotree"), "version string '%s'", ver);
  if (uidhex == NULL) {
    // the machine-state probe: a time on two CPUs, NOT_SUPPORTED on one,
    // and its argument checks (error text on handle 0)
    double us = -1;
    gotree_status_t pst = gotree_probe_handoff(64 << 10, 8, &us);
    CHECK((pst == GOTREE_SUCCESS && us > 0 && us < 2e6) ||
              (pst == GOTREE_ERR_NOT_SUPPORTED && strstr(errtext(0), "two CPUs")),
          "probe_handoff: %s, %g us / %s", gotree_status_string(pst), us, errtext(0));
    pst = gotree_probe_handoff(4096, 0, &us);
    CHECK(pst == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(0), "0 rounds"), "probe_handoff 0 rounds: %s / %s", gotree_status_string(pst), errtext(0));
    pst = gotree_probe_handoff(0, 4, &us);
    CHECK(pst == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(0), "0 bytes"), "probe_handoff 0 bytes: %s / %s", gotree_status_string(pst), errtext(0));
    pst = gotree_probe_handoff(4096, 4, NULL);
    CHECK(pst == GOTREE_ERR_INVALID_ARGUMENT && strstr(errtext(0), "us is NULL"), "probe_handoff NULL: %s / %s", gotree_status_string(pst), errtext(0));
  }

  gotree_unique_id_t id;
  pid_t kids[64];
  int nkids = 0;
  if (uidhex == NULL) {
    OK(gotree_get_unique_id(&id), 0);
    char h[2 * GOTREE_UNIQUE_ID_BYTES + 1];
    hex((unsigned char *)id.internal, sizeof id.internal, h);
    for (int r = 1; r < nranks && r < 64; r++) {
      char rs[16], ns[16];
      snprintf(rs, sizeof rs, "%d", r);
      snprintf(ns, sizeof ns, "%d", nranks);
      char *args[] = {argv[0], "--nranks", ns, "--rank", rs, "--uid", h, NULL};
      int e = posix_spawn(&kids[nkids], "/proc/self/exe", NULL, NULL, args, environ);
      CHECK(e == 0, "posix_spawn: %s", strerror(e));
      if (e == 0) nkids++;
    }
  } else if (unhex(uidhex, (unsigned char *)id.internal, sizeof id.internal) != 0) {
    fprintf(stderr, "abi_test: bad --uid\n");
    return 2;
  }

  gotree_options_t opts;
  memset(&opts, 0, sizeof opts);
  opts.struct_size = sizeof opts;
  opts.timeout_ms = 60000;
  gotree_comm_t comm = 0;
  OK(gotree_comm_init_rank(&comm, &id, rank, nranks, &opts), 0);
  if (comm != 0) {
    int r = -1, n = -1;
    OK(gotree_comm_rank(comm, &r), comm);
    OK(gotree_comm_size(comm, &n), comm);
    CHECK(r == rank && n == nranks, "rank/size %d/%d, want %d/%d", r, n, rank, nranks);
    uint64_t counts[] = {0, 1, 7, 1000003, (1u << 20) + 3};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
      for (int inplace = 0; inplace < 2; inplace++) test_allreduce(comm, counts[k], inplace);
    for (size_t k = 0; k < 4; k++) test_broadcast_allgather(comm, counts[k]);
    for (size_t k = 0; k < 4; k++) test_more(comm, counts[k]);
    gotree_request_t req;
    OK(gotree_barrier(comm, &req), comm);
    int done = 0;
    OK(gotree_request_test(req, &done), req);
    OK(run(req), req);
    test_shared_buffers(comm);
    test_bad_input(comm);
    test_describe(comm);
    if (rank == 0) test_fork_guard();
    if (nranks > 1) test_async_error_after_mismatch(comm);
    OK(gotree_comm_destroy(comm), 0);
    CHECK(gotree_comm_destroy(comm) == GOTREE_ERR_INVALID_HANDLE, "double destroy accepted");
  }
  for (int i = 0; i < nkids; i++) {
    int status = 0;
    waitpid(kids[i], &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d exited with status %d", i + 1, status);
  }
  printf("abi_test rank %d of %d: %d checks, %d failed\n", rank, nranks, checks, failures);
  return failures == 0 ? 0 : 1;
}
