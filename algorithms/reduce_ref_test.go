package algorithms

import (
	"encoding/binary"
	"math"
	"math/rand"
	"sort"
	"strings"
	"testing"
)

// --- 16-bit float conversions, checked against independent formulations ---

// refHalfValue decodes binary16 bits arithmetically (no bit tricks).
func refHalfValue(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	exp := int(h>>10) & 0x1f
	man := float64(h & 0x3ff)
	switch exp {
	case 0x1f:
		if man != 0 {
			return math.NaN()
		}
		return math.Inf(int(s))
	case 0:
		return s * math.Ldexp(man, -24)
	}
	return s * math.Ldexp(1024+man, exp-25)
}

func refBF16Value(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	exp := int(h>>7) & 0xff
	man := float64(h & 0x7f)
	switch exp {
	case 0xff:
		if man != 0 {
			return math.NaN()
		}
		return math.Inf(int(s))
	case 0:
		return s * math.Ldexp(man, -133)
	}
	return s * math.Ldexp(128+man, exp-134)
}

func TestFloat16ToFloat32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := Float16ToFloat32(h)
		want := refHalfValue(h)
		if math.IsNaN(want) {
			b := math.Float32bits(got)
			if !math.IsNaN(float64(got)) || b>>31 != uint32(h>>15) || b&0x7fffff != uint32(h&0x3ff)<<13 {
				t.Fatalf("Float16ToFloat32(%#04x) = %#08x, want NaN with sign and payload kept", h, b)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("Float16ToFloat32(%#04x) = %v, want %v", h, got, want)
		}
		// Round trip is the identity on every non-NaN value.
		if back := Float32ToFloat16(got); back != h {
			t.Fatalf("Float32ToFloat16(Float16ToFloat32(%#04x)) = %#04x", h, back)
		}
	}
}

func TestBFloat16ToFloat32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := BFloat16ToFloat32(h)
		want := refBF16Value(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) || math.Float32bits(got)>>16 != uint32(h) {
				t.Fatalf("BFloat16ToFloat32(%#04x) = %#08x", h, math.Float32bits(got))
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("BFloat16ToFloat32(%#04x) = %v, want %v", h, got, want)
		}
		if back := Float32ToBFloat16(got); back != h {
			t.Fatalf("Float32ToBFloat16(BFloat16ToFloat32(%#04x)) = %#04x", h, back)
		}
	}
}

// rtNearestEven rounds |x| among the ascending non-negative values vals
// (vals[k] is the value of bit pattern k, and vals[len-1] is the pseudo
// value 2^(emax+1) whose pattern is +Inf) by comparing distances in float64,
// which is exact for the float32 inputs used here.
func rtNearestEven(vals []float64, x float32) uint16 {
	ax := math.Abs(float64(x))
	var sign uint16
	if math.Signbit(float64(x)) {
		sign = 0x8000
	}
	rtInf := len(vals) - 1
	// k: the largest index with vals[k] <= ax.
	k := sort.Search(len(vals), func(i int) bool { return vals[i] > ax }) - 1
	if k >= rtInf {
		return sign | uint16(rtInf)
	}
	dlo, dhi := ax-vals[k], vals[k+1]-ax
	if dhi < dlo || dhi == dlo && k&1 == 1 {
		k++
	}
	return sign | uint16(k)
}

func rtFloat16Table() []float64 {
	vals := make([]float64, 0x7c01)
	for k := 0; k < 0x7c00; k++ {
		vals[k] = refHalfValue(uint16(k))
	}
	vals[0x7c00] = 65536
	return vals
}

func rtBFloat16Table() []float64 {
	vals := make([]float64, 0x7f81)
	for k := 0; k < 0x7f80; k++ {
		vals[k] = refBF16Value(uint16(k))
	}
	vals[0x7f80] = math.Ldexp(1, 128)
	return vals
}

// rtRoundingProbes yields, for every pair of neighbouring 16-bit values, the
// float32 midpoint and its float32 neighbours, plus a stride through all
// float32 bit patterns and random values.
func rtRoundingProbes(vals []float64, yield func(float32)) {
	for k := 0; k+1 < len(vals); k++ {
		mid := float32((vals[k] + vals[k+1]) / 2) // exact: at most 25 significant bits... checked below
		if float64(mid) != (vals[k]+vals[k+1])/2 {
			continue // not representable (cannot happen for f16/bf16), skip
		}
		for _, f := range []float32{mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1))), float32(vals[k])} {
			yield(f)
			yield(-f)
		}
	}
	for b := uint64(0); b < 1<<32; b += 4099 {
		yield(math.Float32frombits(uint32(b)))
	}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 200000; i++ {
		yield(math.Float32frombits(r.Uint32()))
	}
}

func TestFloat32ToFloat16Rounding(t *testing.T) {
	vals := rtFloat16Table()
	n := 0
	rtRoundingProbes(vals, func(f float32) {
		n++
		got := Float32ToFloat16(f)
		if f != f {
			b := math.Float32bits(f)
			want := uint16(b>>16)&0x8000 | 0x7e00 | uint16(b>>13)&0x3ff
			if got != want {
				t.Fatalf("Float32ToFloat16(NaN %#08x) = %#04x, want %#04x", b, got, want)
			}
			return
		}
		if want := rtNearestEven(vals, f); got != want {
			t.Fatalf("Float32ToFloat16(%v = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	})
	t.Logf("%d probes", n)
}

func TestFloat32ToBFloat16Rounding(t *testing.T) {
	vals := rtBFloat16Table()
	rtRoundingProbes(vals, func(f float32) {
		got := Float32ToBFloat16(f)
		if f != f {
			if want := uint16(math.Float32bits(f)>>16) | 0x40; got != want {
				t.Fatalf("Float32ToBFloat16(NaN %#08x) = %#04x, want %#04x", math.Float32bits(f), got, want)
			}
			return
		}
		if want := rtNearestEven(vals, f); got != want {
			t.Fatalf("Float32ToBFloat16(%v = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	})
}

func TestFloat16Specials(t *testing.T) {
	for _, c := range []struct {
		f float32
		h uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65519.99, 0x7bff}, {65520, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00}, {float32(math.Ldexp(1, -24)), 0x0001},
		{float32(math.Ldexp(1, -25)), 0x0000}, {float32(math.Ldexp(1.5, -25)), 0x0001},
		{float32(math.Ldexp(3, -25)), 0x0002}, {float32(math.Ldexp(1, -14)), 0x0400},
		{float32(math.Copysign(0, -1)), 0x8000}, {1.00048828125, 0x3c00}, {1.00146484375, 0x3c02},
	} {
		if got := Float32ToFloat16(c.f); got != c.h {
			t.Errorf("Float32ToFloat16(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	for _, c := range []struct {
		f float32
		h uint16
	}{
		{1, 0x3f80}, {-2, 0xc000}, {float32(math.MaxFloat32), 0x7f80}, {1.00390625, 0x3f80}, {1.01171875, 0x3f82},
		{float32(math.Inf(1)), 0x7f80}, {float32(math.Copysign(0, -1)), 0x8000},
	} {
		if got := Float32ToBFloat16(c.f); got != c.h {
			t.Errorf("Float32ToBFloat16(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
}

// --- ReduceInto, Finalize, ScaleInto ---

var rtLE = binary.LittleEndian

func rtF32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		rtLE.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func rtF64s(v ...float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		rtLE.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

func rtU16s(v ...uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		rtLE.PutUint16(b[2*i:], x)
	}
	return b
}

func rtI32s(v ...int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		rtLE.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func rtI64s(v ...int64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		rtLE.PutUint64(b[8*i:], uint64(x))
	}
	return b
}

func rtI16s(v ...int16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		rtLE.PutUint16(b[2*i:], uint16(x))
	}
	return b
}

func rtI8s(v ...int8) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = uint8(x)
	}
	return b
}

var (
	rtPoint1 = 0.1 // a variable: constant arithmetic would be exact
	rtNaN    = math.NaN()
	rtInf    = math.Inf(1)
	rtNegZ   = math.Copysign(0, -1)
	rtNaN32  = float32(rtNaN)
	rtInf32  = float32(rtInf)
	rtNegZ32 = float32(rtNegZ)
)

// rtSameBits compares two buffers of dt elementwise: bitwise, except that two
// NaNs of a float type compare equal whatever their payloads.
func rtSameBits(dt DType, a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	isNaN := func(x []byte) bool { return false }
	switch dt {
	case Float32, Complex64:
		dt = Float32
		isNaN = func(x []byte) bool { return rtLE.Uint32(x)&0x7fffffff > 0x7f800000 }
	case Float64, Complex128:
		dt = Float64
		isNaN = func(x []byte) bool { return rtLE.Uint64(x)&(1<<63-1) > 0x7ff0000000000000 }
	case Float16:
		isNaN = func(x []byte) bool { return rtLE.Uint16(x)&0x7fff > 0x7c00 }
	case BFloat16:
		isNaN = func(x []byte) bool { return rtLE.Uint16(x)&0x7fff > 0x7f80 }
	}
	sz := dt.Size()
	for o := 0; o < len(a); o += sz {
		x, y := a[o:o+sz], b[o:o+sz]
		if isNaN(x) && isNaN(y) {
			continue
		}
		if string(x) != string(y) {
			return false
		}
	}
	return true
}

func TestReduceIntoCases(t *testing.T) {
	type tc struct {
		dt        DType
		op        Op
		dst, src  []byte
		want      []byte
		wantNoNaN bool
	}
	h := Float32ToFloat16
	bf := Float32ToBFloat16
	cases := []tc{
		{dt: Float32, op: Sum, dst: rtF32s(1, 2, rtNegZ32, rtNegZ32, rtInf32, 3e38), src: rtF32s(0.5, -2, rtNegZ32, 0, -rtInf32, 3e38), want: rtF32s(1.5, 0, rtNegZ32, 0, rtNaN32, rtInf32)},
		{dt: Float32, op: Avg, dst: rtF32s(1, 2), src: rtF32s(3, 4), want: rtF32s(4, 6)},
		{dt: Float32, op: PremulSum, dst: rtF32s(1), src: rtF32s(3), want: rtF32s(4)},
		{dt: Float32, op: Prod, dst: rtF32s(3, -2, rtInf32), src: rtF32s(0.5, 0, 0), want: rtF32s(1.5, rtNegZ32, rtNaN32)},
		{dt: Float32, op: Max, dst: rtF32s(1, rtNaN32, 2, rtNegZ32, 0, rtNegZ32, -rtInf32), src: rtF32s(2, 1, rtNaN32, 0, rtNegZ32, rtNegZ32, -5), want: rtF32s(2, rtNaN32, rtNaN32, 0, 0, rtNegZ32, -5)},
		{dt: Float32, op: Min, dst: rtF32s(1, rtNaN32, 2, rtNegZ32, 0, 0), src: rtF32s(2, 1, rtNaN32, 0, rtNegZ32, 0), want: rtF32s(1, rtNaN32, rtNaN32, rtNegZ32, rtNegZ32, 0)},
		{dt: Float64, op: Sum, dst: rtF64s(0.1, rtNegZ), src: rtF64s(0.2, rtNegZ), want: rtF64s(rtPoint1+0.2, rtNegZ)},
		{dt: Float64, op: Max, dst: rtF64s(rtNaN, 1, rtNegZ), src: rtF64s(1, rtNaN, 0), want: rtF64s(rtNaN, rtNaN, 0)},
		{dt: Float64, op: Min, dst: rtF64s(3, rtInf), src: rtF64s(-3, 7), want: rtF64s(-3, 7)},
		{dt: Float64, op: Prod, dst: rtF64s(1e200, -3), src: rtF64s(1e200, 3), want: rtF64s(rtInf, -9)},
		// 1 + 2^-11 is a tie in float16 (rounds to even, 1); 65504 + 16 overflows to Inf.
		{dt: Float16, op: Sum, dst: rtU16s(h(1), h(65504), h(0.5), h(rtNegZ32)), src: rtU16s(h(float32(math.Ldexp(1, -11))), h(16), h(0.25), h(rtNegZ32)), want: rtU16s(0x3c00, 0x7c00, h(0.75), 0x8000)},
		{dt: Float16, op: Max, dst: rtU16s(h(1), 0x7e00, h(rtNegZ32)), src: rtU16s(h(-1), h(3), 0), want: rtU16s(h(1), 0x7e00, 0)},
		{dt: Float16, op: Prod, dst: rtU16s(h(3), 0x0001), src: rtU16s(h(-0.5), h(0.5)), want: rtU16s(h(-1.5), 0x0000)},
		{dt: BFloat16, op: Sum, dst: rtU16s(bf(1), bf(256)), src: rtU16s(bf(1.0/256), bf(1)), want: rtU16s(bf(1), bf(256))},
		{dt: BFloat16, op: Min, dst: rtU16s(bf(1), 0x7fc0), src: rtU16s(bf(-2), bf(1)), want: rtU16s(bf(-2), 0x7fc0)},
		{dt: Int8, op: Sum, dst: rtI8s(127, -128, 5), src: rtI8s(1, -1, -7), want: rtI8s(-128, 127, -2)},
		{dt: Int8, op: Prod, dst: rtI8s(64, -3), src: rtI8s(2, 5), want: rtI8s(-128, -15)},
		{dt: Int8, op: Max, dst: rtI8s(-1, 3), src: rtI8s(-2, 4), want: rtI8s(-1, 4)},
		{dt: Uint8, op: Sum, dst: []byte{255, 3}, src: []byte{1, 4}, want: []byte{0, 7}},
		{dt: Uint8, op: Min, dst: []byte{255, 3}, src: []byte{1, 4}, want: []byte{1, 3}},
		{dt: Uint8, op: BXor, dst: []byte{0xf0, 3}, src: []byte{0xff, 1}, want: []byte{0x0f, 2}},
		{dt: Int16, op: Sum, dst: rtI16s(32767, -5), src: rtI16s(1, 2), want: rtI16s(-32768, -3)},
		{dt: Int16, op: Min, dst: rtI16s(-32768, 5), src: rtI16s(0, 2), want: rtI16s(-32768, 2)},
		{dt: Int32, op: Sum, dst: rtI32s(math.MaxInt32, -1), src: rtI32s(1, -1), want: rtI32s(math.MinInt32, -2)},
		{dt: Int32, op: Prod, dst: rtI32s(65536, -7), src: rtI32s(65536, 3), want: rtI32s(0, -21)},
		{dt: Int32, op: BAnd, dst: rtI32s(0x0ff0, -1), src: rtI32s(0x00ff, 5), want: rtI32s(0x00f0, 5)},
		{dt: Int32, op: BOr, dst: rtI32s(0x0ff0, -1), src: rtI32s(0x00ff, 5), want: rtI32s(0x0fff, -1)},
		{dt: Int64, op: Sum, dst: rtI64s(math.MaxInt64, 1<<40), src: rtI64s(1, 1<<40), want: rtI64s(math.MinInt64, 1<<41)},
		{dt: Int64, op: Max, dst: rtI64s(math.MinInt64, 0), src: rtI64s(-1, -1), want: rtI64s(-1, 0)},
		{dt: Int64, op: BXor, dst: rtI64s(-1), src: rtI64s(1), want: rtI64s(-2)},
		{dt: Bool, op: Sum, dst: []byte{0, 0, 1, 2}, src: []byte{0, 1, 1, 0}, want: []byte{0, 1, 1, 1}},
		{dt: Bool, op: Prod, dst: []byte{0, 0, 1, 2}, src: []byte{0, 1, 1, 7}, want: []byte{0, 0, 1, 1}},
		{dt: Bool, op: Min, dst: []byte{0, 1, 1}, src: []byte{1, 0, 1}, want: []byte{0, 0, 1}},
		{dt: Bool, op: Max, dst: []byte{0, 1, 0}, src: []byte{1, 0, 0}, want: []byte{1, 1, 0}},
		{dt: Bool, op: BXor, dst: []byte{0, 1, 1, 2}, src: []byte{1, 0, 1, 1}, want: []byte{1, 1, 0, 0}},
		{dt: Bool, op: BAnd, dst: []byte{0, 1, 1}, src: []byte{1, 0, 3}, want: []byte{0, 0, 1}},
		{dt: Bool, op: BOr, dst: []byte{0, 1, 0}, src: []byte{0, 0, 4}, want: []byte{0, 1, 1}},
		{dt: Complex64, op: Sum, dst: rtF32s(1, 2, 3, 4), src: rtF32s(10, 20, 30, 40), want: rtF32s(11, 22, 33, 44)},
		{dt: Complex128, op: Avg, dst: rtF64s(1, -2), src: rtF64s(0.5, 0.25), want: rtF64s(1.5, -1.75)},
	}
	for i, c := range cases {
		dst := append([]byte(nil), c.dst...)
		ReduceInto(dst, c.src, c.dt, c.op)
		if !rtSameBits(c.dt, dst, c.want) {
			t.Errorf("case %d: ReduceInto %v %v: got % x, want % x", i, c.dt, c.op, dst, c.want)
		}
	}
}

func TestFinalizeCases(t *testing.T) {
	h, bf := Float32ToFloat16, Float32ToBFloat16
	cases := []struct {
		dt   DType
		op   Op
		n    int
		buf  []byte
		want []byte
	}{
		{Float32, Avg, 3, rtF32s(3, 1, rtNegZ32, rtInf32, rtNaN32), rtF32s(1, float32(1)/3, rtNegZ32, rtInf32, rtNaN32)},
		{Float32, Sum, 3, rtF32s(3), rtF32s(3)},
		{Float32, PremulSum, 3, rtF32s(3), rtF32s(3)},
		{Float32, Max, 3, rtF32s(3), rtF32s(3)},
		{Float64, Avg, 3, rtF64s(1, -6), rtF64s(1.0/3, -2)},
		{Float16, Avg, 3, rtU16s(h(1), h(65504)), rtU16s(h(float32(1)/3), h(65504.0/3))},
		{BFloat16, Avg, 2, rtU16s(bf(3), 0x0001), rtU16s(bf(1.5), 0x0000)},
		{Int8, Avg, 2, rtI8s(-7, 7, -128, 127), rtI8s(-3, 3, -64, 63)},
		{Int8, Avg, 200, rtI8s(-128, 127), rtI8s(0, 0)},
		{Uint8, Avg, 4, []byte{255, 3}, []byte{63, 0}},
		{Int16, Avg, 3, rtI16s(-32768, 10), rtI16s(-10922, 3)},
		{Int32, Avg, 4, rtI32s(math.MinInt32, -5), rtI32s(math.MinInt32/4, -1)},
		{Int64, Avg, 3, rtI64s(math.MaxInt64, -10), rtI64s(math.MaxInt64/3, -3)},
		{Complex64, Avg, 2, rtF32s(3, -1), rtF32s(1.5, -0.5)},
		{Complex128, Avg, 4, rtF64s(2, 8), rtF64s(0.5, 2)},
		{Bool, Max, 4, []byte{1, 0}, []byte{1, 0}},
	}
	for i, c := range cases {
		buf := append([]byte(nil), c.buf...)
		Finalize(buf, c.dt, c.op, c.n)
		if !rtSameBits(c.dt, buf, c.want) {
			t.Errorf("case %d: Finalize %v %v /%d: got % x, want % x", i, c.dt, c.op, c.n, buf, c.want)
		}
	}
}

func TestScaleIntoCases(t *testing.T) {
	h, bf := Float32ToFloat16, Float32ToBFloat16
	cases := []struct {
		dt   DType
		f    float64
		buf  []byte
		want []byte
	}{
		{Float32, 0.5, rtF32s(3, -1, rtInf32), rtF32s(1.5, -0.5, rtInf32)},
		{Float32, 0.1, rtF32s(3), rtF32s(3 * float32(0.1))},
		{Float64, 0.1, rtF64s(3), rtF64s(3 * rtPoint1)},
		{Float16, 2, rtU16s(h(40000), h(1.5)), rtU16s(0x7c00, h(3))},
		{BFloat16, -0.25, rtU16s(bf(8)), rtU16s(bf(-2))},
		{Complex64, 2, rtF32s(1, -2), rtF32s(2, -4)},
		{Complex128, 3, rtF64s(1, -2), rtF64s(3, -6)},
	}
	for i, c := range cases {
		buf := append([]byte(nil), c.buf...)
		ScaleInto(buf, c.dt, c.f)
		if !rtSameBits(c.dt, buf, c.want) {
			t.Errorf("case %d: ScaleInto %v *%v: got % x, want % x", i, c.dt, c.f, buf, c.want)
		}
	}
}

func rtMustPanic(t *testing.T, substr string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("no panic, want one mentioning %q", substr)
			return
		}
		if s, _ := r.(string); !strings.Contains(s, substr) {
			t.Errorf("panic %v, want one mentioning %q", r, substr)
		}
	}()
	f()
}

func TestReduceRefPanics(t *testing.T) {
	rtMustPanic(t, "length mismatch", func() { ReduceInto(make([]byte, 8), make([]byte, 4), Float32, Sum) })
	rtMustPanic(t, "whole number", func() { ReduceInto(make([]byte, 6), make([]byte, 6), Float32, Sum) })
	rtMustPanic(t, "complex", func() { ReduceInto(make([]byte, 8), make([]byte, 8), Complex64, Max) })
	rtMustPanic(t, "integer or bool", func() { ReduceInto(make([]byte, 8), make([]byte, 8), Float64, BXor) })
	rtMustPanic(t, "nranks", func() { Finalize(make([]byte, 8), Float64, Avg, 0) })
	rtMustPanic(t, "whole number", func() { Finalize(make([]byte, 7), Float64, Avg, 2) })
	rtMustPanic(t, "floating-point", func() { ScaleInto(make([]byte, 8), Int64, 2) })
	rtMustPanic(t, "bool", func() { Finalize(make([]byte, 8), Bool, Avg, 2) })
}

func TestSupportsTorchMatrix(t *testing.T) {
	all := []DType{Float32, Float64, Float16, BFloat16, Int8, Uint8, Int16, Int32, Int64, Bool, Complex64, Complex128}
	for _, dt := range all {
		for op := Sum; op < numOps; op++ {
			var want bool
			switch op {
			case Sum:
				want = true
			case Avg:
				want = dt != Bool
			case PremulSum:
				want = dt.IsFloat() || dt.IsComplex()
			case Prod, Min, Max:
				want = !dt.IsComplex()
			case BAnd, BOr, BXor:
				want = dt.IsInteger()
			}
			if got := Supports(op, dt) == nil; got != want {
				t.Errorf("Supports(%v, %v) = %v, want %v", op, dt, Supports(op, dt), want)
			}
		}
	}
	if Supports(numOps, Float32) == nil || Supports(Sum, numDTypes) == nil {
		t.Error("invalid op or dtype accepted")
	}
}

// Every supported (dtype, op) pair runs and keeps the identity-ish laws that
// hold exactly: op(x, x) = x for Min/Max/BAnd/BOr, x ^ x = 0, and Sum with a
// buffer of zeros changes nothing but -0 (which becomes +0).
func TestReduceIntoLaws(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for dt := Float32; dt < numDTypes; dt++ {
		for op := Sum; op < numOps; op++ {
			if Supports(op, dt) != nil {
				continue
			}
			x := make([]byte, 64*dt.Size())
			r.Read(x)
			if dt == Bool {
				for i := range x {
					x[i] &= 1
				}
			}
			dst := append([]byte(nil), x...)
			ReduceInto(dst, x, dt, op)
			switch op {
			case Min, Max, BAnd, BOr:
				if !rtSameBits(dt, dst, x) {
					t.Errorf("%v %v: op(x, x) != x", dt, op)
				}
			case BXor:
				if !rtSameBits(dt, dst, make([]byte, len(x))) {
					t.Errorf("%v %v: x ^ x != 0", dt, op)
				}
			}
		}
	}
}

// uint16, uint32 and uint64 order and divide as unsigned numbers: the
// all-ones pattern is the largest value, not -1.
func TestUnsignedReference(t *testing.T) {
	for _, c := range []struct {
		dt  DType
		put func([]byte, uint64)
		get func([]byte) uint64
		max uint64
	}{
		{Uint16, func(b []byte, v uint64) { refLE.PutUint16(b, uint16(v)) }, func(b []byte) uint64 { return uint64(refLE.Uint16(b)) }, 1<<16 - 1},
		{Uint32, func(b []byte, v uint64) { refLE.PutUint32(b, uint32(v)) }, func(b []byte) uint64 { return uint64(refLE.Uint32(b)) }, 1<<32 - 1},
		{Uint64, refLE.PutUint64, refLE.Uint64, 1<<64 - 1},
	} {
		sz := c.dt.Size()
		pair := func(a, b uint64) ([]byte, []byte) {
			x, y := make([]byte, sz), make([]byte, sz)
			c.put(x, a)
			c.put(y, b)
			return x, y
		}
		for _, k := range []struct {
			op      Op
			a, b, r uint64
		}{
			{Min, c.max, 1, 1}, {Max, c.max, 1, c.max}, {Min, 0, c.max, 0}, {Max, c.max - 1, c.max, c.max},
			{Sum, c.max, 2, 1}, {Prod, c.max, c.max, 1}, {BXor, c.max, 1, c.max - 1},
		} {
			x, y := pair(k.a, k.b)
			ReduceInto(x, y, c.dt, k.op)
			if got := c.get(x); got != k.r {
				t.Errorf("%v %v(%d, %d) = %d, want %d", c.dt, k.op, k.a, k.b, got, k.r)
			}
		}
		x, _ := pair(c.max, 0)
		Finalize(x, c.dt, Avg, 3)
		if got, want := c.get(x), c.max/3; got != want {
			t.Errorf("%v avg of %d over 3 ranks = %d, want %d", c.dt, c.max, got, want)
		}
	}
}
