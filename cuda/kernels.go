package cuda

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gotree/gotree/algorithms"
)

// The kernels: the fatbin cuda/build_kernels.sh builds (SASS for sm_75,
// sm_80, sm_86, sm_89, sm_90, PTX for compute_90), the hash file that says
// which sources it was built from, and the sources themselves (NVRTC
// compiles them for devices the fatbin cannot serve).

//go:embed kernels.fatbin
var fatbin []byte

//go:embed kernels.fatbin.sha256
var fatbinHashFile string

//go:embed kernels/*.cu kernels/*.cuh
var kernelSources embed.FS

// Fatbin returns the embedded fatbin image.
func Fatbin() []byte { return fatbin }

// SASSArchs are the compute capabilities (×10) with SASS in the fatbin;
// the driver also runs a cubin on a later minor version of the same major.
var SASSArchs = []int{75, 80, 86, 89, 90}

// PTXArch is the virtual architecture whose PTX the fatbin carries.
const PTXArch = 90

// SourceFiles returns the kernel sources by base name ("gotree.cu", ...).
func SourceFiles() map[string][]byte {
	out := map[string][]byte{}
	names, _ := fs.Glob(kernelSources, "kernels/*")
	for _, n := range names {
		b, _ := kernelSources.ReadFile(n)
		out[strings.TrimPrefix(n, "kernels/")] = b
	}
	return out
}

// SourceHash is the hash build_kernels.sh records on its "sources" line:
// sha256 over, for each source in byte order of its path
// ("kernels/abi.cuh", ...), the path, a newline, the decimal length, a
// newline and the bytes.
func SourceHash() string {
	files := SourceFiles()
	var paths []string
	for n := range files {
		if strings.HasSuffix(n, ".cu") || strings.HasSuffix(n, ".cuh") {
			paths = append(paths, "kernels/"+n)
		}
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		b := files[strings.TrimPrefix(p, "kernels/")]
		fmt.Fprintf(h, "%s\n%s\n", p, strconv.Itoa(len(b)))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// FatbinInfo is what kernels.fatbin.sha256 records.
type FatbinInfo struct {
	Sources string // SourceHash of the sources it was built from
	NVCC    string // nvcc's version line
	Flags   string // nvcc's flags
	Full    string // hash of Sources and NVCC
	Fatbin  string // sha256 of kernels.fatbin
}

// EmbeddedFatbinInfo parses the embedded hash file.
func EmbeddedFatbinInfo() FatbinInfo {
	var fi FatbinInfo
	for _, line := range strings.Split(fatbinHashFile, "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch k {
		case "sources":
			fi.Sources = v
		case "nvcc":
			fi.NVCC = v
		case "flags":
			fi.Flags = v
		case "full":
			fi.Full = v
		case "fatbin":
			fi.Fatbin = v
		}
	}
	return fi
}

// KernelName returns the name of the kernel that runs plans of the given
// dtype and op (reducing collectives), or the copy kernel when reduces is
// false. Avg and PremulSum reduce as Sum.
func KernelName(dt algorithms.DType, op algorithms.Op, reduces bool) (string, error) {
	if !reduces {
		return "gotree_run_i8_sum", nil
	}
	if err := algorithms.Supports(op, dt); err != nil {
		return "", err
	}
	if op == algorithms.Avg || op == algorithms.PremulSum {
		op = algorithms.Sum
	}
	ops := map[algorithms.Op]string{algorithms.Sum: "sum", algorithms.Prod: "prod", algorithms.Min: "min",
		algorithms.Max: "max", algorithms.BAnd: "band", algorithms.BOr: "bor", algorithms.BXor: "bxor"}
	o := ops[op]
	switch dt {
	case algorithms.Float32, algorithms.Complex64:
		return "gotree_run_f32_" + o, nil
	case algorithms.Float64, algorithms.Complex128:
		return "gotree_run_f64_" + o, nil
	case algorithms.Float16:
		return "gotree_run_f16_" + o, nil
	case algorithms.BFloat16:
		return "gotree_run_bf16_" + o, nil
	case algorithms.Int8:
		return "gotree_run_i8_" + o, nil
	case algorithms.Uint8, algorithms.Uint16, algorithms.Uint32, algorithms.Uint64:
		// Sums, products and bitwise ops are the signed kernels' (the same
		// bits); the orderings are the unsigned ones.
		if op == algorithms.Min || op == algorithms.Max {
			return "gotree_run_u" + strconv.Itoa(8*dt.Size()) + "_" + o, nil
		}
		return "gotree_run_i" + strconv.Itoa(8*dt.Size()) + "_" + o, nil
	case algorithms.Int16:
		return "gotree_run_i16_" + o, nil
	case algorithms.Int32:
		return "gotree_run_i32_" + o, nil
	case algorithms.Int64:
		return "gotree_run_i64_" + o, nil
	case algorithms.Float8E4M3:
		return "gotree_run_f8e4m3_" + o, nil
	case algorithms.Float8E5M2:
		return "gotree_run_f8e5m2_" + o, nil
	case algorithms.Bool:
		switch op {
		case algorithms.Sum, algorithms.Max, algorithms.BOr:
			return "gotree_run_bool_or", nil
		case algorithms.Prod, algorithms.Min, algorithms.BAnd:
			return "gotree_run_bool_and", nil
		default:
			return "gotree_run_bool_xor", nil
		}
	}
	return "", fmt.Errorf("gotree/cuda: no kernel for %v %v", dt, op)
}

// FinalizeKernel returns the kernel that divides an Avg result by the rank
// count (Finalize), or "" when op needs none.
func FinalizeKernel(dt algorithms.DType, op algorithms.Op) string {
	if op != algorithms.Avg {
		return ""
	}
	switch dt {
	case algorithms.Float32, algorithms.Complex64:
		return "gotree_finalize_f32"
	case algorithms.Float64, algorithms.Complex128:
		return "gotree_finalize_f64"
	case algorithms.Float16:
		return "gotree_finalize_f16"
	case algorithms.BFloat16:
		return "gotree_finalize_bf16"
	case algorithms.Int8:
		return "gotree_finalize_i8"
	case algorithms.Uint8:
		return "gotree_finalize_u8"
	case algorithms.Int16:
		return "gotree_finalize_i16"
	case algorithms.Int32:
		return "gotree_finalize_i32"
	case algorithms.Int64:
		return "gotree_finalize_i64"
	case algorithms.Uint16:
		return "gotree_finalize_u16"
	case algorithms.Uint32:
		return "gotree_finalize_u32"
	case algorithms.Uint64:
		return "gotree_finalize_u64"
	case algorithms.Float8E4M3:
		return "gotree_finalize_f8e4m3"
	case algorithms.Float8E5M2:
		return "gotree_finalize_f8e5m2"
	}
	return ""
}

// ScaleKernel returns the kernel that premultiplies a PremulSum operand
// (ScaleInto), or "" for dtypes that have none.
func ScaleKernel(dt algorithms.DType) string {
	switch dt {
	case algorithms.Float32, algorithms.Complex64:
		return "gotree_scale_f32"
	case algorithms.Float64, algorithms.Complex128:
		return "gotree_scale_f64"
	case algorithms.Float16:
		return "gotree_scale_f16"
	case algorithms.BFloat16:
		return "gotree_scale_bf16"
	case algorithms.Float8E4M3:
		return "gotree_scale_f8e4m3"
	case algorithms.Float8E5M2:
		return "gotree_scale_f8e5m2"
	}
	return ""
}

// Kernels is the loaded kernel module of one context.
type Kernels struct {
	Module *Module
	// Source says where the image came from: "fatbin" or "nvrtc sm_XY".
	Source string
	ctx    *Context
	mu     sync.Mutex
	funcs  map[string]*Function
}

// KernelOptions say where LoadKernels finds NVRTC and caches what it
// compiles (pg fills them from GOTREE_NVRTC and GOTREE_CACHE_DIR).
type KernelOptions struct {
	ForceNVRTC bool   // compile with NVRTC even when the fatbin loads
	NVRTC      string // the NVRTC library; "" tries NVRTCLibraries
	CacheDir   string // compiled CUBINs; "" is the user cache directory's gotree/
}

// LoadKernels loads the embedded fatbin into ctx. When the driver cannot
// use it (a device with no SASS in it and older than the PTX, e.g. sm_70,
// or a driver older than the compiler) or with opt.ForceNVRTC, it compiles
// the embedded sources with NVRTC (LoadNVRTC) for the device.
func LoadKernels(ctx *Context, opt KernelOptions) (*Kernels, error) {
	if !opt.ForceNVRTC {
		m, err := ctx.ModuleLoadData(fatbin)
		if err == nil {
			return (&Kernels{Module: m, Source: "fatbin", ctx: ctx, funcs: map[string]*Function{}}).preload()
		}
		if !IsCode(err, cudaErrNoBinaryGPU) && !IsCode(err, cudaErrUnsupPTX) && !IsCode(err, cudaErrInvalidPTX) &&
			!IsCode(err, cudaErrInvalidImage) && !IsCode(err, cudaErrNoJIT) {
			return nil, err
		}
	}
	major, minor, err := ctx.Dev.ComputeCapability()
	if err != nil {
		return nil, err
	}
	nv, err := LoadNVRTC(opt.NVRTC)
	if err != nil {
		return nil, fmt.Errorf("gotree/cuda: the embedded kernels have no code for compute capability %d.%d and NVRTC is needed: %w", major, minor, err)
	}
	img, err := nv.cachedCompile(major*10+minor, opt.CacheDir)
	if err != nil {
		return nil, err
	}
	m, err := ctx.ModuleLoadData(img)
	if err != nil {
		return nil, err
	}
	return (&Kernels{Module: m, Source: fmt.Sprintf("nvrtc sm_%d%d", major, minor), ctx: ctx, funcs: map[string]*Function{}}).preload()
}

// cachedCompile is CompileKernels with an on-disk cache (NVRTC takes
// tens of seconds): dir, else the user cache directory's gotree/, keyed by
// the source hash, the NVRTC version and the device.
func (n *NVRTC) cachedCompile(cc int, dir string) ([]byte, error) {
	if dir == "" {
		if d, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(d, "gotree")
		}
	}
	ma, mi := n.Version()
	name := fmt.Sprintf("kernels-%s-nvrtc%d.%d-sm_%d.cubin", SourceHash()[:16], ma, mi, cc)
	if dir != "" {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil && len(b) > 0 {
			return b, nil
		}
	}
	img, err := n.CompileKernels(cc)
	if err != nil {
		return nil, err
	}
	if dir != "" && os.MkdirAll(dir, 0o755) == nil {
		// Best effort: write a temporary file and rename it into place.
		if f, err := os.CreateTemp(dir, name+".tmp*"); err == nil {
			_, werr := f.Write(img)
			cerr := f.Close()
			if werr == nil && cerr == nil {
				os.Rename(f.Name(), filepath.Join(dir, name))
			} else {
				os.Remove(f.Name())
			}
		}
	}
	return img, nil
}

// preload looks every kernel up once. With lazy module loading (the
// default since CUDA 12) a kernel is loaded when it is first looked up,
// which may synchronize the context; looking them all up before any
// launch keeps that away from kernels that spin waiting for each other.
func (k *Kernels) preload() (*Kernels, error) {
	for _, n := range KernelNames(string(SourceFiles()["gotree.cu"])) {
		if _, err := k.Func(n); err != nil {
			k.Module.Unload()
			return nil, err
		}
	}
	return k, nil
}

// KernelNames lists every kernel src (gotree.cu) defines, expanding its
// GT_RUN, GT_RUN_<kind> and GT_FINALIZE_INT macros (a kind it does not
// know gives a name no fatbin has, so the tests that compare fail).
func KernelNames(src string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^GT_RUN\((\w+),`).FindAllStringSubmatch(src, -1) {
		out = append(out, "gotree_run_"+m[1])
	}
	// GT_RUN_<kind>(ty, ...): one kernel per op of the kind.
	kindOps := map[string][]string{
		"F": {"sum", "prod", "min", "max"}, "H": {"sum", "prod", "min", "max"}, "F8": {"sum", "prod", "min", "max"},
		"ORD": {"min", "max"}, "INT": {"sum", "prod", "min", "max", "band", "bor", "bxor"},
	}
	for _, m := range regexp.MustCompile(`(?m)^GT_RUN_(\w+)\((\w+),`).FindAllStringSubmatch(src, -1) {
		ops, ok := kindOps[m[1]]
		if !ok {
			out = append(out, "unknown macro GT_RUN_"+m[1])
		}
		for _, op := range ops {
			out = append(out, "gotree_run_"+m[2]+"_"+op)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^GT_FINALIZE_INT\((\w+),`).FindAllStringSubmatch(src, -1) {
		out = append(out, "gotree_finalize_"+m[1])
	}
	for _, m := range regexp.MustCompile(`extern "C" __global__ void (gotree_\w+)\(`).FindAllStringSubmatch(src, -1) {
		out = append(out, m[1])
	}
	return out
}

// Func returns a kernel by name (cached).
func (k *Kernels) Func(name string) (*Function, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f, ok := k.funcs[name]; ok {
		return f, nil
	}
	f, err := k.Module.Function(name)
	if err != nil {
		return nil, err
	}
	k.funcs[name] = f
	return f, nil
}
