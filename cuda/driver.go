package cuda

// The CUDA driver API, loaded at run time: dlopen("libcuda.so.1"), entry
// points from cuGetProcAddress (cuGetProcAddress_v2, else the 4-argument
// cuGetProcAddress, else dlsym of the versioned names). No CUDA header or
// library is needed to build: the few types are declared here.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUmodule;
typedef void *CUfunction;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;

// dlopen, and on failure dlerror's message copied into err in the same
// call: dlerror is per thread, and a goroutine's next cgo call may run on
// another one (Go's dlopen below wraps it for the driver and NVRTC).
static void *gt_dlopen_err(const char *path, int global, char *err, size_t n) {
  void *h = dlopen(path, RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
  if (h == NULL && n > 0) {
    const char *e = dlerror();
    strncpy(err, e ? e : "unknown dlopen error", n - 1);
    err[n - 1] = 0;
  }
  return h;
}
static void *gt_dlsym(void *h, const char *name) { return dlsym(h, name); }
static int gt_dlclose(void *h) { return dlclose(h); }

// One trampoline per prototype: Go cannot call a C function pointer.
#define T0(n) static CUresult n(void *f) { return ((CUresult(*)(void))f)(); }
#define T1(n, a) static CUresult n(void *f, a x) { return ((CUresult(*)(a))f)(x); }
#define T2(n, a, b) static CUresult n(void *f, a x, b y) { return ((CUresult(*)(a, b))f)(x, y); }
#define T3(n, a, b, c) static CUresult n(void *f, a x, b y, c z) { return ((CUresult(*)(a, b, c))f)(x, y, z); }
#define T4(n, a, b, c, d) static CUresult n(void *f, a x, b y, c z, d w) { return ((CUresult(*)(a, b, c, d))f)(x, y, z, w); }

T1(gt_u, unsigned int)
T1(gt_pint, int *)
T2(gt_pint_int, int *, int)
T3(gt_pint_int_int, int *, int, int)
T3(gt_pchar_int_int, char *, int, int)
T2(gt_psize_int, size_t *, int)
T2(gt_pctx_int, CUcontext *, int)
T1(gt_int, int)
T1(gt_ctx, CUcontext)
T0(gt_void)
T2(gt_int_pcstr, CUresult, const char **)
T2(gt_pdptr_size, CUdeviceptr *, size_t)
T1(gt_dptr, CUdeviceptr)
T3(gt_dptr_cptr_size, CUdeviceptr, const void *, size_t)
T3(gt_ptr_dptr_size, void *, CUdeviceptr, size_t)
T3(gt_dptr_dptr_size, CUdeviceptr, CUdeviceptr, size_t)
static CUresult gt_htod_async(void *f, CUdeviceptr d, uintptr_t h, size_t n, CUstream s) {
	return ((CUresult(*)(CUdeviceptr, const void *, size_t, CUstream))f)(d, (const void *)h, n, s);
}
T4(gt_dptr_cptr_size_stream, CUdeviceptr, const void *, size_t, CUstream)
static CUresult gt_dtoh_async(void *f, uintptr_t h, CUdeviceptr d, size_t n, CUstream s) {
	return ((CUresult(*)(void *, CUdeviceptr, size_t, CUstream))f)((void *)h, d, n, s);
}
static CUresult gt_free_host(void *f, uintptr_t h) { return ((CUresult(*)(void *))f)((void *)h); }
static CUresult gt_host_devptr(void *f, CUdeviceptr *d, uintptr_t h) {
	return ((CUresult(*)(CUdeviceptr *, void *, unsigned int))f)(d, (void *)h, 0);
}
static CUresult gt_host_alloc(void *f, uintptr_t *p, size_t n, unsigned int flags) {
	void *q = NULL;
	CUresult r = ((CUresult(*)(void **, size_t, unsigned int))f)(&q, n, flags);
	*p = (uintptr_t)q;
	return r;
}
static CUstream gt_stream_from(uintptr_t h) { return (CUstream)h; }
static void gt_store_u32(uintptr_t p, unsigned int v) { __atomic_store_n((unsigned int *)p, v, __ATOMIC_SEQ_CST); }
static void *gt_ptr(uintptr_t p) { return (void *)p; }
T4(gt_dptr_dptr_size_stream, CUdeviceptr, CUdeviceptr, size_t, CUstream)
T3(gt_dptr_uchar_size, CUdeviceptr, unsigned char, size_t)
T4(gt_dptr_uchar_size_stream, CUdeviceptr, unsigned char, size_t, CUstream)
T2(gt_pstream_u, CUstream *, unsigned int)
T1(gt_stream, CUstream)
T2(gt_stream_pint, CUstream, int *)
T3(gt_stream_event_u, CUstream, CUevent, unsigned int)
T2(gt_pevent_u, CUevent *, unsigned int)
T2(gt_event_stream, CUevent, CUstream)
T1(gt_event, CUevent)
T3(gt_pfloat_event_event, float *, CUevent, CUevent)
T2(gt_pipc_dptr, CUipcMemHandle *, CUdeviceptr)
T2(gt_pmod_cptr, CUmodule *, const void *)
T1(gt_mod, CUmodule)
T3(gt_pfunc_mod_cstr, CUfunction *, CUmodule, const char *)
T3(gt_pint_int_func, int *, int, CUfunction)
T3(gt_func_int_int, CUfunction, int, int)

static CUresult gt_ipc_open(void *f, CUdeviceptr *p, const void *h, unsigned int flags) {
	CUipcMemHandle hh;
	memcpy(&hh, h, sizeof hh);
	return ((CUresult(*)(CUdeviceptr *, CUipcMemHandle, unsigned int))f)(p, hh, flags);
}

static CUresult gt_launch(void *f, CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
		unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params) {
	return ((CUresult(*)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
		unsigned int, unsigned int, CUstream, void **, void **))f)(fn, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}

// cuGetProcAddress_v2 (CUDA >= 12.0) and the 4-argument cuGetProcAddress (11.3).
static CUresult gt_proc_v2(void *f, const char *sym, void **pfn, int ver, unsigned long long flags, int *status) {
	return ((CUresult(*)(const char *, void **, int, unsigned long long, int *))f)(sym, pfn, ver, flags, status);
}
static CUresult gt_proc_v1(void *f, const char *sym, void **pfn, int ver, unsigned long long flags) {
	return ((CUresult(*)(const char *, void **, int, unsigned long long))f)(sym, pfn, ver, flags);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// DefaultLibrary is the driver library Load opens. GOTREE_LIBCUDA overrides
// it (a path or a soname).
const DefaultLibrary = "libcuda.so.1"

// MinDriverVersion is the oldest driver API version Load accepts (CUDA
// 11.4: cuGetProcAddress, cuIpcOpenMemHandle_v2, cuDevicePrimaryCtxRelease_v2).
const MinDriverVersion = 11040

// procVersion is the API version asked of cuGetProcAddress: the
// prototypes this file declares are those of CUDA 12.0.
const procVersion = 12000

// ErrNoDriver is wrapped by Load's error when the driver library cannot be
// opened: the machine has no NVIDIA driver.
var ErrNoDriver = errors.New("no NVIDIA driver")

// ErrNotAvailable is wrapped by calls to an entry point the driver does
// not provide.
var ErrNotAvailable = errors.New("gotree/cuda: entry point not available")

// Error is a failed driver call. It names the call, the CUDA error name
// (cuGetErrorName) and its description (cuGetErrorString).
type Error struct {
	Func string // the driver function, e.g. "cuMemAlloc"
	Code int    // the CUresult
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Desc string // e.g. "out of memory"
}

func (e *Error) Error() string {
	return fmt.Sprintf("gotree/cuda: %s: %s (%d): %s", e.Func, e.Name, e.Code, e.Desc)
}

// CUDA error codes the package tests for.
const (
	cudaSuccess         = 0
	cudaErrNotReady     = 600
	cudaErrNotFound     = 500
	cudaErrNoBinaryGPU  = 209
	cudaErrInvalidPTX   = 218
	cudaErrUnsupPTX     = 222
	cudaErrInvalidImage = 200
	cudaErrNoJIT        = 221
)

// entry is one driver function: the name passed to cuGetProcAddress and
// the versioned symbol dlsym falls back to.
type entry struct {
	name, sym string
	required  bool
}

// The entry points, indexed by the fn* constants.
const (
	fnInit = iota
	fnDriverGetVersion
	fnGetErrorName
	fnGetErrorString
	fnDeviceGetCount
	fnDeviceGet
	fnDeviceGetAttribute
	fnDeviceGetName
	fnDeviceGetPCIBusId
	fnDeviceTotalMem
	fnDevicePrimaryCtxRetain
	fnDevicePrimaryCtxRelease
	fnCtxSetCurrent
	fnCtxSynchronize
	fnMemAlloc
	fnMemFree
	fnMemcpyHtoD
	fnMemcpyDtoH
	fnMemcpyDtoD
	fnMemcpyHtoDAsync
	fnMemcpyDtoHAsync
	fnMemcpyDtoDAsync
	fnMemsetD8
	fnMemsetD8Async
	fnStreamCreate
	fnStreamDestroy
	fnStreamSynchronize
	fnStreamQuery
	fnStreamWaitEvent
	fnStreamIsCapturing
	fnEventCreate
	fnEventDestroy
	fnEventRecord
	fnEventQuery
	fnEventSynchronize
	fnEventElapsedTime
	fnIpcGetMemHandle
	fnIpcOpenMemHandle
	fnIpcCloseMemHandle
	fnMemHostAlloc
	fnMemFreeHost
	fnMemHostGetDevicePointer
	fnModuleLoadData
	fnModuleUnload
	fnModuleGetFunction
	fnFuncGetAttribute
	fnFuncSetAttribute
	fnLaunchKernel
	numFns
)

var entries = [numFns]entry{
	fnInit:                    {"cuInit", "cuInit", true},
	fnDriverGetVersion:        {"cuDriverGetVersion", "cuDriverGetVersion", true},
	fnGetErrorName:            {"cuGetErrorName", "cuGetErrorName", true},
	fnGetErrorString:          {"cuGetErrorString", "cuGetErrorString", true},
	fnDeviceGetCount:          {"cuDeviceGetCount", "cuDeviceGetCount", true},
	fnDeviceGet:               {"cuDeviceGet", "cuDeviceGet", false},
	fnDeviceGetAttribute:      {"cuDeviceGetAttribute", "cuDeviceGetAttribute", false},
	fnDeviceGetName:           {"cuDeviceGetName", "cuDeviceGetName", false},
	fnDeviceGetPCIBusId:       {"cuDeviceGetPCIBusId", "cuDeviceGetPCIBusId", false},
	fnDeviceTotalMem:          {"cuDeviceTotalMem", "cuDeviceTotalMem_v2", false},
	fnDevicePrimaryCtxRetain:  {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", false},
	fnDevicePrimaryCtxRelease: {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", false},
	fnCtxSetCurrent:           {"cuCtxSetCurrent", "cuCtxSetCurrent", false},
	fnCtxSynchronize:          {"cuCtxSynchronize", "cuCtxSynchronize", false},
	fnMemAlloc:                {"cuMemAlloc", "cuMemAlloc_v2", false},
	fnMemFree:                 {"cuMemFree", "cuMemFree_v2", false},
	fnMemcpyHtoD:              {"cuMemcpyHtoD", "cuMemcpyHtoD_v2", false},
	fnMemcpyDtoH:              {"cuMemcpyDtoH", "cuMemcpyDtoH_v2", false},
	fnMemcpyDtoD:              {"cuMemcpyDtoD", "cuMemcpyDtoD_v2", false},
	fnMemcpyHtoDAsync:         {"cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2", false},
	fnMemcpyDtoHAsync:         {"cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2", false},
	fnMemcpyDtoDAsync:         {"cuMemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2", false},
	fnMemsetD8:                {"cuMemsetD8", "cuMemsetD8_v2", false},
	fnMemsetD8Async:           {"cuMemsetD8Async", "cuMemsetD8Async", false},
	fnStreamCreate:            {"cuStreamCreate", "cuStreamCreate", false},
	fnStreamDestroy:           {"cuStreamDestroy", "cuStreamDestroy_v2", false},
	fnStreamSynchronize:       {"cuStreamSynchronize", "cuStreamSynchronize", false},
	fnStreamQuery:             {"cuStreamQuery", "cuStreamQuery", false},
	fnStreamWaitEvent:         {"cuStreamWaitEvent", "cuStreamWaitEvent", false},
	fnStreamIsCapturing:       {"cuStreamIsCapturing", "cuStreamIsCapturing", false},
	fnEventCreate:             {"cuEventCreate", "cuEventCreate", false},
	fnEventDestroy:            {"cuEventDestroy", "cuEventDestroy_v2", false},
	fnEventRecord:             {"cuEventRecord", "cuEventRecord", false},
	fnEventQuery:              {"cuEventQuery", "cuEventQuery", false},
	fnEventSynchronize:        {"cuEventSynchronize", "cuEventSynchronize", false},
	fnEventElapsedTime:        {"cuEventElapsedTime", "cuEventElapsedTime", false},
	fnIpcGetMemHandle:         {"cuIpcGetMemHandle", "cuIpcGetMemHandle", false},
	fnIpcOpenMemHandle:        {"cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2", false},
	fnIpcCloseMemHandle:       {"cuIpcCloseMemHandle", "cuIpcCloseMemHandle", false},
	fnMemHostAlloc:            {"cuMemHostAlloc", "cuMemHostAlloc", false},
	fnMemFreeHost:             {"cuMemFreeHost", "cuMemFreeHost", false},
	fnMemHostGetDevicePointer: {"cuMemHostGetDevicePointer", "cuMemHostGetDevicePointer_v2", false},
	fnModuleLoadData:          {"cuModuleLoadData", "cuModuleLoadData", false},
	fnModuleUnload:            {"cuModuleUnload", "cuModuleUnload", false},
	fnModuleGetFunction:       {"cuModuleGetFunction", "cuModuleGetFunction", false},
	fnFuncGetAttribute:        {"cuFuncGetAttribute", "cuFuncGetAttribute", false},
	fnFuncSetAttribute:        {"cuFuncSetAttribute", "cuFuncSetAttribute", false},
	fnLaunchKernel:            {"cuLaunchKernel", "cuLaunchKernel", false},
}

// Resolution says how an entry point was found.
type Resolution string

const (
	ByProcAddressV2 Resolution = "cuGetProcAddress_v2"
	ByProcAddressV1 Resolution = "cuGetProcAddress"
	ByDlsym         Resolution = "dlsym"
	Missing         Resolution = "missing"
)

// Driver is a loaded CUDA driver library.
type Driver struct {
	path    string
	lib     unsafe.Pointer
	version int
	fns     [numFns]unsafe.Pointer
	how     [numFns]Resolution
	proc    Resolution // which cuGetProcAddress the library has (or ByDlsym)
}

var (
	loadOnce   sync.Once
	loadDriver *Driver
	loadErr    error
)

// Load opens the driver at path (DefaultLibrary when empty; pg passes
// $GOTREE_LIBCUDA) once per process and returns it; later calls return the
// first call's result.
func Load(path string) (*Driver, error) {
	loadOnce.Do(func() {
		if path == "" {
			path = DefaultLibrary
		}
		loadDriver, loadErr = LoadFrom(path)
	})
	return loadDriver, loadErr
}

// dlopen opens path (RTLD_NOW; RTLD_GLOBAL or RTLD_LOCAL), or says why it
// could not.
func dlopen(path string, global bool) (unsafe.Pointer, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	g := C.int(0)
	if global {
		g = 1
	}
	h := C.gt_dlopen_err(cpath, g, &msg[0], C.size_t(len(msg)))
	if h == nil {
		return nil, errors.New(C.GoString(&msg[0]))
	}
	return h, nil
}

// LoadFrom opens the driver library at path (a file or a soname), resolves
// its entry points, calls cuInit(0) and checks the driver's version. Tests
// pass a fake library here. A library that cannot be opened gives an error
// wrapping ErrNoDriver.
func LoadFrom(path string) (*Driver, error) {
	lib, err := dlopen(path, false)
	if err != nil {
		return nil, fmt.Errorf("gotree/cuda: %w: %s not found (%v)", ErrNoDriver, path, err)
	}
	d := &Driver{path: path, lib: lib}
	if err := d.resolve(); err != nil {
		C.gt_dlclose(lib)
		return nil, err
	}
	if err := d.check("cuInit", C.gt_u(d.fns[fnInit], 0)); err != nil {
		C.gt_dlclose(lib)
		return nil, err
	}
	return d, nil
}

func (d *Driver) dlsym(name string) unsafe.Pointer {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.gt_dlsym(d.lib, cs)
}

func (d *Driver) resolve() error {
	// Bootstrap: cuDriverGetVersion is unversioned and exported by every
	// driver; the version decides what cuGetProcAddress may be asked.
	gv := d.dlsym("cuDriverGetVersion")
	if gv == nil {
		return fmt.Errorf("gotree/cuda: %s is not a CUDA driver library: no cuDriverGetVersion", d.path)
	}
	var v C.int
	if r := C.gt_pint(gv, &v); r != cudaSuccess {
		return fmt.Errorf("gotree/cuda: cuDriverGetVersion: error %d", int(r))
	}
	d.version = int(v)
	if d.version < MinDriverVersion {
		return fmt.Errorf("gotree/cuda: the NVIDIA driver supports CUDA %s; gotree needs %s or newer (update the driver)",
			versionString(d.version), versionString(MinDriverVersion))
	}
	ver := C.int(min(d.version, procVersion))
	pv2 := d.dlsym("cuGetProcAddress_v2")
	pv1 := d.dlsym("cuGetProcAddress")
	d.proc = ByDlsym
	switch {
	case pv2 != nil && d.version >= 12000:
		d.proc = ByProcAddressV2
	case pv1 != nil:
		d.proc = ByProcAddressV1
	}
	for i, e := range entries {
		var p unsafe.Pointer
		if d.proc != ByDlsym {
			cs := C.CString(e.name)
			var status C.int
			var r C.CUresult
			if d.proc == ByProcAddressV2 {
				r = C.gt_proc_v2(pv2, cs, &p, ver, 0, &status)
			} else {
				r = C.gt_proc_v1(pv1, cs, &p, ver, 0)
			}
			C.free(unsafe.Pointer(cs))
			if r != cudaSuccess || (d.proc == ByProcAddressV2 && status != 0) {
				p = nil
			}
			if p != nil {
				d.how[i] = d.proc
			}
		}
		if p == nil {
			if p = d.dlsym(e.sym); p != nil {
				d.how[i] = ByDlsym
			}
		}
		if p == nil {
			d.how[i] = Missing
			if e.required {
				return fmt.Errorf("gotree/cuda: %s has no %s", d.path, e.name)
			}
		}
		d.fns[i] = p
	}
	return nil
}

func versionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// Path is the library Load opened.
func (d *Driver) Path() string { return d.path }

// Version is the driver's CUDA API version (cuDriverGetVersion), e.g.
// 13000 for CUDA 13.0.
func (d *Driver) Version() int { return d.version }

// ProcAddress says how entry points were looked up: ByProcAddressV2,
// ByProcAddressV1 or ByDlsym (a driver without cuGetProcAddress).
func (d *Driver) ProcAddress() Resolution { return d.proc }

// Resolved reports how the entry point with the given base name (e.g.
// "cuMemAlloc") was found.
func (d *Driver) Resolved(name string) Resolution {
	for i, e := range entries {
		if e.name == name {
			return d.how[i]
		}
	}
	return Missing
}

// ErrorName returns the CUDA name and description of a CUresult.
func (d *Driver) ErrorName(code int) (name, desc string) {
	var s *C.char
	if C.gt_int_pcstr(d.fns[fnGetErrorName], C.CUresult(code), &s) == cudaSuccess && s != nil {
		name = C.GoString(s)
	} else {
		name = fmt.Sprintf("CUDA_ERROR_%d", code)
	}
	s = nil
	if C.gt_int_pcstr(d.fns[fnGetErrorString], C.CUresult(code), &s) == cudaSuccess && s != nil {
		desc = C.GoString(s)
	} else {
		desc = "unrecognized error code"
	}
	return name, desc
}

// check turns a CUresult into nil or an *Error.
func (d *Driver) check(fn string, r C.CUresult) error {
	if r == cudaSuccess {
		return nil
	}
	name, desc := d.ErrorName(int(r))
	return &Error{Func: fn, Code: int(r), Name: name, Desc: desc}
}

// fn returns entry point i or an error naming it.
func (d *Driver) fn(i int) (unsafe.Pointer, error) {
	if p := d.fns[i]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w: %s is missing from %s", ErrNotAvailable, entries[i].name, d.path)
}

// IsCode reports whether err is a driver *Error with the given CUresult.
func IsCode(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// ---- devices -----------------------------------------------------------------

// DeviceCount is the number of CUDA devices the process sees.
func (d *Driver) DeviceCount() (int, error) {
	var n C.int
	if err := d.check("cuDeviceGetCount", C.gt_pint(d.fns[fnDeviceGetCount], &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Device is one CUDA device.
type Device struct {
	d       *Driver
	h       C.CUdevice
	Ordinal int
}

// Device returns the device with the given ordinal.
func (d *Driver) Device(ordinal int) (Device, error) {
	f, err := d.fn(fnDeviceGet)
	if err != nil {
		return Device{}, err
	}
	var h C.CUdevice
	if err := d.check("cuDeviceGet", C.gt_pint_int(f, &h, C.int(ordinal))); err != nil {
		return Device{}, err
	}
	return Device{d: d, h: h, Ordinal: ordinal}, nil
}

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int

// The attributes gotree reads (values of CUdevice_attribute).
const (
	AttrMaxThreadsPerBlock     DeviceAttribute = 1
	AttrMultiprocessorCount    DeviceAttribute = 16
	AttrComputeCapabilityMajor DeviceAttribute = 75
	AttrComputeCapabilityMinor DeviceAttribute = 76
	AttrUnifiedAddressing      DeviceAttribute = 41
	AttrCanMapHostMemory       DeviceAttribute = 19
	AttrPCIBusID               DeviceAttribute = 33
	AttrPCIDeviceID            DeviceAttribute = 34
	AttrPCIDomainID            DeviceAttribute = 50
	AttrMemoryClockRate        DeviceAttribute = 36
	AttrGlobalMemoryBusWidth   DeviceAttribute = 37
	AttrL2CacheSize            DeviceAttribute = 38
	AttrMaxSharedMemPerBlockOp DeviceAttribute = 97
)

// Attribute returns a device attribute.
func (v Device) Attribute(a DeviceAttribute) (int, error) {
	f, err := v.d.fn(fnDeviceGetAttribute)
	if err != nil {
		return 0, err
	}
	var x C.int
	if err := v.d.check("cuDeviceGetAttribute", C.gt_pint_int_int(f, &x, C.int(a), v.h)); err != nil {
		return 0, err
	}
	return int(x), nil
}

// ComputeCapability returns the device's major and minor compute capability.
func (v Device) ComputeCapability() (major, minor int, err error) {
	if major, err = v.Attribute(AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	minor, err = v.Attribute(AttrComputeCapabilityMinor)
	return major, minor, err
}

func (v Device) str(fn int, name string) (string, error) {
	f, err := v.d.fn(fn)
	if err != nil {
		return "", err
	}
	var buf [256]C.char
	if err := v.d.check(name, C.gt_pchar_int_int(f, &buf[0], C.int(len(buf)), v.h)); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// Name is the device's marketing name.
func (v Device) Name() (string, error) { return v.str(fnDeviceGetName, "cuDeviceGetName") }

// PCIBusID is the device's PCI address, "dddd:bb:dd.f".
func (v Device) PCIBusID() (string, error) { return v.str(fnDeviceGetPCIBusId, "cuDeviceGetPCIBusId") }

// TotalMem is the device's memory in bytes.
func (v Device) TotalMem() (uint64, error) {
	f, err := v.d.fn(fnDeviceTotalMem)
	if err != nil {
		return 0, err
	}
	var n C.size_t
	if err := v.d.check("cuDeviceTotalMem", C.gt_psize_int(f, &n, v.h)); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// ---- contexts ----------------------------------------------------------------

// Context is a device's primary context (the one the CUDA runtime, and so
// torch, uses). Every method makes it current on the calling OS thread for
// the duration of the call, so it may be used from any goroutine.
type Context struct {
	d   *Driver
	h   C.CUcontext
	Dev Device

	mu      sync.Mutex
	private *Stream // MemsetD8Now's and MemcpyHtoDNow's, made on first use
}

// RetainPrimaryContext retains the device's primary context.
func (v Device) RetainPrimaryContext() (*Context, error) {
	f, err := v.d.fn(fnDevicePrimaryCtxRetain)
	if err != nil {
		return nil, err
	}
	if _, err := v.d.fn(fnCtxSetCurrent); err != nil {
		return nil, err
	}
	var h C.CUcontext
	if err := v.d.check("cuDevicePrimaryCtxRetain", C.gt_pctx_int(f, &h, v.h)); err != nil {
		return nil, err
	}
	return &Context{d: v.d, h: h, Dev: v}, nil
}

// Release releases the primary context (it is destroyed when every user,
// torch included, has released it).
func (c *Context) Release() error {
	c.mu.Lock()
	if c.private != nil {
		c.private.Destroy()
		c.private = nil
	}
	c.mu.Unlock()
	f, err := c.d.fn(fnDevicePrimaryCtxRelease)
	if err != nil {
		return err
	}
	return c.d.check("cuDevicePrimaryCtxRelease", C.gt_int(f, c.Dev.h))
}

// Driver returns the driver the context belongs to.
func (c *Context) Driver() *Driver { return c.d }

// call makes c current on this OS thread and runs the driver function i.
func (c *Context) call(i int, f func(p unsafe.Pointer) C.CUresult) error {
	p, err := c.d.fn(i)
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.d.check("cuCtxSetCurrent", C.gt_ctx(c.d.fns[fnCtxSetCurrent], c.h)); err != nil {
		return err
	}
	return c.d.check(entries[i].name, f(p))
}

// Synchronize waits for all work of the context.
func (c *Context) Synchronize() error {
	return c.call(fnCtxSynchronize, func(p unsafe.Pointer) C.CUresult { return C.gt_void(p) })
}

// ---- memory ------------------------------------------------------------------

// DevicePtr is a device address (CUdeviceptr).
type DevicePtr uint64

// MemAlloc allocates n bytes of device memory.
func (c *Context) MemAlloc(n uint64) (DevicePtr, error) {
	var p C.CUdeviceptr
	err := c.call(fnMemAlloc, func(f unsafe.Pointer) C.CUresult { return C.gt_pdptr_size(f, &p, C.size_t(n)) })
	return DevicePtr(p), err
}

// MemFree frees device memory from MemAlloc.
func (c *Context) MemFree(p DevicePtr) error {
	return c.call(fnMemFree, func(f unsafe.Pointer) C.CUresult { return C.gt_dptr(f, C.CUdeviceptr(p)) })
}

// MemcpyHtoD copies src to device memory on the legacy default stream:
// its DMA may still be pending when it returns, and kernels on
// non-blocking streams are not ordered after it (use MemcpyHtoDNow for
// memory kernels read).
func (c *Context) MemcpyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.call(fnMemcpyHtoD, func(f unsafe.Pointer) C.CUresult {
		return C.gt_dptr_cptr_size(f, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)))
	})
}

// MemcpyDtoH copies device memory to dst (synchronously).
func (c *Context) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.call(fnMemcpyDtoH, func(f unsafe.Pointer) C.CUresult {
		return C.gt_ptr_dptr_size(f, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst)))
	})
}

// MemcpyDtoD copies n bytes between device buffers.
func (c *Context) MemcpyDtoD(dst, src DevicePtr, n uint64) error {
	return c.call(fnMemcpyDtoD, func(f unsafe.Pointer) C.CUresult {
		return C.gt_dptr_dptr_size(f, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n))
	})
}

// MemsetD8Now and MemcpyHtoDNow set device memory that kernels read
// later (a FIFO's zeroing, a plan's tables, a test's inputs). The
// driver's "synchronous" memset and host-to-device copy run on the legacy
// default stream and may still be pending when they return (the memset
// always, the copy's DMA from pageable memory too); a kernel on a
// non-blocking stream (torch's, and gotree's own) is not ordered after
// them, and a caller like torch keeps that stream busy with waits on
// gotree's earlier kernels, so a kernel could read a table before it
// landed. These run on the context's own non-blocking stream and return
// when the memory holds the result.
func (c *Context) MemsetD8Now(p DevicePtr, v byte, n uint64) error {
	s, err := c.privateStream()
	if err != nil {
		return err
	}
	if err := c.MemsetD8Async(p, v, n, s); err != nil {
		return err
	}
	return s.Synchronize()
}

// MemcpyHtoDNow copies src (any host memory) to dst; see MemsetD8Now.
func (c *Context) MemcpyHtoDNow(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	s, err := c.privateStream()
	if err != nil {
		return err
	}
	// From pageable memory the driver stages src before it returns.
	if err := c.call(fnMemcpyHtoDAsync, func(f unsafe.Pointer) C.CUresult {
		return C.gt_dptr_cptr_size_stream(f, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)), s.handle())
	}); err != nil {
		return err
	}
	return s.Synchronize()
}

func (c *Context) privateStream() (*Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.private == nil {
		s, err := c.StreamCreate(StreamNonBlocking)
		if err != nil {
			return nil, err
		}
		c.private = s
	}
	return c.private, nil
}

// MemcpyHtoDAsync copies n bytes from pinned host memory at src (C
// memory, e.g. from MemHostAlloc: never Go memory) on stream s.
func (c *Context) MemcpyHtoDAsync(dst DevicePtr, src uintptr, n uint64, s *Stream) error {
	return c.call(fnMemcpyHtoDAsync, func(f unsafe.Pointer) C.CUresult {
		return C.gt_htod_async(f, C.CUdeviceptr(dst), C.uintptr_t(src), C.size_t(n), s.handle())
	})
}

// MemcpyDtoHAsync copies n bytes to pinned host memory at dst (C memory)
// on stream s.
func (c *Context) MemcpyDtoHAsync(dst uintptr, src DevicePtr, n uint64, s *Stream) error {
	return c.call(fnMemcpyDtoHAsync, func(f unsafe.Pointer) C.CUresult {
		return C.gt_dtoh_async(f, C.uintptr_t(dst), C.CUdeviceptr(src), C.size_t(n), s.handle())
	})
}

// MemcpyDtoDAsync copies n bytes between device buffers on stream s.
func (c *Context) MemcpyDtoDAsync(dst, src DevicePtr, n uint64, s *Stream) error {
	return c.call(fnMemcpyDtoDAsync, func(f unsafe.Pointer) C.CUresult {
		return C.gt_dptr_dptr_size_stream(f, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), s.handle())
	})
}

// MemsetD8 sets n bytes to v on the legacy default stream, asynchronously
// for device memory (use MemsetD8Now for memory kernels read).
func (c *Context) MemsetD8(p DevicePtr, v byte, n uint64) error {
	return c.call(fnMemsetD8, func(f unsafe.Pointer) C.CUresult {
		return C.gt_dptr_uchar_size(f, C.CUdeviceptr(p), C.uchar(v), C.size_t(n))
	})
}

// MemsetD8Async sets n bytes to v on stream s.
func (c *Context) MemsetD8Async(p DevicePtr, v byte, n uint64, s *Stream) error {
	return c.call(fnMemsetD8Async, func(f unsafe.Pointer) C.CUresult {
		return C.gt_dptr_uchar_size_stream(f, C.CUdeviceptr(p), C.uchar(v), C.size_t(n), s.handle())
	})
}

// Host allocation flags (CU_MEMHOSTALLOC_*).
const (
	HostAllocPortable      = 1
	HostAllocDeviceMap     = 2
	HostAllocWriteCombined = 4
)

// MemHostAlloc allocates n bytes of pinned host memory (C memory; its
// address is returned as a uintptr). With HostAllocDeviceMap the device
// can address it: MemHostGetDevicePointer.
func (c *Context) MemHostAlloc(n uint64, flags uint32) (uintptr, error) {
	var p C.uintptr_t
	err := c.call(fnMemHostAlloc, func(f unsafe.Pointer) C.CUresult { return C.gt_host_alloc(f, &p, C.size_t(n), C.uint(flags)) })
	return uintptr(p), err
}

// MemFreeHost frees memory from MemHostAlloc.
func (c *Context) MemFreeHost(p uintptr) error {
	return c.call(fnMemFreeHost, func(f unsafe.Pointer) C.CUresult { return C.gt_free_host(f, C.uintptr_t(p)) })
}

// StoreHostU32 stores v to the uint32 at p (C memory, e.g. from
// MemHostAlloc: a flag the kernels poll), with a sequentially consistent
// atomic store.
func StoreHostU32(p uintptr, v uint32) { C.gt_store_u32(C.uintptr_t(p), C.uint(v)) }

// HostBytes is the n bytes of C memory at p (from MemHostAlloc) as a
// slice; it is valid until MemFreeHost.
func HostBytes(p uintptr, n int) []byte { return unsafe.Slice((*byte)(C.gt_ptr(C.uintptr_t(p))), n) }

// hostAddr is the address of b's first byte (b from HostBytes).
func hostAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// MemHostGetDevicePointer returns the device address of mapped host memory.
func (c *Context) MemHostGetDevicePointer(p uintptr) (DevicePtr, error) {
	var d C.CUdeviceptr
	err := c.call(fnMemHostGetDevicePointer, func(f unsafe.Pointer) C.CUresult {
		return C.gt_host_devptr(f, &d, C.uintptr_t(p))
	})
	return DevicePtr(d), err
}

// IpcMemHandle is a CUipcMemHandle: 64 opaque bytes another process of
// the same machine opens with IpcOpenMemHandle.
type IpcMemHandle [64]byte

// IpcGetMemHandle exports device memory from MemAlloc.
func (c *Context) IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error) {
	var h C.CUipcMemHandle
	err := c.call(fnIpcGetMemHandle, func(f unsafe.Pointer) C.CUresult { return C.gt_pipc_dptr(f, &h, C.CUdeviceptr(p)) })
	var out IpcMemHandle
	C.memcpy(unsafe.Pointer(&out[0]), unsafe.Pointer(&h), 64)
	return out, err
}

// IpcOpenMemHandle maps another process's memory
// (CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS).
func (c *Context) IpcOpenMemHandle(h IpcMemHandle) (DevicePtr, error) {
	var p C.CUdeviceptr
	err := c.call(fnIpcOpenMemHandle, func(f unsafe.Pointer) C.CUresult {
		return C.gt_ipc_open(f, &p, unsafe.Pointer(&h[0]), 1)
	})
	return DevicePtr(p), err
}

// IpcCloseMemHandle unmaps memory from IpcOpenMemHandle.
func (c *Context) IpcCloseMemHandle(p DevicePtr) error {
	return c.call(fnIpcCloseMemHandle, func(f unsafe.Pointer) C.CUresult { return C.gt_dptr(f, C.CUdeviceptr(p)) })
}

// ---- streams and events --------------------------------------------------

// Stream is a CUstream. A nil *Stream is the legacy default stream.
type Stream struct {
	c *Context
	h C.CUstream
}

// Handle is the CUstream as a number (what the C ABI and pg take).
func (s *Stream) Handle() uintptr { return uintptr(unsafe.Pointer(s.handle())) }

func (s *Stream) handle() C.CUstream {
	if s == nil {
		return nil
	}
	return s.h
}

// Stream flags.
const StreamNonBlocking = 1

// StreamCreate creates a stream (flags: StreamNonBlocking or 0).
func (c *Context) StreamCreate(flags uint32) (*Stream, error) {
	var h C.CUstream
	if err := c.call(fnStreamCreate, func(f unsafe.Pointer) C.CUresult { return C.gt_pstream_u(f, &h, C.uint(flags)) }); err != nil {
		return nil, err
	}
	return &Stream{c: c, h: h}, nil
}

// WrapStream adopts a stream created elsewhere (torch's current stream,
// passed through the C ABI as an integer).
func (c *Context) WrapStream(h uintptr) *Stream {
	return &Stream{c: c, h: C.gt_stream_from(C.uintptr_t(h))}
}

// Destroy destroys the stream.
func (s *Stream) Destroy() error {
	return s.c.call(fnStreamDestroy, func(f unsafe.Pointer) C.CUresult { return C.gt_stream(f, s.h) })
}

// Synchronize waits for the stream's work.
func (s *Stream) Synchronize() error {
	return s.c.call(fnStreamSynchronize, func(f unsafe.Pointer) C.CUresult { return C.gt_stream(f, s.h) })
}

// Query reports whether the stream's work is done.
func (s *Stream) Query() (bool, error) {
	err := s.c.call(fnStreamQuery, func(f unsafe.Pointer) C.CUresult { return C.gt_stream(f, s.h) })
	if IsCode(err, cudaErrNotReady) {
		return false, nil
	}
	return err == nil, err
}

// Capturing says whether the stream is capturing a CUDA graph (its
// capture status is active or invalidated).
func (s *Stream) Capturing() (bool, error) {
	var st C.int
	err := s.c.call(fnStreamIsCapturing, func(f unsafe.Pointer) C.CUresult { return C.gt_stream_pint(f, s.h, &st) })
	return st != 0, err
}

// WaitEvent makes future work of the stream wait for e.
func (s *Stream) WaitEvent(e *Event) error {
	return s.c.call(fnStreamWaitEvent, func(f unsafe.Pointer) C.CUresult { return C.gt_stream_event_u(f, s.h, e.h, 0) })
}

// Event is a CUevent.
type Event struct {
	c *Context
	h C.CUevent
}

// Event flags (CU_EVENT_*).
const (
	EventDefault       = 0
	EventBlockingSync  = 1
	EventDisableTiming = 2
	EventInterprocess  = 4
)

// EventCreate creates an event.
func (c *Context) EventCreate(flags uint32) (*Event, error) {
	var h C.CUevent
	if err := c.call(fnEventCreate, func(f unsafe.Pointer) C.CUresult { return C.gt_pevent_u(f, &h, C.uint(flags)) }); err != nil {
		return nil, err
	}
	return &Event{c: c, h: h}, nil
}

// Record records the event on stream s.
func (e *Event) Record(s *Stream) error {
	return e.c.call(fnEventRecord, func(f unsafe.Pointer) C.CUresult { return C.gt_event_stream(f, e.h, s.handle()) })
}

// Synchronize waits for the event.
func (e *Event) Synchronize() error {
	return e.c.call(fnEventSynchronize, func(f unsafe.Pointer) C.CUresult { return C.gt_event(f, e.h) })
}

// Query reports whether the event has completed.
func (e *Event) Query() (bool, error) {
	err := e.c.call(fnEventQuery, func(f unsafe.Pointer) C.CUresult { return C.gt_event(f, e.h) })
	if IsCode(err, cudaErrNotReady) {
		return false, nil
	}
	return err == nil, err
}

// Destroy destroys the event.
func (e *Event) Destroy() error {
	return e.c.call(fnEventDestroy, func(f unsafe.Pointer) C.CUresult { return C.gt_event(f, e.h) })
}

// ElapsedMs is the time between two recorded events in milliseconds.
func ElapsedMs(start, end *Event) (float32, error) {
	var ms C.float
	err := start.c.call(fnEventElapsedTime, func(f unsafe.Pointer) C.CUresult { return C.gt_pfloat_event_event(f, &ms, start.h, end.h) })
	return float32(ms), err
}

// ---- modules and launches ------------------------------------------------

// Module is a loaded CUmodule.
type Module struct {
	c *Context
	h C.CUmodule
}

// ModuleLoadData loads a cubin, PTX or fatbin image.
func (c *Context) ModuleLoadData(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, errors.New("gotree/cuda: empty module image")
	}
	// The driver may keep reading the image during the call only; copy it
	// to C memory so that PTX gets its terminating NUL and no Go memory is
	// passed for longer than the call.
	buf := C.malloc(C.size_t(len(image) + 1))
	defer C.free(buf)
	C.memcpy(buf, unsafe.Pointer(&image[0]), C.size_t(len(image)))
	*(*byte)(unsafe.Add(buf, len(image))) = 0
	var h C.CUmodule
	if err := c.call(fnModuleLoadData, func(f unsafe.Pointer) C.CUresult { return C.gt_pmod_cptr(f, &h, buf) }); err != nil {
		return nil, err
	}
	return &Module{c: c, h: h}, nil
}

// Unload unloads the module.
func (m *Module) Unload() error {
	return m.c.call(fnModuleUnload, func(f unsafe.Pointer) C.CUresult { return C.gt_mod(f, m.h) })
}

// Function is a kernel of a module.
type Function struct {
	m    *Module
	h    C.CUfunction
	Name string
}

// Function looks a kernel up by its (extern "C") name.
func (m *Module) Function(name string) (*Function, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var h C.CUfunction
	if err := m.c.call(fnModuleGetFunction, func(f unsafe.Pointer) C.CUresult { return C.gt_pfunc_mod_cstr(f, &h, m.h, cs) }); err != nil {
		return nil, fmt.Errorf("%w (kernel %s)", err, name)
	}
	return &Function{m: m, h: h, Name: name}, nil
}

// Function attributes (CUfunction_attribute).
const (
	FuncMaxThreadsPerBlock = 0
	FuncSharedSizeBytes    = 1
	FuncNumRegs            = 4
	FuncLocalSizeBytes     = 3
)

// Attribute returns a function attribute.
func (fn *Function) Attribute(a int) (int, error) {
	var x C.int
	err := fn.m.c.call(fnFuncGetAttribute, func(f unsafe.Pointer) C.CUresult { return C.gt_pint_int_func(f, &x, C.int(a), fn.h) })
	return int(x), err
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Launch launches fn on stream s. Each argument is the raw bytes of one
// kernel parameter (see ArgU64, ArgU32, ArgF64, ArgBytes); they are copied
// to C memory for the call.
func (fn *Function) Launch(grid, block Dim3, sharedMem uint32, s *Stream, args ...[]byte) error {
	total := 0
	for _, a := range args {
		total += (len(a) + 15) &^ 15
	}
	n := len(args)
	mem := C.malloc(C.size_t(total + 8*n + 16))
	defer C.free(mem)
	ptrs := unsafe.Slice((*unsafe.Pointer)(mem), n+1)
	data := unsafe.Add(mem, 8*n)
	data = unsafe.Add(data, (16-uintptr(data)%16)%16)
	for i, a := range args {
		if len(a) > 0 {
			C.memcpy(data, unsafe.Pointer(&a[0]), C.size_t(len(a)))
		}
		ptrs[i] = data
		data = unsafe.Add(data, (len(a)+15)&^15)
	}
	var params *unsafe.Pointer
	if n > 0 {
		params = (*unsafe.Pointer)(mem)
	}
	if grid.Y == 0 {
		grid.Y = 1
	}
	if grid.Z == 0 {
		grid.Z = 1
	}
	if block.Y == 0 {
		block.Y = 1
	}
	if block.Z == 0 {
		block.Z = 1
	}
	err := fn.m.c.call(fnLaunchKernel, func(f unsafe.Pointer) C.CUresult {
		return C.gt_launch(f, fn.h, C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z),
			C.uint(block.X), C.uint(block.Y), C.uint(block.Z), C.uint(sharedMem), s.handle(), params)
	})
	if err != nil {
		return fmt.Errorf("%w (kernel %s)", err, fn.Name)
	}
	return nil
}
