/* How fast one CPU hands freshly written data to another through shared
 * memory, with ordinary stores and with non-temporal ones: the step every
 * shared-memory algorithm repeats (a FIFO slot, a staged chunk). No gotree
 * code; a probe of the machine.
 *
 *   cc -O2 -mavx2 -o /tmp/handoff tests/bench/handoff.c
 *   /tmp/handoff [KiB per hand-off (512)] [hand-offs (200)]
 *
 * A parent pinned to CPU 0 writes the block into a shared mapping (a
 * memfd) and raises a flag; a child pinned to CPU 1 copies the block out
 * into private memory and answers. Printed per mode: µs per hand-off and
 * GB/s. On the 2-vCPU development VM (2026-12-05) ordinary stores gave
 * 1.9–2.3 GB/s in some stretches and 6–8 GB/s in others, non-temporal
 * stores 9–12 GB/s in both: in the slow stretches every line written on
 * one CPU and read on the other crosses slowly between the caches, while
 * a line streamed to memory is read from memory (docs/bench.md, "Two
 * states of this VM"). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (sched_setaffinity(0, sizeof s, &s) != 0) {
    perror("sched_setaffinity");
    exit(1);
  }
}

static void stream_copy(char *dst, const char *src, size_t n) {
  for (size_t i = 0; i < n; i += 32)
    _mm256_stream_si256((__m256i *)(dst + i), _mm256_loadu_si256((const __m256i *)(src + i)));
  _mm_sfence();
}

/* run times n hand-offs of size bytes; returns seconds per hand-off. */
static double run(size_t size, int n, int streamed) {
  int fd = memfd_create("gotree-handoff", 0);
  if (fd < 0 || ftruncate(fd, size + 4096) != 0) {
    perror("memfd");
    exit(1);
  }
  char *shared = mmap(NULL, size + 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (shared == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  memset(shared, 0, size + 4096);
  atomic_int *flag = (atomic_int *)shared;
  char *block = shared + 4096;
  char *src = aligned_alloc(64, size), *dst = aligned_alloc(64, size);
  memset(src, 1, size);
  memset(dst, 2, size);
  pid_t child = fork();
  if (child == 0) {
    pin(1);
    for (int i = 0; i < n; i++) {
      while (atomic_load(flag) != 2 * i + 1)
        ;
      memcpy(dst, block, size);
      atomic_store(flag, 2 * i + 2);
    }
    _exit(0);
  }
  pin(0);
  double t0 = now();
  for (int i = 0; i < n; i++) {
    src[0] = (char)i;
    if (streamed)
      stream_copy(block, src, size);
    else
      memcpy(block, src, size);
    atomic_store(flag, 2 * i + 1);
    while (atomic_load(flag) != 2 * i + 2)
      ;
  }
  double t = (now() - t0) / n;
  waitpid(child, NULL, 0);
  munmap(shared, size + 4096);
  close(fd);
  free(src);
  free(dst);
  return t;
}

int main(int argc, char **argv) {
  size_t kib = argc > 1 ? strtoul(argv[1], NULL, 10) : 512;
  int n = argc > 2 ? atoi(argv[2]) : 200;
  if (kib < 1 || n < 1) {
    fprintf(stderr, "usage: %s [KiB per hand-off >= 1] [hand-offs >= 1]\n", argv[0]);
    return 2;
  }
  size_t size = kib << 10;
  for (int streamed = 0; streamed < 2; streamed++) {
    double t = run(size, n, streamed);
    printf("%zu KiB, %-18s %8.1f us per hand-off  %6.2f GB/s\n", kib, streamed ? "non-temporal:" : "ordinary stores:", t * 1e6,
           size / t / 1e9);
  }
  return 0;
}
