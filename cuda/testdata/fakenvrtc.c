/* A fake libnvrtc.so for cuda/nvrtc_test.go. It "compiles" by checking
 * what a real compile would need (the kernel source, its two headers, an
 * architecture option) and returns "FAKECUBIN " + the options as the
 * image. FAKE_NVRTC_FAIL=1 makes the compile fail with a log. */
#include <stdlib.h>
#include <string.h>

typedef int nvrtcResult;
typedef struct prog {
  char *src;
  int nheaders;
  int has_abi, has_reduce;
  char log[512];
  char out[1024];
} prog;

nvrtcResult nvrtcVersion(int *major, int *minor) {
  *major = 12;
  *minor = 8;
  return 0;
}

const char *nvrtcGetErrorString(nvrtcResult r) {
  switch (r) {
    case 0: return "NVRTC_SUCCESS";
    case 3: return "NVRTC_ERROR_INVALID_INPUT";
    case 6: return "NVRTC_ERROR_COMPILATION";
  }
  return "NVRTC_ERROR unknown";
}

nvrtcResult nvrtcCreateProgram(prog **p, const char *src, const char *name, int n, const char *const *headers,
                               const char *const *names) {
  (void)name;
  if (!src) return 3;
  prog *q = calloc(1, sizeof *q);
  q->src = strdup(src);
  q->nheaders = n;
  for (int i = 0; i < n; i++) {
    if (strcmp(names[i], "abi.cuh") == 0 && strstr(headers[i], "GtArgs")) q->has_abi = 1;
    if (strcmp(names[i], "reduce.cuh") == 0 && strstr(headers[i], "gtF32ToBF16")) q->has_reduce = 1;
  }
  *p = q;
  return 0;
}

nvrtcResult nvrtcDestroyProgram(prog **p) {
  free((*p)->src);
  free(*p);
  *p = NULL;
  return 0;
}

nvrtcResult nvrtcCompileProgram(prog *p, int n, const char *const *opts) {
  const char *fail = getenv("FAKE_NVRTC_FAIL");
  int arch = 0;
  strcpy(p->out, "FAKECUBIN");
  for (int i = 0; i < n; i++) {
    if (strncmp(opts[i], "--gpu-architecture=sm_", 22) == 0) arch = 1;
    if (strlen(p->out) + strlen(opts[i]) + 2 < sizeof p->out) {
      strcat(p->out, " ");
      strcat(p->out, opts[i]);
    }
  }
  if (fail && *fail == '1') {
    strcpy(p->log, "gotree.cu(1): error: fake failure requested");
    return 6;
  }
  if (!arch || !p->has_abi || !p->has_reduce || !strstr(p->src, "gotree_run_")) {
    strcpy(p->log, "fake nvrtc: missing architecture, header or kernel");
    return 6;
  }
  strcpy(p->log, "");
  return 0;
}

nvrtcResult nvrtcGetProgramLogSize(prog *p, size_t *n) {
  *n = strlen(p->log) + 1;
  return 0;
}
nvrtcResult nvrtcGetProgramLog(prog *p, char *s) {
  strcpy(s, p->log);
  return 0;
}
nvrtcResult nvrtcGetCUBINSize(prog *p, size_t *n) {
  *n = strlen(p->out);
  return 0;
}
nvrtcResult nvrtcGetCUBIN(prog *p, char *s) {
  memcpy(s, p->out, strlen(p->out));
  return 0;
}
