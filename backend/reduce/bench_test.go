package reduce

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
)

// Run with few iterations on the shared 2-core machine, e.g.
//
//	go test -run '^$' -bench . -benchtime 200ms -count 3 ./backend/reduce/
//
// SetBytes is the length of dst: an in-place reduction of n bytes reads 2n
// and writes n, a copy of n bytes reads n and writes n (docs/reductions.md
// compares the two as memory traffic).

var benchSizes = []struct {
	name string
	n    int
}{{"64KiB", 64 << 10}, {"64MiB", 64 << 20}}

// benchBufs returns two buffers of n bytes holding small normal values of
// dt (no NaN, no subnormals: nothing that takes a slow path in hardware),
// touched once so that page faults stay out of the timing.
func benchBufs(n int, dt algorithms.DType) (dst, src []byte) {
	dst, src = make([]byte, n), make([]byte, n)
	le := binary.LittleEndian
	sz := dt.Size()
	for o := 0; o+sz <= n; o += sz {
		v := 1 + float64(o%97)/128
		switch dt {
		case algorithms.Float32:
			le.PutUint32(src[o:], math.Float32bits(float32(v)))
		case algorithms.Float64:
			le.PutUint64(src[o:], math.Float64bits(v))
		case algorithms.Float16:
			le.PutUint16(src[o:], algorithms.Float32ToFloat16(float32(v)))
		case algorithms.BFloat16:
			le.PutUint16(src[o:], algorithms.Float32ToBFloat16(float32(v)))
		default:
			src[o] = byte(o)
		}
	}
	copy(dst, src)
	return dst, src
}

func BenchmarkCopy(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			dst, src := benchBufs(s.n, algorithms.Uint8)
			b.SetBytes(int64(s.n))
			b.ResetTimer()
			for range b.N {
				copy(dst, src)
			}
		})
	}
}

var benchDTypes = []algorithms.DType{
	algorithms.Float32, algorithms.Float64, algorithms.Int32, algorithms.Int64,
	algorithms.BFloat16, algorithms.Float16, algorithms.Uint32, algorithms.Float8E4M3, algorithms.Float8E5M2,
}

// BenchmarkSum: in place, dst = dst + src (Into).
func BenchmarkSum(b *testing.B) {
	for _, dt := range benchDTypes {
		for _, s := range benchSizes {
			b.Run(fmt.Sprintf("%v/%s", dt, s.name), func(b *testing.B) {
				dst, src := benchBufs(s.n, dt)
				Into(dst, src, dt, algorithms.Sum)
				b.SetBytes(int64(s.n))
				b.ResetTimer()
				for range b.N {
					Into(dst, src, dt, algorithms.Sum)
				}
			})
		}
	}
}

// BenchmarkSum3: out of place, dst = a + b (Into3) into a third buffer.
func BenchmarkSum3(b *testing.B) {
	for _, dt := range []algorithms.DType{algorithms.Float32, algorithms.BFloat16} {
		for _, s := range benchSizes {
			b.Run(fmt.Sprintf("%v/%s", dt, s.name), func(b *testing.B) {
				x, y := benchBufs(s.n, dt)
				dst := make([]byte, s.n)
				Into3(dst, x, y, dt, algorithms.Sum)
				b.SetBytes(int64(s.n))
				b.ResetTimer()
				for range b.N {
					Into3(dst, x, y, dt, algorithms.Sum)
				}
			})
		}
	}
}

// BenchmarkGoReference: the pure-Go oracle, for comparison.
func BenchmarkGoReference(b *testing.B) {
	for _, dt := range []algorithms.DType{algorithms.Float32, algorithms.BFloat16, algorithms.Float16} {
		b.Run(fmt.Sprintf("%v/64KiB", dt), func(b *testing.B) {
			dst, src := benchBufs(64<<10, dt)
			b.SetBytes(64 << 10)
			b.ResetTimer()
			for range b.N {
				algorithms.ReduceInto(dst, src, dt, algorithms.Sum)
			}
		})
	}
}

// BenchmarkSmall measures the cgo call against the Go reference at small
// sizes, to place SmallBytes.
func BenchmarkSmall(b *testing.B) {
	for _, dt := range []algorithms.DType{algorithms.Float32, algorithms.BFloat16, algorithms.Int64} {
		for _, n := range []int{8, 16, 32, 64, 128, 256} {
			dst, src := benchBufs(n, dt)
			b.Run(fmt.Sprintf("%v/%dB/cgo", dt, n), func(b *testing.B) {
				for range b.N {
					kernel3(dst, dst, src, n/dt.Size(), dt, algorithms.Sum)
				}
			})
			b.Run(fmt.Sprintf("%v/%dB/go", dt, n), func(b *testing.B) {
				for range b.N {
					algorithms.ReduceInto(dst, src, dt, algorithms.Sum)
				}
			})
		}
	}
}

func BenchmarkFinalizeAvg(b *testing.B) {
	for _, dt := range []algorithms.DType{algorithms.Float32, algorithms.BFloat16, algorithms.Float16, algorithms.Int32, algorithms.Int64} {
		for _, nr := range []int{3, 4} { // 4: a power of two multiplies by 1/4 instead
			b.Run(fmt.Sprintf("%v/64KiB/n%d", dt, nr), func(b *testing.B) {
				dst, _ := benchBufs(64<<10, dt)
				b.SetBytes(64 << 10)
				for range b.N {
					Finalize(dst, dt, algorithms.Avg, nr)
				}
			})
		}
	}
}

// BenchmarkSumVsCopy times a copy and an in-place Sum of the same size
// back to back in every iteration and reports the best time of each, so
// that the ratio survives the noise of a shared machine: copy-GB/s and
// sum-GB/s count payload bytes (len(dst)), sum/copy their ratio, and
// traffic-ratio compares memory traffic (the Sum moves 3 bytes per payload
// byte: reads dst and src, writes dst; the copy 2).
func BenchmarkSumVsCopy(b *testing.B) {
	for _, dt := range []algorithms.DType{algorithms.Float32, algorithms.Float64, algorithms.Int32, algorithms.Int64, algorithms.BFloat16, algorithms.Float16} {
		for _, s := range benchSizes {
			b.Run(fmt.Sprintf("%v/%s", dt, s.name), func(b *testing.B) {
				dst, src := benchBufs(s.n, dt)
				cdst := make([]byte, s.n)
				copy(cdst, src)
				bestCopy, bestSum := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
				b.ResetTimer()
				for range b.N {
					t0 := time.Now()
					copy(cdst, src)
					t1 := time.Now()
					Into(dst, src, dt, algorithms.Sum)
					t2 := time.Now()
					bestCopy = min(bestCopy, t1.Sub(t0))
					bestSum = min(bestSum, t2.Sub(t1))
				}
				cg := float64(s.n) / bestCopy.Seconds() / 1e9
				sg := float64(s.n) / bestSum.Seconds() / 1e9
				b.ReportMetric(cg, "copy-GB/s")
				b.ReportMetric(sg, "sum-GB/s")
				b.ReportMetric(sg/cg, "sum/copy")
				b.ReportMetric(1.5*sg/cg, "traffic-ratio")
			})
		}
	}
}

// BenchmarkPlainGo: the loops a Go programmer would write, with typed
// slices (unlike the byte-slice reference): what the C kernels replace.
func BenchmarkPlainGo(b *testing.B) {
	b.Run("float32/64KiB", func(b *testing.B) {
		dst, src := benchBufs(64<<10, algorithms.Float32)
		d := unsafe.Slice((*float32)(unsafe.Pointer(&dst[0])), len(dst)/4)
		s := unsafe.Slice((*float32)(unsafe.Pointer(&src[0])), len(src)/4)
		b.SetBytes(64 << 10)
		for range b.N {
			for i := range d {
				d[i] += s[i]
			}
		}
	})
	b.Run("bfloat16/64KiB", func(b *testing.B) {
		dst, src := benchBufs(64<<10, algorithms.BFloat16)
		d := unsafe.Slice((*uint16)(unsafe.Pointer(&dst[0])), len(dst)/2)
		s := unsafe.Slice((*uint16)(unsafe.Pointer(&src[0])), len(src)/2)
		b.SetBytes(64 << 10)
		for range b.N {
			for i := range d {
				d[i] = algorithms.Float32ToBFloat16(math.Float32frombits(uint32(d[i])<<16) + math.Float32frombits(uint32(s[i])<<16))
			}
		}
	})
	b.Run("float16/64KiB", func(b *testing.B) {
		dst, src := benchBufs(64<<10, algorithms.Float16)
		d := unsafe.Slice((*uint16)(unsafe.Pointer(&dst[0])), len(dst)/2)
		s := unsafe.Slice((*uint16)(unsafe.Pointer(&src[0])), len(src)/2)
		b.SetBytes(64 << 10)
		for range b.N {
			for i := range d {
				d[i] = algorithms.Float32ToFloat16(algorithms.Float16ToFloat32(d[i]) + algorithms.Float16ToFloat32(s[i]))
			}
		}
	})
}
