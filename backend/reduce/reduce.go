// Package reduce holds gotree's fast reduction kernels: the elementwise
// ops of a collective (dst = op(dst, src)), the Avg finalisation and the
// PremulSum premultiplication, for every dtype and op that
// algorithms.Supports accepts.
//
// The semantics are exactly those of the pure-Go reference in
// package algorithms (ReduceInto, Finalize, ScaleInto): results are
// bitwise identical, except that where a result is a NaN only its NaN-ness
// is guaranteed, not its payload. The kernels are C, vectorised for
// AVX-512, AVX2 or baseline x86-64 (chosen from CPUID on first use), and reached
// through cgo, which stays inside this package (the data plane's other
// packages are pure Go). Slices shorter than a cgo call is worth are
// handled by the Go reference.
//
// Slices may be Go memory or C memory (tensor storage viewed with
// unsafe.Slice) and need no particular alignment. The kernels keep no
// pointer after they return.
package reduce

/*
#cgo CFLAGS: -O3 -std=gnu11 -Wall -Wno-unused-function
#include "kernels.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
)

// smallBytes is the length in bytes below which Into, Into3, Finalize and
// Scale run the Go reference instead of calling into C. A cgo call costs
// ~45 ns here (BenchmarkSmall, docs/reductions.md); the reference matches
// that at ~40-64 bytes of float32 or int64 but at only 8-16 bytes of
// float16/bfloat16.
func smallBytes(dt algorithms.DType) int {
	if dt == algorithms.Float16 || dt == algorithms.BFloat16 || dt.IsFloat8() {
		return 16
	}
	return 64
}

// Into computes dst[i] = op(dst[i], src[i]) for the len(dst)/dt.Size()
// elements of dtype dt. Avg and PremulSum reduce as Sum (see Finalize and
// Scale). It panics if Supports(op, dt) fails, if len(src) != len(dst), if
// the length is not a multiple of dt.Size(), or if dst and src overlap
// without being the same slice.
func Into(dst, src []byte, dt algorithms.DType, op algorithms.Op) {
	n := check("Into", dst, src, dt, op)
	if n == 0 {
		return
	}
	checkOverlap("Into", dst, src)
	if len(dst) < smallBytes(dt) {
		algorithms.ReduceInto(dst, src, dt, op)
		return
	}
	kernel3(dst, dst, src, n, dt, op)
}

// Into3 computes dst[i] = op(a[i], b[i]): a reduction that writes its
// result to a third buffer, so that an executor can reduce a received
// chunk with its own input straight into the output. dst may be the same
// slice as a or b (then it is Into); otherwise it must not overlap them.
// When both operands of Min or Max are NaNs, which NaN comes out is
// unspecified. Panics like Into.
func Into3(dst, a, b []byte, dt algorithms.DType, op algorithms.Op) {
	n := check("Into3", dst, a, dt, op)
	if len(b) != len(dst) {
		panic(fmt.Sprintf("gotree/backend/reduce: Into3: length mismatch: dst has %d bytes, b %d", len(dst), len(b)))
	}
	if n == 0 {
		return
	}
	checkOverlap("Into3", dst, a)
	checkOverlap("Into3", dst, b)
	if len(dst) < smallBytes(dt) {
		switch {
		case same(dst, a):
			algorithms.ReduceInto(dst, b, dt, op)
		case same(dst, b):
			algorithms.ReduceInto(dst, a, dt, op) // every op is commutative (up to NaN payloads)
		default:
			copy(dst, a)
			algorithms.ReduceInto(dst, b, dt, op)
		}
		return
	}
	kernel3(dst, a, b, n, dt, op)
}

// kernel3 runs the C kernel for dst = op(a, b) over n elements (n > 0),
// whatever the length.
func kernel3(dst, a, b []byte, n int, dt algorithms.DType, op algorithms.Op) {
	rc := C.gotree_reduce3(C.int(dt), C.int(op), addr(dst), addr(a), addr(b), C.size_t(n))
	runtime.KeepAlive(dst)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	if rc != 0 {
		panic(fmt.Sprintf("gotree/backend/reduce: no kernel for %v %v", dt, op))
	}
}

// StreamMinBytes is the length from which CopyStream streams; shorter
// copies are Go's copy.
const StreamMinBytes = 4 << 10

// CopyStream copies src into dst (the same length, not overlapping) with
// non-temporal stores: the destination's cache lines are neither read
// first (a plain store reads a line before writing it) nor kept in the
// cache. For large results that nobody reads soon, such as the output of
// an allreduce bigger than the caches, that removes a third of the memory
// traffic of a copy. The stores are fenced before it returns.
func CopyStream(dst, src []byte) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("gotree/backend/reduce: CopyStream: length mismatch: dst has %d bytes, src %d", len(dst), len(src)))
	}
	if len(dst) < StreamMinBytes {
		copy(dst, src)
		return
	}
	if same(dst, src) {
		return
	}
	checkOverlap("CopyStream", dst, src)
	C.gotree_copy_stream(addr(dst), addr(src), C.size_t(len(dst)))
	runtime.KeepAlive(dst)
	runtime.KeepAlive(src)
}

// Finalize is algorithms.Finalize, fast: for Avg it divides every element
// of buf by nranks (integers truncate toward zero; float16 and bfloat16 are
// divided in float32 and rounded to nearest-even); for any other op it does
// nothing. It panics if Supports(op, dt) fails, if nranks < 1 or if
// len(buf) is not a multiple of dt.Size().
func Finalize(buf []byte, dt algorithms.DType, op algorithms.Op, nranks int) {
	if err := algorithms.Supports(op, dt); err != nil {
		panic(fmt.Sprintf("gotree/backend/reduce: Finalize: %v", err))
	}
	n := elems("Finalize", buf, dt)
	if op != algorithms.Avg {
		return
	}
	if nranks < 1 {
		panic(fmt.Sprintf("gotree/backend/reduce: Finalize: nranks %d < 1", nranks))
	}
	if len(buf) < smallBytes(dt) {
		algorithms.Finalize(buf, dt, op, nranks)
		return
	}
	rc := C.gotree_avg(C.int(dt), addr(buf), addr(buf), C.size_t(n), C.int64_t(nranks))
	runtime.KeepAlive(buf)
	if rc != 0 {
		panic(fmt.Sprintf("gotree/backend/reduce: Finalize: no kernel for %v", dt))
	}
}

// Scale is algorithms.ScaleInto, fast: buf[i] *= factor, computed in
// float64 for float64/complex128 and in float32 (factor rounded to float32)
// for the other floating-point types. It panics for dtypes that
// Supports(PremulSum, dt) rejects and if len(buf) is not a multiple of
// dt.Size().
func Scale(buf []byte, dt algorithms.DType, factor float64) {
	ScaleTo(buf, buf, dt, factor)
}

// ScaleTo computes dst[i] = src[i] * factor like Scale, without touching
// src: PremulSum premultiplies a rank's input, which is the user's tensor,
// into a scratch or output buffer. dst may be the same slice as src and
// must not overlap it otherwise.
func ScaleTo(dst, src []byte, dt algorithms.DType, factor float64) {
	n := check("Scale", dst, src, dt, algorithms.PremulSum)
	if n == 0 {
		return
	}
	checkOverlap("Scale", dst, src)
	if len(dst) < smallBytes(dt) {
		copy(dst, src)
		algorithms.ScaleInto(dst, dt, factor)
		return
	}
	rc := C.gotree_scale(C.int(dt), addr(dst), addr(src), C.size_t(n), C.double(factor))
	runtime.KeepAlive(dst)
	runtime.KeepAlive(src)
	if rc != 0 {
		panic(fmt.Sprintf("gotree/backend/reduce: Scale: no kernel for %v", dt))
	}
}

// Level reports which version of the kernels runs: 2 for x86-64-v4
// (AVX-512), 1 for x86-64-v3 (AVX2, FMA, F16C), 0 for the portable C
// version (baseline x86-64, or any other architecture). All give the same
// results; the tests run each version the CPU supports.
func Level() int { return int(C.gotree_reduce_level()) }

// setLevel caps Level, for tests of the narrower code paths; it returns
// the level in effect.
func setLevel(max int) int { return int(C.gotree_reduce_set_level(C.int(max))) }

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// addr is b's address for a C call. The kernels take addresses as
// uintptr_t, not pointers: cgo's run-time check of pointer arguments
// (GODEBUG=cgocheck=1) costs ~11 ns per pointer here, a third of the call
// for small slices, and these slices never hold Go pointers (most are C
// memory: tensor storage). Passing Go memory this way is sound as long as
// it stays reachable during the call (runtime.KeepAlive after the call)
// and does not move: heap memory never moves, and a goroutine's stack is
// not moved while it is in a C call.
func addr(b []byte) C.uintptr_t { return C.uintptr_t(uintptr(ptr(b))) }

func same(x, y []byte) bool { return unsafe.SliceData(x) == unsafe.SliceData(y) }

func check(what string, dst, src []byte, dt algorithms.DType, op algorithms.Op) int {
	if err := algorithms.Supports(op, dt); err != nil {
		panic(fmt.Sprintf("gotree/backend/reduce: %s: %v", what, err))
	}
	if len(dst) != len(src) {
		panic(fmt.Sprintf("gotree/backend/reduce: %s: length mismatch: dst has %d bytes, src %d", what, len(dst), len(src)))
	}
	return elems(what, dst, dt)
}

func elems(what string, buf []byte, dt algorithms.DType) int {
	sz := dt.Size()
	if sz == 0 {
		panic(fmt.Sprintf("gotree/backend/reduce: %s: invalid dtype %v", what, dt))
	}
	if len(buf)%sz != 0 {
		panic(fmt.Sprintf("gotree/backend/reduce: %s: %d bytes is not a whole number of %v elements (%d bytes each)", what, len(buf), dt, sz))
	}
	return len(buf) / sz
}

// checkOverlap panics if x and y (of equal length) overlap partially.
func checkOverlap(what string, x, y []byte) {
	if len(x) == 0 {
		return
	}
	px, py := uintptr(ptr(x)), uintptr(ptr(y))
	n := uintptr(len(x))
	if px != py && px < py+n && py < px+n {
		panic(fmt.Sprintf("gotree/backend/reduce: %s: operands overlap partially (offset %d)", what, int(px-py)))
	}
}
