/* Latency of a 1-element float32 allreduce through the C ABI, the way torch
 * calls it (a C thread; gotree_comm_will_wait, then wait without a limit):
 * two processes, started separately, find each other through a file that
 * rank 0 writes.
 *
 *   cc -O2 -Icapi -o /tmp/abi_latency tests/bench/abi_latency.c -Lbuild -lgotree \
 *      -Wl,-rpath,$PWD/build -Wl,-z,lazy -Wl,--allow-shlib-undefined
 *   /tmp/abi_latency 0 h0 & /tmp/abi_latency 1 h1; wait
 *
 * Arguments: rank, host id (different ids: TCP between the ranks; equal:
 * shared memory), and optionally calls per round (5000) and the id file
 * (/tmp/gotree-abi-latency.id). Rank 0 prints the mean time per call of
 * each of 4 rounds. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gotree.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int check(gotree_status_t st, const char *what) {
  if (st != GOTREE_SUCCESS) {
    fprintf(stderr, "abi_latency: %s: %s\n", what, gotree_status_string(st));
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: abi_latency RANK HOST_ID [CALLS [ID_FILE]]\n");
    return 2;
  }
  int rank = atoi(argv[1]);
  const char *host = argv[2];
  int calls = argc > 3 ? atoi(argv[3]) : 5000;
  const char *path = argc > 4 ? argv[4] : "/tmp/gotree-abi-latency.id";
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  gotree_unique_id_t id;
  if (rank == 0) {
    if (check(gotree_get_unique_id(&id), "get_unique_id")) return 1;
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      perror("abi_latency: writing the id file");
      return 1;
    }
  } else {
    FILE *f = NULL;
    for (int i = 0; i < 30000 && !(f = fopen(path, "rb")); i++) {
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
    }
    if (!f || fread(&id, sizeof id, 1, f) != 1) {
      fprintf(stderr, "abi_latency: no id file %s from rank 0 within 30 s\n", path);
      return 1;
    }
    fclose(f);
  }
  gotree_options_t o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.timeout_ms = 60000;
  o.host_id = host;
  gotree_comm_t c;
  if (check(gotree_comm_init_rank(&c, &id, rank, 2, &o), "comm_init_rank")) return 1;
  if (rank == 0) unlink(path);
  float x = 1;
  for (int round = 0; round < 4; round++) {
    double t0 = now_us();
    for (int i = 0; i < calls; i++) {
      gotree_request_t r;
      if (check(gotree_comm_will_wait(c, 1), "comm_will_wait") ||
          check(gotree_allreduce(c, &x, &x, 1, GOTREE_FLOAT32, GOTREE_SUM, 0, GOTREE_DEVICE_CPU, NULL, &r), "allreduce") ||
          check(gotree_request_wait(r, -1), "request_wait") || check(gotree_request_free(r), "request_free"))
        return 1;
    }
    if (rank == 0) printf("round %d: %.1f us per call\n", round, (now_us() - t0) / calls);
  }
  return check(gotree_comm_destroy(c), "comm_destroy");
}
