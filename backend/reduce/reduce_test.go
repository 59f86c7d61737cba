package reduce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/gotree/gotree/algorithms"
)

var allDTypes = []algorithms.DType{
	algorithms.Float32, algorithms.Float64, algorithms.Float16, algorithms.BFloat16,
	algorithms.Int8, algorithms.Uint8, algorithms.Int16, algorithms.Int32, algorithms.Int64,
	algorithms.Bool, algorithms.Complex64, algorithms.Complex128,
	algorithms.Uint16, algorithms.Uint32, algorithms.Uint64, algorithms.Float8E4M3, algorithms.Float8E5M2,
}

var allOps = []algorithms.Op{
	algorithms.Sum, algorithms.Avg, algorithms.Prod, algorithms.Min, algorithms.Max,
	algorithms.BAnd, algorithms.BOr, algorithms.BXor, algorithms.PremulSum,
}

var testLens = []int{0, 1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 65, 127, 1000, 4099}

// levels runs f once per fp16 code path this CPU has (AVX-512, AVX2,
// portable), restoring the best one afterwards.
func levels(t *testing.T, f func(t *testing.T)) {
	best := setLevel(2)
	defer setLevel(2)
	for l := best; l >= 0; l-- {
		setLevel(l)
		t.Run(fmt.Sprintf("level%d", l), f)
	}
}

// fill writes n random elements of dt into b: for floats a mix of ordinary
// values, specials (±0, ±Inf, NaNs, subnormals, values near overflow) and
// random bit patterns; for integers random bits with the extremes mixed
// in; for bool mostly 0/1 with other nonzero bytes now and then.
func fill(r *rand.Rand, b []byte, dt algorithms.DType) {
	le := binary.LittleEndian
	switch dt {
	case algorithms.Float32, algorithms.Complex64:
		sp := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
			math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 1, -1}
		for o := 0; o+4 <= len(b); o += 4 {
			var v float32
			switch k := r.Intn(8); {
			case k < 4:
				v = float32(r.NormFloat64() * math.Pow(10, float64(r.Intn(7)-3)))
			case k < 6:
				v = sp[r.Intn(len(sp))]
			default:
				v = math.Float32frombits(r.Uint32())
			}
			le.PutUint32(b[o:], math.Float32bits(v))
		}
	case algorithms.Float64, algorithms.Complex128:
		sp := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat64, -math.MaxFloat64,
			math.SmallestNonzeroFloat64, 1, -1}
		for o := 0; o+8 <= len(b); o += 8 {
			var v float64
			switch k := r.Intn(8); {
			case k < 4:
				v = r.NormFloat64() * math.Pow(10, float64(r.Intn(7)-3))
			case k < 6:
				v = sp[r.Intn(len(sp))]
			default:
				v = math.Float64frombits(r.Uint64())
			}
			le.PutUint64(b[o:], math.Float64bits(v))
		}
	case algorithms.Float16, algorithms.BFloat16:
		from := algorithms.Float32ToFloat16
		sp := []uint16{0, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7d00, 0xfe01, 0x0001, 0x8001, 0x03ff, 0x7bff, 0xfbff, 0x3c00}
		big := 30000.0
		if dt == algorithms.BFloat16 {
			from = algorithms.Float32ToBFloat16
			sp = []uint16{0, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1, 0x0001, 0x8001, 0x007f, 0x7f7f, 0xff7f, 0x3f80}
			big = 1e38
		}
		for o := 0; o+2 <= len(b); o += 2 {
			var v uint16
			switch k := r.Intn(10); {
			case k < 5:
				v = from(float32(r.NormFloat64() * math.Pow(10, float64(r.Intn(5)-2))))
			case k < 6:
				v = from(float32((r.Float64()*2 - 1) * big))
			case k < 8:
				v = sp[r.Intn(len(sp))]
			default:
				v = uint16(r.Uint32())
			}
			le.PutUint16(b[o:], v)
		}
	case algorithms.Bool:
		for i := range b {
			b[i] = byte(r.Intn(2))
			if r.Intn(16) == 0 {
				b[i] = byte(r.Intn(256))
			}
		}
	default:
		r.Read(b)
		sz := dt.Size()
		for o := 0; o+sz <= len(b); o += sz {
			if r.Intn(8) == 0 { // an extreme: the minimum, the maximum, -1 or 0
				bits := uint(8 * sz)
				v := []uint64{1 << (bits - 1), 1<<(bits-1) - 1, ^uint64(0), 0}[r.Intn(4)]
				for j := 0; j < sz; j++ {
					b[o+j] = byte(v >> (8 * j))
				}
			}
		}
	}
}

// sameBits reports the first element where got and want differ, comparing
// bits exactly except that any two NaNs are equal.
func sameBits(dt algorithms.DType, got, want []byte) (int, bool) {
	le := binary.LittleEndian
	isNaN := func([]byte) bool { return false }
	sz := dt.Size()
	switch dt {
	case algorithms.Float32, algorithms.Complex64:
		sz = 4
		isNaN = func(x []byte) bool { return le.Uint32(x)&0x7fffffff > 0x7f800000 }
	case algorithms.Float64, algorithms.Complex128:
		sz = 8
		isNaN = func(x []byte) bool { return le.Uint64(x)&(1<<63-1) > 0x7ff0000000000000 }
	case algorithms.Float16:
		isNaN = func(x []byte) bool { return le.Uint16(x)&0x7fff > 0x7c00 }
	case algorithms.BFloat16:
		isNaN = func(x []byte) bool { return le.Uint16(x)&0x7fff > 0x7f80 }
	case algorithms.Float8E4M3:
		isNaN = func(x []byte) bool { return x[0]&0x7f == 0x7f }
	case algorithms.Float8E5M2:
		isNaN = func(x []byte) bool { return x[0]&0x7f > 0x7c }
	}
	if len(got) != len(want) {
		return -1, false
	}
	for o := 0; o < len(got); o += sz {
		x, y := got[o:o+sz], want[o:o+sz]
		if isNaN(x) != isNaN(y) || !isNaN(x) && string(x) != string(y) {
			return o / sz, false
		}
	}
	return 0, true
}

// at returns an n-byte slice of a fresh buffer starting off bytes past an
// (8-byte aligned) allocation, with guard bytes around it.
func at(n, off int) (full, s []byte) {
	full = make([]byte, n+off+16)
	for i := range full {
		full[i] = 0xa5
	}
	return full, full[off : off+n : off+n]
}

func guardsIntact(full []byte, off, n int) bool {
	for i, c := range full {
		if (i < off || i >= off+n) && c != 0xa5 {
			return false
		}
	}
	return true
}

func TestIntoMatchesReference(t *testing.T) {
	levels(t, func(t *testing.T) {
		r := rand.New(rand.NewSource(1))
		for _, dt := range allDTypes {
			for _, op := range allOps {
				if algorithms.Supports(op, dt) != nil {
					continue
				}
				for li, n := range testLens {
					nb := n * dt.Size()
					offD, offA, offB := li%8, (li*3+1)%8, (li*5+2)%8
					a := make([]byte, nb)
					b := make([]byte, nb)
					fill(r, a, dt)
					fill(r, b, dt)
					want := append([]byte(nil), a...)
					algorithms.ReduceInto(want, b, dt, op)

					// Into, in place, misaligned.
					fullD, d := at(nb, offD)
					copy(d, a)
					_, s := at(nb, offB)
					copy(s, b)
					Into(d, s, dt, op)
					if i, ok := sameBits(dt, d, want); !ok {
						t.Fatalf("Into %v %v n=%d off=%d/%d: element %d differs: got % x, want % x", dt, op, n, offD, offB, i, elem(d, dt, i), elem(want, dt, i))
					}
					if !guardsIntact(fullD, offD, nb) || string(s) != string(b) {
						t.Fatalf("Into %v %v n=%d: wrote outside dst or into src", dt, op, n)
					}

					// Into3 into a third buffer.
					fullD, d = at(nb, offD)
					_, x := at(nb, offA)
					copy(x, a)
					Into3(d, x, s, dt, op)
					if i, ok := sameBits(dt, d, want); !ok {
						t.Fatalf("Into3 %v %v n=%d off=%d/%d/%d: element %d differs: got % x, want % x", dt, op, n, offD, offA, offB, i, elem(d, dt, i), elem(want, dt, i))
					}
					if !guardsIntact(fullD, offD, nb) || string(x) != string(a) || string(s) != string(b) {
						t.Fatalf("Into3 %v %v n=%d: wrote outside dst or into a source", dt, op, n)
					}

					// Into3 with dst aliasing b.
					Into3(s, x, s, dt, op)
					if i, ok := sameBits(dt, s, want); !ok {
						t.Fatalf("Into3(dst=b) %v %v n=%d: element %d differs", dt, op, n, i)
					}
				}
			}
		}
	})
}

func elem(b []byte, dt algorithms.DType, i int) []byte {
	sz := dt.Size()
	if (i+1)*sz > len(b) {
		return nil
	}
	return b[i*sz : (i+1)*sz]
}

func TestFinalizeMatchesReference(t *testing.T) {
	levels(t, func(t *testing.T) {
		r := rand.New(rand.NewSource(2))
		for _, dt := range allDTypes {
			for _, op := range []algorithms.Op{algorithms.Avg, algorithms.Sum, algorithms.Max} {
				if algorithms.Supports(op, dt) != nil {
					continue
				}
				for li, n := range testLens {
					for _, nr := range []int{1, 2, 3, 7, 100, 1000} {
						nb := n * dt.Size()
						off := (li + nr) % 8
						a := make([]byte, nb)
						fill(r, a, dt)
						want := append([]byte(nil), a...)
						algorithms.Finalize(want, dt, op, nr)
						full, d := at(nb, off)
						copy(d, a)
						Finalize(d, dt, op, nr)
						if i, ok := sameBits(dt, d, want); !ok {
							t.Fatalf("Finalize %v %v /%d n=%d: element %d: %x of %x, want %x", dt, op, nr, n, i, elem(d, dt, i), elem(a, dt, i), elem(want, dt, i))
						}
						if !guardsIntact(full, off, nb) {
							t.Fatalf("Finalize %v n=%d: wrote outside buf", dt, n)
						}
					}
				}
			}
		}
	})
}

func TestScaleMatchesReference(t *testing.T) {
	levels(t, func(t *testing.T) {
		r := rand.New(rand.NewSource(3))
		for _, dt := range allDTypes {
			if algorithms.Supports(algorithms.PremulSum, dt) != nil {
				continue
			}
			for li, n := range testLens {
				for _, f := range []float64{1, 0.5, 0.1, -3, 1e-5, 65536, 1.0 / 3, math.Inf(1), 0} {
					nb := n * dt.Size()
					off := (li*7 + 3) % 8
					a := make([]byte, nb)
					fill(r, a, dt)
					want := append([]byte(nil), a...)
					algorithms.ScaleInto(want, dt, f)
					full, d := at(nb, off)
					copy(d, a)
					Scale(d, dt, f)
					if i, ok := sameBits(dt, d, want); !ok {
						t.Fatalf("Scale %v *%v n=%d: element %d: %x of %x, want %x", dt, f, n, i, elem(d, dt, i), elem(a, dt, i), elem(want, dt, i))
					}
					if !guardsIntact(full, off, nb) {
						t.Fatalf("Scale %v n=%d: wrote outside buf", dt, n)
					}
					full, d = at(nb, off+1)
					ScaleTo(d, a, dt, f)
					if _, ok := sameBits(dt, d, want); !ok || !guardsIntact(full, off+1, nb) {
						t.Fatalf("ScaleTo %v *%v n=%d: wrong", dt, f, n)
					}
				}
			}
		}
	})
}

// Every 16-bit pattern against every one of a set of partners, through the
// vector paths (the long runs) and their tails: the fp16/bf16 conversions
// of the kernels agree with the reference's on all inputs.
func TestHalfExhaustive(t *testing.T) {
	best := setLevel(2)
	levels(t, func(t *testing.T) {
		le := binary.LittleEndian
		a := make([]byte, 2<<16)
		for i := 0; i < 1<<16; i++ {
			le.PutUint16(a[2*i:], uint16(i))
		}
		for _, dt := range []algorithms.DType{algorithms.Float16, algorithms.BFloat16} {
			partners := []uint16{0x3c00, 0x8001, 0x7bff, 0x3f80, 0, 0x8000, 0xbc00, 0x0001, 0x4000, 0x7f80, 0x0401, 0x1234, 0x7f81, 0xffc1, 0x7c01}
			if Level() < best {
				partners = partners[:4] // the narrower paths share the conversions' tails
			}
			for _, partner := range partners {
				b := make([]byte, len(a))
				for i := 0; i < 1<<16; i++ {
					le.PutUint16(b[2*i:], partner)
				}
				for _, op := range []algorithms.Op{algorithms.Sum, algorithms.Prod, algorithms.Min, algorithms.Max} {
					want := append([]byte(nil), a...)
					algorithms.ReduceInto(want, b, dt, op)
					got := make([]byte, len(a))
					Into3(got, a, b, dt, op)
					if i, ok := sameBits(dt, got, want); !ok {
						t.Fatalf("%v %v %#04x with %#04x: got %x, want %x", dt, op, i, partner, elem(got, dt, i), elem(want, dt, i))
					}
				}
			}
			for _, nr := range []int{2, 3, 5} {
				want := append([]byte(nil), a...)
				algorithms.Finalize(want, dt, algorithms.Avg, nr)
				got := append([]byte(nil), a...)
				Finalize(got, dt, algorithms.Avg, nr)
				if i, ok := sameBits(dt, got, want); !ok {
					t.Fatalf("%v avg /%d of %#04x: got %x, want %x", dt, nr, i, elem(got, dt, i), elem(want, dt, i))
				}
			}
		}
	})
}

func mustPanic(t *testing.T, substr string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, substr) {
			t.Errorf("panic %v, want one mentioning %q", r, substr)
		}
	}()
	f()
}

func TestPanics(t *testing.T) {
	buf := make([]byte, 4096)
	mustPanic(t, "length mismatch", func() { Into(buf[:1024], buf[2048:2048+512], algorithms.Float32, algorithms.Sum) })
	mustPanic(t, "length mismatch", func() { Into3(buf[:1024], buf[1024:2048], buf[2048:2048+512], algorithms.Float32, algorithms.Sum) })
	mustPanic(t, "whole number", func() { Into(buf[:1022], buf[2048:2048+1022], algorithms.Float32, algorithms.Sum) })
	mustPanic(t, "overlap", func() { Into(buf[:1024], buf[4:1028], algorithms.Float32, algorithms.Sum) })
	mustPanic(t, "overlap", func() { Into3(buf[8:1032], buf[:1024], buf[2048:3072], algorithms.Float32, algorithms.Sum) })
	mustPanic(t, "overlap", func() { Into(buf[:16], buf[4:20], algorithms.Float32, algorithms.Sum) })
	mustPanic(t, "complex", func() { Into(buf[:1024], buf[2048:3072], algorithms.Complex64, algorithms.Max) })
	mustPanic(t, "integer or bool", func() { Into(buf[:1024], buf[2048:3072], algorithms.Float32, algorithms.BXor) })
	mustPanic(t, "nranks", func() { Finalize(buf[:1024], algorithms.Float32, algorithms.Avg, 0) })
	mustPanic(t, "floating-point", func() { Scale(buf[:1024], algorithms.Int32, 2) })
	mustPanic(t, "bool", func() { Finalize(buf[:1024], algorithms.Bool, algorithms.Avg, 2) })
	mustPanic(t, "unsupported dtype", func() { Into(buf[:16], buf[32:48], algorithms.DType(99), algorithms.Sum) })
}

func TestLevel(t *testing.T) {
	t.Logf("fp16 kernel level %d", Level())
}

// CopyStream copies exactly, at every alignment of either side and around
// the streaming threshold, without touching a byte outside dst.
func TestCopyStream(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for _, n := range []int{0, 1, 15, 16, 17, 63, 64, StreamMinBytes - 1, StreamMinBytes, StreamMinBytes + 1, 65537, 1<<20 + 13} {
		for _, doff := range []int{0, 1, 8, 15} {
			for _, soff := range []int{0, 3} {
				_, src := at(n, soff)
				for i := range src {
					src[i] = byte(r.Uint32())
				}
				full, dst := at(n, doff)
				CopyStream(dst, src)
				if !bytes.Equal(dst, src) {
					t.Fatalf("n=%d doff=%d soff=%d: copy differs", n, doff, soff)
				}
				if !guardsIntact(full, doff, n) {
					t.Fatalf("n=%d doff=%d soff=%d: wrote outside dst", n, doff, soff)
				}
			}
		}
	}
	buf := make([]byte, 2*StreamMinBytes)
	CopyStream(buf, buf) // the same slice: nothing to do
	mustPanic(t, "overlap", func() { CopyStream(buf[1:StreamMinBytes+1], buf[:StreamMinBytes]) })
	mustPanic(t, "length mismatch", func() { CopyStream(buf[:2], buf[:3]) })
}

// Every pair of float8 values, every op, every kernel version: the kernels
// against the reference.
func TestFloat8Exhaustive(t *testing.T) {
	a := make([]byte, 256*256)
	b := make([]byte, len(a))
	for i := range a {
		a[i], b[i] = byte(i>>8), byte(i)
	}
	levels(t, func(t *testing.T) {
		for _, dt := range []algorithms.DType{algorithms.Float8E4M3, algorithms.Float8E5M2} {
			for _, op := range []algorithms.Op{algorithms.Sum, algorithms.Prod, algorithms.Min, algorithms.Max} {
				got := make([]byte, len(a))
				Into3(got, a, b, dt, op)
				want := append([]byte(nil), a...)
				algorithms.ReduceInto(want, b, dt, op)
				if i, ok := sameBits(dt, got, want); !ok {
					t.Errorf("%v %v: %#02x op %#02x = %#02x, reference %#02x", dt, op, a[i], b[i], got[i], want[i])
				}
			}
			for _, n := range []int{1, 2, 3, 5, 7, 10} {
				got := append([]byte(nil), a...)
				Finalize(got, dt, algorithms.Avg, n)
				want := append([]byte(nil), a...)
				algorithms.Finalize(want, dt, algorithms.Avg, n)
				if i, ok := sameBits(dt, got, want); !ok {
					t.Errorf("%v avg over %d: %#02x -> %#02x, reference %#02x", dt, n, a[i], got[i], want[i])
				}
			}
			for _, f := range []float64{0.5, 1.0 / 3, 3, -7.25, 1e-3} {
				got := append([]byte(nil), b[:256]...)
				Scale(got, dt, f)
				want := append([]byte(nil), b[:256]...)
				algorithms.ScaleInto(want, dt, f)
				if i, ok := sameBits(dt, got, want); !ok {
					t.Errorf("%v scale by %g: %#02x -> %#02x, reference %#02x", dt, f, b[i], got[i], want[i])
				}
			}
		}
	})
}
