package pg

import (
	"fmt"
	"strings"
)

// CPUAllocator is GOTREE_CPU_ALLOCATOR: "shared" puts the CPU tensors
// torch allocates from then on (of MinBytes and more) into shared buffers
// (gotree_mem_alloc), so that direct plans reach every rank's tensors
// through mappings - DDP's buckets and FSDP's gradients included - and
// keeps up to CacheBytes of freed ones for reuse. Unset or "default":
// torch's allocator (MinBytes 0).
type CPUAllocator struct {
	MinBytes   int64 // tensors of at least this many bytes are shared; 0: off
	CacheBytes int64 // freed shared buffers kept for reuse
}

// The defaults of GOTREE_CPU_ALLOCATOR=shared.
const (
	DefaultSharedMinBytes   = 256 << 10
	DefaultSharedCacheBytes = 1 << 30
)

// ParseCPUAllocator reads GOTREE_CPU_ALLOCATOR: "" or "default" (off), or
// "shared" followed by optional ",min_bytes:SIZE" and ",cache_bytes:SIZE"
// (PYTORCH_CUDA_ALLOC_CONF's key:value habit; SIZE as ParseSize reads it:
// "shared,min_bytes:1M,cache_bytes:2G").
func ParseCPUAllocator(v string) (CPUAllocator, error) {
	fields := strings.Split(strings.TrimSpace(v), ",")
	switch strings.ToLower(strings.TrimSpace(fields[0])) {
	case "", "default":
		if len(fields) > 1 {
			break
		}
		return CPUAllocator{}, nil
	case "shared":
		a := CPUAllocator{MinBytes: DefaultSharedMinBytes, CacheBytes: DefaultSharedCacheBytes}
		for _, f := range fields[1:] {
			key, val, _ := strings.Cut(strings.TrimSpace(f), ":")
			n, err := ParseSize(val)
			switch {
			case key == "min_bytes" && err == nil && n >= 1:
				a.MinBytes = n
			case key == "cache_bytes" && err == nil:
				a.CacheBytes = n
			case key != "min_bytes" && key != "cache_bytes":
				return CPUAllocator{}, fmt.Errorf("gotree: GOTREE_CPU_ALLOCATOR=%q: unknown option %q (want min_bytes:SIZE or cache_bytes:SIZE)", v, key)
			default:
				return CPUAllocator{}, fmt.Errorf("gotree: GOTREE_CPU_ALLOCATOR=%q: %s wants a size such as 256K or 1G (min_bytes at least 1), not %q", v, key, val)
			}
		}
		return a, nil
	}
	return CPUAllocator{}, fmt.Errorf("gotree: GOTREE_CPU_ALLOCATOR=%q: want default or shared[,min_bytes:SIZE][,cache_bytes:SIZE]", v)
}
