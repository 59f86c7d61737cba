package cuda

// NVRTC, loaded at run time, compiles the embedded kernel sources for a
// device the fatbin has no code for (nvcc 13 cannot target sm_70).

/*
#include <dlfcn.h>
#include <stdlib.h>
#include <stddef.h>

typedef int nvrtcResult;
typedef void *nvrtcProgram;

static void *gt_dlsym_nv(void *h, const char *name) { return dlsym(h, name); }

static nvrtcResult nv_version(void *f, int *a, int *b) { return ((nvrtcResult(*)(int *, int *))f)(a, b); }
static const char *nv_errstr(void *f, nvrtcResult r) { return ((const char *(*)(nvrtcResult))f)(r); }
static nvrtcResult nv_create(void *f, nvrtcProgram *p, const char *src, const char *name, int n,
		const char **hdrs, const char **names) {
	return ((nvrtcResult(*)(nvrtcProgram *, const char *, const char *, int, const char *const *,
		const char *const *))f)(p, src, name, n, hdrs, names);
}
static nvrtcResult nv_destroy(void *f, nvrtcProgram *p) { return ((nvrtcResult(*)(nvrtcProgram *))f)(p); }
static nvrtcResult nv_compile(void *f, nvrtcProgram p, int n, const char **opts) {
	return ((nvrtcResult(*)(nvrtcProgram, int, const char *const *))f)(p, n, opts);
}
static nvrtcResult nv_size(void *f, nvrtcProgram p, size_t *n) { return ((nvrtcResult(*)(nvrtcProgram, size_t *))f)(p, n); }
static nvrtcResult nv_get(void *f, nvrtcProgram p, char *s) { return ((nvrtcResult(*)(nvrtcProgram, char *))f)(p, s); }
*/
import "C"

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unsafe"
)

// ErrNoNVRTC is wrapped by LoadNVRTC's error when no NVRTC library opens.
var ErrNoNVRTC = errors.New("no NVRTC library")

// NVRTCLibraries are the names LoadNVRTC tries without a path. A
// process that imported torch with CUDA usually has one of them loaded
// already (or findable through torch's nvidia-cuda-nvrtc wheel).
var NVRTCLibraries = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}

// NVRTC is a loaded libnvrtc.
type NVRTC struct {
	path         string
	major, minor int
	fns          map[string]unsafe.Pointer
}

var nvrtcSyms = []string{"nvrtcVersion", "nvrtcGetErrorString", "nvrtcCreateProgram", "nvrtcDestroyProgram",
	"nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog", "nvrtcGetCUBINSize", "nvrtcGetCUBIN"}

// LoadNVRTC opens the NVRTC library at path if it is not empty (pg passes
// $GOTREE_NVRTC), else the first of NVRTCLibraries that opens.
func LoadNVRTC(path string) (*NVRTC, error) {
	if path != "" {
		return LoadNVRTCFrom(path)
	}
	var tried []string
	for _, p := range NVRTCLibraries {
		n, err := LoadNVRTCFrom(p)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, ErrNoNVRTC) {
			return nil, err
		}
		tried = append(tried, p)
	}
	return nil, fmt.Errorf("gotree/cuda: %w: tried %s; install NVRTC (the CUDA toolkit, or pip's nvidia-cuda-nvrtc) or set GOTREE_NVRTC to its path",
		ErrNoNVRTC, strings.Join(tried, ", "))
}

// LoadNVRTCFrom opens the NVRTC library at path. When path names a file,
// the libnvrtc-builtins library beside it is opened first: NVRTC opens it
// by soname, which only the library search path (or an already loaded
// copy) resolves, and pip's CUDA 13 wheel does not set an rpath for it.
func LoadNVRTCFrom(path string) (*NVRTC, error) {
	if strings.Contains(path, "/") {
		builtins, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "libnvrtc-builtins.so*"))
		for _, b := range builtins {
			if strings.Contains(filepath.Base(b), ".alt.") {
				continue
			}
			dlopen(b, true) // best effort; a failure shows at compile time
		}
	}
	lib, err := dlopen(path, false)
	if err != nil {
		return nil, fmt.Errorf("gotree/cuda: %w: %s not found (%v)", ErrNoNVRTC, path, err)
	}
	n := &NVRTC{path: path, fns: map[string]unsafe.Pointer{}}
	for _, s := range nvrtcSyms {
		cn := C.CString(s)
		p := C.gt_dlsym_nv(lib, cn)
		C.free(unsafe.Pointer(cn))
		if p == nil {
			return nil, fmt.Errorf("gotree/cuda: %s is not a usable NVRTC (no %s; NVRTC 11.2 or newer is needed)", path, s)
		}
		n.fns[s] = p
	}
	var a, b C.int
	if r := C.nv_version(n.fns["nvrtcVersion"], &a, &b); r != 0 {
		return nil, n.err("nvrtcVersion", r, "")
	}
	n.major, n.minor = int(a), int(b)
	return n, nil
}

// Version is NVRTC's CUDA version.
func (n *NVRTC) Version() (major, minor int) { return n.major, n.minor }

// Path is the library that was opened.
func (n *NVRTC) Path() string { return n.path }

func (n *NVRTC) err(fn string, r C.nvrtcResult, log string) error {
	name := C.GoString(C.nv_errstr(n.fns["nvrtcGetErrorString"], r))
	if log != "" {
		return fmt.Errorf("gotree/cuda: %s: %s (%d):\n%s", fn, name, int(r), log)
	}
	return fmt.Errorf("gotree/cuda: %s: %s (%d)", fn, name, int(r))
}

// Compile compiles src (named name) with in-memory headers and options and
// returns the CUBIN image.
func (n *NVRTC) Compile(name string, src []byte, headers map[string][]byte, opts []string) ([]byte, error) {
	var toFree []unsafe.Pointer
	defer func() {
		for _, p := range toFree {
			C.free(p)
		}
	}()
	cstr := func(s string) *C.char {
		p := C.CString(s)
		toFree = append(toFree, unsafe.Pointer(p))
		return p
	}
	carr := func(ss []string) **C.char {
		if len(ss) == 0 {
			return nil
		}
		mem := C.malloc(C.size_t(len(ss)) * C.size_t(unsafe.Sizeof(uintptr(0))))
		toFree = append(toFree, mem)
		arr := unsafe.Slice((**C.char)(mem), len(ss))
		for i, s := range ss {
			arr[i] = cstr(s)
		}
		return (**C.char)(mem)
	}
	var hnames, hsrcs []string
	for k, v := range headers {
		hnames = append(hnames, k)
		hsrcs = append(hsrcs, string(v))
	}
	var prog C.nvrtcProgram
	if r := C.nv_create(n.fns["nvrtcCreateProgram"], &prog, cstr(string(src)), cstr(name), C.int(len(hnames)),
		carr(hsrcs), carr(hnames)); r != 0 {
		return nil, n.err("nvrtcCreateProgram", r, "")
	}
	defer C.nv_destroy(n.fns["nvrtcDestroyProgram"], &prog)
	r := C.nv_compile(n.fns["nvrtcCompileProgram"], prog, C.int(len(opts)), carr(opts))
	var logSize C.size_t
	log := ""
	if C.nv_size(n.fns["nvrtcGetProgramLogSize"], prog, &logSize) == 0 && logSize > 1 {
		buf := C.malloc(logSize)
		toFree = append(toFree, buf)
		if C.nv_get(n.fns["nvrtcGetProgramLog"], prog, (*C.char)(buf)) == 0 {
			log = strings.TrimSpace(C.GoString((*C.char)(buf)))
		}
	}
	if r != 0 {
		return nil, n.err("nvrtcCompileProgram", r, log)
	}
	var size C.size_t
	if r := C.nv_size(n.fns["nvrtcGetCUBINSize"], prog, &size); r != 0 {
		return nil, n.err("nvrtcGetCUBINSize", r, "")
	}
	if size == 0 {
		return nil, errors.New("gotree/cuda: NVRTC produced an empty CUBIN")
	}
	buf := C.malloc(size)
	toFree = append(toFree, buf)
	if r := C.nv_get(n.fns["nvrtcGetCUBIN"], prog, (*C.char)(buf)); r != 0 {
		return nil, n.err("nvrtcGetCUBIN", r, "")
	}
	return C.GoBytes(buf, C.int(size)), nil
}

// NVRTCOptions are the options CompileKernels passes besides the
// architecture; they mirror build_kernels.sh's nvcc flags.
var NVRTCOptions = []string{"-std=c++17", "--fmad=false", "-default-device"}

// CompileKernels compiles the embedded kernel sources to a CUBIN for
// compute capability cc (×10, e.g. 70).
func (n *NVRTC) CompileKernels(cc int) ([]byte, error) {
	files := SourceFiles()
	src, ok := files["gotree.cu"]
	if !ok {
		return nil, errors.New("gotree/cuda: embedded kernel source gotree.cu is missing")
	}
	headers := map[string][]byte{}
	for k, v := range files {
		if strings.HasSuffix(k, ".cuh") {
			headers[k] = v
		}
	}
	opts := append([]string{fmt.Sprintf("--gpu-architecture=sm_%d", cc)}, NVRTCOptions...)
	img, err := n.Compile("gotree.cu", src, headers, opts)
	if err != nil {
		return nil, fmt.Errorf("gotree/cuda: compiling the kernels for sm_%d with %s: %w", cc, n.path, err)
	}
	return img, nil
}
