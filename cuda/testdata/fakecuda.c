/* A fake libcuda.so for the binding's tests (cuda/driver_test.go). Built
 * three ways: -DFAKE_PROC_V2 exports cuGetProcAddress_v2 (and the 4-argument
 * cuGetProcAddress, like a CUDA 12+ driver), -DFAKE_PROC_V1 only the
 * 4-argument one (CUDA 11.3..11.8), and neither: entry points must be found
 * with dlsym under their versioned names.
 *
 * "Device memory" is host memory: a device pointer is a malloc'd address.
 * Environment knobs, read at call time:
 *   FAKE_CUDA_VERSION     cuDriverGetVersion's answer (default 13000)
 *   FAKE_CUDA_INIT_ERROR  cuInit's CUresult (default 0)
 *   FAKE_CUDA_DEVICES     cuDeviceGetCount's answer (default 2)
 *   FAKE_CAPTURING        cuStreamIsCapturing's status (default 0)
 * Pinned host memory is calloc'd and mapped to itself; an IPC handle holds
 * the pointer (good within one process only).
 * cuGetProcAddress deliberately does not know cuDeviceGetName, so the
 * binding's per-function dlsym fallback is exercised.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static int envint(const char *name, int def) {
  const char *s = getenv(name);
  return s && *s ? atoi(s) : def;
}

int fake_proc_lookups = 0;      /* cuGetProcAddress calls */
int fake_last_proc_version = 0; /* the cudaVersion of the last one */

CUresult cuInit(unsigned int flags) { return flags ? 1 : envint("FAKE_CUDA_INIT_ERROR", 0); }
CUresult cuDriverGetVersion(int *v) {
  if (!v) return 1;
  *v = envint("FAKE_CUDA_VERSION", 13000);
  return 0;
}

static const struct {
  int code;
  const char *name, *desc;
} errs[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
};

CUresult cuGetErrorName(CUresult e, const char **s) {
  for (unsigned i = 0; i < sizeof errs / sizeof errs[0]; i++)
    if (errs[i].code == e) {
      *s = errs[i].name;
      return 0;
    }
  *s = NULL;
  return 1;
}
CUresult cuGetErrorString(CUresult e, const char **s) {
  for (unsigned i = 0; i < sizeof errs / sizeof errs[0]; i++)
    if (errs[i].code == e) {
      *s = errs[i].desc;
      return 0;
    }
  *s = NULL;
  return 1;
}

CUresult cuDeviceGetCount(int *n) {
  *n = envint("FAKE_CUDA_DEVICES", 2);
  return 0;
}
CUresult cuDeviceGet(int *d, int ordinal) {
  if (ordinal < 0 || ordinal >= envint("FAKE_CUDA_DEVICES", 2)) return 101;
  *d = ordinal;
  return 0;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  switch (attr) {
    case 75: *v = 9; return 0;    /* compute capability major */
    case 76: *v = 0; return 0;    /* minor */
    case 16: *v = 132; return 0;  /* multiprocessors */
    case 33: *v = 0x1b + dev; return 0; /* PCI bus */
  }
  return 1;
}
CUresult cuDeviceGetName(char *buf, int len, int dev) {
  (void)dev;
  strncpy(buf, "Fake GPU", (size_t)len);
  return 0;
}
CUresult cuDeviceGetPCIBusId(char *buf, int len, int dev) {
  char s[32] = "0000:1b:00.0";
  s[6] = (char)('b' + dev);
  strncpy(buf, s, (size_t)len);
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *n, int dev) {
  (void)dev;
  *n = (size_t)141 << 30;
  return 0;
}

static int ctx_token;
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  (void)dev;
  *ctx = &ctx_token;
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  (void)dev;
  return 0;
}
CUresult cuCtxSetCurrent(void *ctx) { return ctx == &ctx_token ? 0 : 1; }

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  if (n > ((size_t)1 << 30)) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  void *q = malloc(n ? n : 1);
  if (!q) return 2;
  *p = (CUdeviceptr)(uintptr_t)q;
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  free((void *)(uintptr_t)p);
  return 0;
}
/* FAKE_NO_LEGACY_COPIES=1: the legacy stream's memset and host-to-device
 * copy fail, and so do their async forms on any stream but a non-blocking
 * one (cuStreamCreate gives each flag value its own token). */
static int stream_tokens[2];
static int legacy_refused(void *stream) {
  return envint("FAKE_NO_LEGACY_COPIES", 0) && stream != &stream_tokens[1];
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) {
  if (legacy_refused(NULL)) return 1;
  memcpy((void *)(uintptr_t)d, h, n);
  return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *stream) {
  if (legacy_refused(stream)) return 1;
  memcpy((void *)(uintptr_t)d, h, n);
  return 0;
}
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) {
  memcpy(h, (const void *)(uintptr_t)d, n);
  return 0;
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  if (legacy_refused(NULL)) return 1;
  memset((void *)(uintptr_t)d, v, n);
  return 0;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *stream) {
  if (legacy_refused(stream)) return 1;
  memset((void *)(uintptr_t)d, v, n);
  return 0;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *stream) {
  (void)stream;
  memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
  return 0;
}
CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
  (void)flags;
  *p = calloc(1, n ? n : 1);
  return *p ? 0 : 2;
}
CUresult cuMemFreeHost(void *p) {
  free(p);
  return 0;
}
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags) {
  (void)flags;
  *d = (CUdeviceptr)(uintptr_t)p;
  return 0;
}
typedef struct { char reserved[64]; } CUipcMemHandle;
CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, "FAKEIPC", 7);
  memcpy(h->reserved + 8, &p, sizeof p);
  return 0;
}
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags) {
  if (memcmp(h.reserved, "FAKEIPC", 7) != 0 || flags != 1) return 1; /* CUDA_ERROR_INVALID_VALUE */
  memcpy(p, h.reserved + 8, sizeof *p);
  return 0;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  (void)p;
  return 0;
}
CUresult cuStreamIsCapturing(void *s, int *status) {
  (void)s;
  *status = envint("FAKE_CAPTURING", 0);
  return 0;
}

/* Modules: an image starting with "FAKECUBIN" (what the fake NVRTC makes)
 * loads; anything else fails like a fatbin without code for the device.
 * A function handle is its name. */
CUresult cuModuleLoadData(void **mod, const void *image) {
  if (strncmp((const char *)image, "FAKECUBIN", 9) != 0) return 209; /* CUDA_ERROR_NO_BINARY_FOR_GPU */
  *mod = &ctx_token;
  return 0;
}
CUresult cuModuleUnload(void *mod) {
  (void)mod;
  return 0;
}
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
  (void)mod;
  *fn = strdup(name);
  return 0;
}
CUresult cuFuncGetAttribute(int *v, int attr, void *fn) {
  (void)fn;
  *v = attr == 4 ? 127 : 0; /* registers */
  return 0;
}

CUresult cuStreamCreate(void **s, unsigned int flags) {
  *s = &stream_tokens[flags & 1];
  return 0;
}
CUresult cuStreamDestroy_v2(void *s) {
  (void)s;
  return 0;
}
CUresult cuStreamSynchronize(void *s) {
  (void)s;
  return 0;
}

/* Launches run nothing. A gotree_run_* launch records itself; with
 * FAKE_KERNEL_ERR=<code> it writes the code to GtArgs.err (device memory
 * is host memory here), as a kernel whose wait timed out would. */
int fake_launches = 0;
unsigned fake_last_grid = 0, fake_last_block = 0;
CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, void *stream, void **params, void **extra) {
  (void)gy, (void)gz, (void)by, (void)bz, (void)shmem, (void)stream, (void)extra;
  if (strncmp((const char *)fn, "gotree_run_", 11) == 0) {
    fake_launches++;
    fake_last_grid = gx;
    fake_last_block = bx;
    const unsigned long long *args = (const unsigned long long *)params[0];
    int code = envint("FAKE_KERNEL_ERR", 0);
    if (code && args[5]) *(unsigned *)(uintptr_t)args[5] = (unsigned)code;
  }
  return 0;
}

#if defined(FAKE_PROC_V1) || defined(FAKE_PROC_V2)
static const struct {
  const char *name;
  void *fn;
} procs[] = {
    {"cuInit", (void *)cuInit},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuGetErrorName", (void *)cuGetErrorName},
    {"cuGetErrorString", (void *)cuGetErrorString},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount},
    {"cuDeviceGet", (void *)cuDeviceGet},
    {"cuDeviceGetAttribute", (void *)cuDeviceGetAttribute},
    {"cuDeviceGetPCIBusId", (void *)cuDeviceGetPCIBusId},
    {"cuDeviceTotalMem", (void *)cuDeviceTotalMem_v2},
    {"cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease_v2},
    {"cuCtxSetCurrent", (void *)cuCtxSetCurrent},
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2},
    {"cuMemsetD8", (void *)cuMemsetD8_v2},
    {"cuMemsetD8Async", (void *)cuMemsetD8Async},
    {"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync_v2},
    {"cuModuleLoadData", (void *)cuModuleLoadData},
    {"cuModuleUnload", (void *)cuModuleUnload},
    {"cuModuleGetFunction", (void *)cuModuleGetFunction},
    {"cuFuncGetAttribute", (void *)cuFuncGetAttribute},
    {"cuStreamCreate", (void *)cuStreamCreate},
    {"cuStreamDestroy", (void *)cuStreamDestroy_v2},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize},
    {"cuLaunchKernel", (void *)cuLaunchKernel},
    {"cuMemcpyDtoDAsync", (void *)cuMemcpyDtoDAsync_v2},
    {"cuMemHostAlloc", (void *)cuMemHostAlloc},
    {"cuMemFreeHost", (void *)cuMemFreeHost},
    {"cuMemHostGetDevicePointer", (void *)cuMemHostGetDevicePointer_v2},
    {"cuIpcGetMemHandle", (void *)cuIpcGetMemHandle},
    {"cuIpcOpenMemHandle", (void *)cuIpcOpenMemHandle_v2},
    {"cuIpcCloseMemHandle", (void *)cuIpcCloseMemHandle},
    {"cuStreamIsCapturing", (void *)cuStreamIsCapturing},
    /* cuDeviceGetName is left out on purpose: dlsym must find it. */
};

static CUresult lookup(const char *sym, void **pfn, int ver) {
  fake_proc_lookups++;
  fake_last_proc_version = ver;
  for (unsigned i = 0; i < sizeof procs / sizeof procs[0]; i++)
    if (strcmp(procs[i].name, sym) == 0) {
      *pfn = procs[i].fn;
      return 0;
    }
  *pfn = NULL;
  return 500; /* CUDA_ERROR_NOT_FOUND */
}

CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags) {
  (void)flags;
  return lookup(sym, pfn, ver);
}
#endif

#ifdef FAKE_PROC_V2
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *status) {
  (void)flags;
  CUresult r = lookup(sym, pfn, ver);
  if (status) *status = r == 0 ? 0 : 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
  return r;
}
#endif
