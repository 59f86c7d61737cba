package algorithms

import (
	"math"
	"math/rand"
	"testing"
)

// f8Format describes a float8 format for the brute-force oracle below,
// which works from the definition (fields → value) and never from the
// conversions under test.
type f8Format struct {
	dt        DType
	man, bias int
	isNaN     func(b uint8) bool
	isInf     func(b uint8) bool
	to32      func(uint8) float32
	from32    func(float32) uint8
	maxFinite float64
	// overflow is what a magnitude beyond the largest finite value rounds to.
	overflow uint8
}

var f8Formats = []f8Format{
	{dt: Float8E4M3, man: 3, bias: 7, maxFinite: 448, overflow: 0x7f,
		isNaN: func(b uint8) bool { return b&0x7f == 0x7f }, isInf: func(uint8) bool { return false },
		to32: Float8E4M3ToFloat32, from32: Float32ToFloat8E4M3},
	{dt: Float8E5M2, man: 2, bias: 15, maxFinite: 57344, overflow: 0x7c,
		isNaN: func(b uint8) bool { return b&0x7f > 0x7c }, isInf: func(b uint8) bool { return b&0x7f == 0x7c },
		to32: Float8E5M2ToFloat32, from32: Float32ToFloat8E5M2},
}

// value is the definition: (-1)^s × 2^(e-bias) × (1 + m/2^man), or
// 2^(1-bias) × m/2^man when e = 0.
func (f f8Format) value(b uint8) float64 {
	e := int(b&0x7f) >> f.man
	m := float64(int(b) & (1<<f.man - 1))
	var v float64
	if e == 0 {
		v = math.Ldexp(m/float64(int(1)<<f.man), 1-f.bias)
	} else {
		v = math.Ldexp(1+m/float64(int(1)<<f.man), e-f.bias)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return v
}

func TestFloat8Widen(t *testing.T) {
	for _, f := range f8Formats {
		for i := 0; i < 256; i++ {
			b := uint8(i)
			got := f.to32(b)
			switch {
			case f.isNaN(b):
				if got == got {
					t.Errorf("%v %#02x: got %v, want NaN", f.dt, b, got)
				}
			case f.isInf(b):
				if !math.IsInf(float64(got), 0) || math.Signbit(float64(got)) != (b&0x80 != 0) {
					t.Errorf("%v %#02x: got %v, want a signed infinity", f.dt, b, got)
				}
			default:
				want := f.value(b)
				if float64(got) != want || math.Signbit(float64(got)) != (b&0x80 != 0) {
					t.Errorf("%v %#02x: got %v, want %v", f.dt, b, got, want)
				}
			}
		}
	}
}

// nearest is the oracle for the rounding: the finite code closest to x,
// ties to the even code (the one whose last mantissa bit is 0), or the
// format's overflow when x is beyond the largest finite value by half its
// spacing or more — except that a tie at that point goes to the even
// neighbour, which is the largest finite value for E4M3 (448 vs 480: 464
// rounds down; above it NaN) and the overflow for E5M2 (57344 vs 65536:
// 61440 rounds up).
func (f f8Format) nearest(x float32) uint8 {
	v := float64(x)
	var sign uint8
	if math.Signbit(v) {
		sign = 0x80
	}
	if v != v {
		return sign | 0x7f
	}
	a := math.Abs(v)
	best, bestD := -1, math.Inf(1)
	for c := 0; c < 0x80; c++ {
		if f.isNaN(uint8(c)) || f.isInf(uint8(c)) {
			continue
		}
		d := math.Abs(f.value(uint8(c)) - a)
		if d < bestD || d == bestD && c&1 == 0 {
			best, bestD = c, d
		}
	}
	// The next value above the largest finite one, where the grid would go on.
	top := f.maxFinite + math.Ldexp(1, int(math.Floor(math.Log2(f.maxFinite)))-f.man)
	if dTop := top - a; math.IsInf(a, 0) || dTop < bestD || dTop == bestD && f.dt == Float8E5M2 {
		return sign | f.overflow
	}
	return sign | uint8(best)
}

func TestFloat8Round(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	for _, f := range f8Formats {
		var xs []float32
		// Every representable value, the midpoints between neighbours and
		// points just beside them, and random values over the whole range.
		for i := 0; i < 0x7f; i++ {
			if f.isNaN(uint8(i)) || f.isInf(uint8(i)) {
				continue
			}
			lo := f.value(uint8(i))
			hi := f.value(uint8(i + 1))
			if f.isNaN(uint8(i+1)) || f.isInf(uint8(i+1)) {
				hi = lo + math.Ldexp(1, int(math.Floor(math.Log2(lo)))-f.man)
			}
			mid := float32((lo + hi) / 2)
			xs = append(xs, float32(lo), mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1))), float32(hi))
		}
		for i := 0; i < 20000; i++ {
			xs = append(xs, float32(math.Ldexp(r.Float64(), r.Intn(40)-f.bias-f.man-4)))
		}
		xs = append(xs, 0, float32(math.Inf(1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-30)
		for _, x := range xs {
			for _, s := range []float32{1, -1} {
				x := x * s
				got, want := f.from32(x), f.nearest(x)
				if got != want && !(f.isNaN(got) && f.isNaN(want)) {
					t.Fatalf("%v(%g): got %#02x, want %#02x", f.dt, x, got, want)
				}
			}
		}
		// Every finite value converts back to itself.
		for i := 0; i < 256; i++ {
			b := uint8(i)
			if f.isNaN(b) {
				continue
			}
			if got := f.from32(f.to32(b)); got != b {
				t.Errorf("%v: %#02x widens and rounds back to %#02x", f.dt, b, got)
			}
		}
	}
}
