package algorithms

// The reference reductions: the oracle that the fast kernels of
// backend/reduce and the executors are checked against. Clarity over speed.
//
// Element layout is little-endian, exactly as the bytes of a tensor on the
// machines gotree runs on. Semantics, per dtype:
//
//   - float32, float64: IEEE 754 arithmetic in the type itself (no fused
//     multiply-add). Min and Max propagate NaN (like torch.minimum and
//     torch.maximum) and order -0 below +0, so that they are commutative up
//     to the payload of a NaN: Max(-0, +0) = +0, Min(-0, +0) = -0. When both
//     operands are NaN, the destination's NaN is kept.
//   - float16, bfloat16: both operands are widened to float32 (exactly), the
//     operation is done in float32 and the result rounded to nearest-even
//     back to the 16-bit type (Float32ToFloat16, Float32ToBFloat16).
//   - float8_e4m3fn, float8_e5m2: like float16, through float32 (where
//     Sum and Prod of two float8 values are exact), rounded back as
//     Float32ToFloat8E4M3 and Float32ToFloat8E5M2 do (torch's casts); Min
//     and Max select one operand's bits.
//   - int8, uint8, int16, uint16, int32, uint32, int64, uint64: Sum and
//     Prod wrap around (two's complement), Min/Max are the signed or
//     unsigned order of the type, BAnd/BOr/BXor are bitwise.
//   - bool: one byte, zero is false and anything else true; results are
//     written as 0 or 1. Sum = OR, Prod = AND, Min = AND, Max = OR, and
//     BAnd/BOr/BXor are the logical and/or/xor.
//   - complex64, complex128: (real, imaginary) pairs of float32/float64;
//     Sum adds both parts.
//
// Avg and PremulSum reduce exactly like Sum: the division by the number of
// ranks is Finalize's job, the premultiplication ScaleInto's.

import (
	"encoding/binary"
	"fmt"
	"math"
)

var refLE = binary.LittleEndian

// refCount checks the operand lengths of the reference kernels and returns
// the element count. It panics on a length mismatch, a length that is not a
// multiple of the element size, an invalid dtype or an unsupported op:
// these are programming errors of the caller (an executor), which must
// have validated the request with Supports already.
func refCount(what string, dst, src []byte, dt DType, op Op) int {
	if err := Supports(op, dt); err != nil {
		panic(fmt.Sprintf("gotree/algorithms: %s: %v", what, err))
	}
	if len(dst) != len(src) {
		panic(fmt.Sprintf("gotree/algorithms: %s: length mismatch: dst has %d bytes, src %d", what, len(dst), len(src)))
	}
	return refElems(what, dst, dt)
}

func refElems(what string, buf []byte, dt DType) int {
	if !dt.Valid() {
		panic(fmt.Sprintf("gotree/algorithms: %s: invalid dtype %v", what, dt))
	}
	sz := dt.Size()
	if len(buf)%sz != 0 {
		panic(fmt.Sprintf("gotree/algorithms: %s: %d bytes is not a whole number of %v elements (%d bytes each)", what, len(buf), dt, sz))
	}
	return len(buf) / sz
}

// ReduceInto computes dst[i] = op(dst[i], src[i]) for every element of
// dtype dt (len(dst)/dt.Size() elements), with the semantics described at
// the top of this file. Avg and PremulSum are reduced as Sum.
//
// It panics if len(dst) != len(src), if the length is not a multiple of
// dt.Size(), or if Supports(op, dt) reports an error.
func ReduceInto(dst, src []byte, dt DType, op Op) {
	n := refCount("ReduceInto", dst, src, dt, op)
	if op == Avg || op == PremulSum {
		op = Sum
	}
	switch dt {
	case Float32:
		for i := 0; i < n; i++ {
			o := 4 * i
			a := math.Float32frombits(refLE.Uint32(dst[o:]))
			b := math.Float32frombits(refLE.Uint32(src[o:]))
			refLE.PutUint32(dst[o:], math.Float32bits(refF32(a, b, op)))
		}
	case Float64:
		for i := 0; i < n; i++ {
			o := 8 * i
			a := math.Float64frombits(refLE.Uint64(dst[o:]))
			b := math.Float64frombits(refLE.Uint64(src[o:]))
			refLE.PutUint64(dst[o:], math.Float64bits(refF64(a, b, op)))
		}
	case Float16, BFloat16:
		to32, from32 := Float16ToFloat32, Float32ToFloat16
		if dt == BFloat16 {
			to32, from32 = BFloat16ToFloat32, Float32ToBFloat16
		}
		for i := 0; i < n; i++ {
			o := 2 * i
			a := to32(refLE.Uint16(dst[o:]))
			b := to32(refLE.Uint16(src[o:]))
			refLE.PutUint16(dst[o:], from32(refF32(a, b, op)))
		}
	case Float8E4M3, Float8E5M2:
		to32, from32 := float8Conv(dt)
		for i := 0; i < n; i++ {
			a, b := to32(dst[i]), to32(src[i])
			if op == Min || op == Max {
				// Min and Max select an operand, NaN payload included.
				if refSelectsB(float64(a), float64(b), op == Max) {
					dst[i] = src[i]
				}
				continue
			}
			dst[i] = from32(refF32(a, b, op))
		}
	case Int8:
		for i := 0; i < n; i++ {
			dst[i] = uint8(refInt(int8(dst[i]), int8(src[i]), op))
		}
	case Uint8:
		for i := 0; i < n; i++ {
			dst[i] = refInt(dst[i], src[i], op)
		}
	case Uint16:
		for i := 0; i < n; i++ {
			o := 2 * i
			refLE.PutUint16(dst[o:], refInt(refLE.Uint16(dst[o:]), refLE.Uint16(src[o:]), op))
		}
	case Uint32:
		for i := 0; i < n; i++ {
			o := 4 * i
			refLE.PutUint32(dst[o:], refInt(refLE.Uint32(dst[o:]), refLE.Uint32(src[o:]), op))
		}
	case Uint64:
		for i := 0; i < n; i++ {
			o := 8 * i
			refLE.PutUint64(dst[o:], refInt(refLE.Uint64(dst[o:]), refLE.Uint64(src[o:]), op))
		}
	case Int16:
		for i := 0; i < n; i++ {
			o := 2 * i
			r := refInt(int16(refLE.Uint16(dst[o:])), int16(refLE.Uint16(src[o:])), op)
			refLE.PutUint16(dst[o:], uint16(r))
		}
	case Int32:
		for i := 0; i < n; i++ {
			o := 4 * i
			r := refInt(int32(refLE.Uint32(dst[o:])), int32(refLE.Uint32(src[o:])), op)
			refLE.PutUint32(dst[o:], uint32(r))
		}
	case Int64:
		for i := 0; i < n; i++ {
			o := 8 * i
			r := refInt(int64(refLE.Uint64(dst[o:])), int64(refLE.Uint64(src[o:])), op)
			refLE.PutUint64(dst[o:], uint64(r))
		}
	case Bool:
		for i := 0; i < n; i++ {
			a, b := dst[i] != 0, src[i] != 0
			var r bool
			switch op {
			case Sum, Max, BOr:
				r = a || b
			case Prod, Min, BAnd:
				r = a && b
			case BXor:
				r = a != b
			}
			dst[i] = 0
			if r {
				dst[i] = 1
			}
		}
	case Complex64:
		// Only Sum is supported: the parts are independent float32 sums.
		ReduceInto(dst, src, Float32, op)
	case Complex128:
		ReduceInto(dst, src, Float64, op)
	}
}

// refF32 applies op to two float32 values (Avg/PremulSum already mapped to Sum).
func refF32(a, b float32, op Op) float32 {
	switch op {
	case Sum:
		return a + b
	case Prod:
		return a * b
	case Min, Max:
		return float32(refMinMax(float64(a), float64(b), op == Max))
	}
	panic("gotree/algorithms: unreachable float op " + op.String())
}

func refF64(a, b float64, op Op) float64 {
	switch op {
	case Sum:
		return a + b
	case Prod:
		return a * b
	case Min, Max:
		return refMinMax(a, b, op == Max)
	}
	panic("gotree/algorithms: unreachable float op " + op.String())
}

// refMinMax is IEEE 754-2019 minimum/maximum: NaN if either operand is NaN
// (a's NaN when both are), -0 < +0. Widening float32 to float64 and back is
// exact, so it serves both widths.
func refMinMax(a, b float64, isMax bool) float64 {
	if refSelectsB(a, b, isMax) {
		return b
	}
	return a
}

// refSelectsB reports whether refMinMax(a, b, isMax) is b.
func refSelectsB(a, b float64, isMax bool) bool {
	switch {
	case a != a:
		return false
	case b != b:
		return true
	case a == b: // equal, or -0 and +0
		return math.Signbit(a) == isMax
	default:
		return (a > b) != isMax
	}
}

type refInteger interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64
}

// float8Conv returns the widening and rounding conversions of a float8 dtype.
func float8Conv(dt DType) (func(uint8) float32, func(float32) uint8) {
	if dt == Float8E5M2 {
		return Float8E5M2ToFloat32, Float32ToFloat8E5M2
	}
	return Float8E4M3ToFloat32, Float32ToFloat8E4M3
}

// refInt applies op to two integers; Go's integer arithmetic wraps.
func refInt[T refInteger](a, b T, op Op) T {
	switch op {
	case Sum:
		return a + b
	case Prod:
		return a * b
	case Min:
		return min(a, b)
	case Max:
		return max(a, b)
	case BAnd:
		return a & b
	case BOr:
		return a | b
	case BXor:
		return a ^ b
	}
	panic("gotree/algorithms: unreachable integer op " + op.String())
}

// Finalize applies the last step of a reduction to the reduced buffer buf:
// for Avg it divides every element by nranks, for every other op it does
// nothing. The division is
//
//   - float64: x / float64(nranks) in float64;
//   - float32, complex64 (both parts): x / float32(nranks) in float32;
//   - float16, bfloat16, float8: widened to float32, divided by
//     float32(nranks) and rounded to nearest-even (float8: the sum is
//     float8 too, so it may overflow where the average would not);
//   - integers: Go's (and C's) integer division, truncating toward zero
//     (-7 / 2 = -3): the same as torch's (sum / n).to(dtype), a true
//     division followed by a cast, whenever the sum did not wrap.
//
// Avg is not defined for bool (Supports rejects it). Finalize panics if
// nranks < 1, if len(buf) is not a multiple of dt.Size() or if
// Supports(op, dt) reports an error.
func Finalize(buf []byte, dt DType, op Op, nranks int) {
	if err := Supports(op, dt); err != nil {
		panic(fmt.Sprintf("gotree/algorithms: Finalize: %v", err))
	}
	n := refElems("Finalize", buf, dt)
	if op != Avg {
		return
	}
	if nranks < 1 {
		panic(fmt.Sprintf("gotree/algorithms: Finalize: nranks %d < 1", nranks))
	}
	switch dt {
	case Float32, Complex64:
		d := float32(nranks)
		if dt == Complex64 {
			n *= 2
		}
		for i := 0; i < n; i++ {
			o := 4 * i
			x := math.Float32frombits(refLE.Uint32(buf[o:]))
			refLE.PutUint32(buf[o:], math.Float32bits(x/d))
		}
	case Float64, Complex128:
		d := float64(nranks)
		if dt == Complex128 {
			n *= 2
		}
		for i := 0; i < n; i++ {
			o := 8 * i
			x := math.Float64frombits(refLE.Uint64(buf[o:]))
			refLE.PutUint64(buf[o:], math.Float64bits(x/d))
		}
	case Float16, BFloat16:
		to32, from32 := Float16ToFloat32, Float32ToFloat16
		if dt == BFloat16 {
			to32, from32 = BFloat16ToFloat32, Float32ToBFloat16
		}
		d := float32(nranks)
		for i := 0; i < n; i++ {
			o := 2 * i
			refLE.PutUint16(buf[o:], from32(to32(refLE.Uint16(buf[o:]))/d))
		}
	case Int8:
		for i := 0; i < n; i++ {
			buf[i] = uint8(int8(int64(int8(buf[i])) / int64(nranks)))
		}
	case Float8E4M3, Float8E5M2:
		to32, from32 := float8Conv(dt)
		d := float32(nranks)
		for i := 0; i < n; i++ {
			buf[i] = from32(to32(buf[i]) / d)
		}
	case Uint8:
		for i := 0; i < n; i++ {
			buf[i] = uint8(uint64(buf[i]) / uint64(nranks))
		}
	case Uint16:
		for i := 0; i < n; i++ {
			o := 2 * i
			refLE.PutUint16(buf[o:], refLE.Uint16(buf[o:])/uint16(nranks))
		}
	case Uint32:
		for i := 0; i < n; i++ {
			o := 4 * i
			refLE.PutUint32(buf[o:], refLE.Uint32(buf[o:])/uint32(nranks))
		}
	case Uint64:
		for i := 0; i < n; i++ {
			o := 8 * i
			refLE.PutUint64(buf[o:], refLE.Uint64(buf[o:])/uint64(nranks))
		}
	case Int16:
		for i := 0; i < n; i++ {
			o := 2 * i
			x := int64(int16(refLE.Uint16(buf[o:])))
			refLE.PutUint16(buf[o:], uint16(int16(x/int64(nranks))))
		}
	case Int32:
		for i := 0; i < n; i++ {
			o := 4 * i
			x := int64(int32(refLE.Uint32(buf[o:])))
			refLE.PutUint32(buf[o:], uint32(int32(x/int64(nranks))))
		}
	case Int64:
		for i := 0; i < n; i++ {
			o := 8 * i
			x := int64(refLE.Uint64(buf[o:]))
			refLE.PutUint64(buf[o:], uint64(x/int64(nranks)))
		}
	}
}

// ScaleInto multiplies every element of buf by factor: the executor
// premultiplies each rank's contribution of a PremulSum before summing.
// The product is computed
//
//   - float64, complex128 (both parts): x * factor in float64;
//   - float32, complex64 (both parts): x * float32(factor) in float32;
//   - float16, bfloat16, float8: widened to float32, multiplied by
//     float32(factor) and rounded to nearest-even.
//
// ScaleInto is only defined for floating-point and complex dtypes (those
// Supports(PremulSum, dt) accepts); it panics for other dtypes and if
// len(buf) is not a multiple of dt.Size().
func ScaleInto(buf []byte, dt DType, factor float64) {
	if err := Supports(PremulSum, dt); err != nil {
		panic(fmt.Sprintf("gotree/algorithms: ScaleInto: %v", err))
	}
	n := refElems("ScaleInto", buf, dt)
	switch dt {
	case Float32, Complex64:
		f := float32(factor)
		if dt == Complex64 {
			n *= 2
		}
		for i := 0; i < n; i++ {
			o := 4 * i
			x := math.Float32frombits(refLE.Uint32(buf[o:]))
			refLE.PutUint32(buf[o:], math.Float32bits(x*f))
		}
	case Float64, Complex128:
		if dt == Complex128 {
			n *= 2
		}
		for i := 0; i < n; i++ {
			o := 8 * i
			x := math.Float64frombits(refLE.Uint64(buf[o:]))
			refLE.PutUint64(buf[o:], math.Float64bits(x*factor))
		}
	case Float16, BFloat16:
		to32, from32 := Float16ToFloat32, Float32ToFloat16
		if dt == BFloat16 {
			to32, from32 = BFloat16ToFloat32, Float32ToBFloat16
		}
		f := float32(factor)
		for i := 0; i < n; i++ {
			o := 2 * i
			refLE.PutUint16(buf[o:], from32(to32(refLE.Uint16(buf[o:]))*f))
		}
	case Float8E4M3, Float8E5M2:
		to32, from32 := float8Conv(dt)
		f := float32(factor)
		for i := 0; i < n; i++ {
			buf[i] = from32(to32(buf[i]) * f)
		}
	}
}

// Float16ToFloat32 widens an IEEE 754 binary16 value (its bits) to float32.
// Every value, subnormals included, is exact; infinities keep their sign and
// a NaN keeps its sign and payload (shifted into the top of the float32
// mantissa), so a signalling NaN stays signalling.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal: rebias 15 -> 127
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	case man == 0: // signed zero
		return math.Float32frombits(sign)
	default: // subnormal: man * 2^-24, normal in float32
		// Normalise: shift the leading 1 into the implicit-bit position.
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	}
}

// Float32ToFloat16 rounds a float32 to the nearest IEEE 754 binary16 value,
// ties to even, and returns its bits. Values of magnitude >= 65520 become
// infinities, those <= 2^-25 (the half-way point to the smallest subnormal)
// signed zeros. A NaN stays a NaN of the same sign: it is made quiet and
// keeps the top 9 bits of its payload, as x86's F16C VCVTPS2PH does.
func Float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 // unbiased exponent; float32 subnormals give -127 and round to zero below
	switch {
	case e > 15:
		return sign | 0x7c00
	case e >= -14: // normal binary16 range
		v := uint32(e+15)<<10 | man>>13
		rem := man & 0x1fff
		if rem > 0x1000 || rem == 0x1000 && v&1 == 1 {
			v++ // a carry into the exponent is right, up to 0x7c00 = Inf
		}
		return sign | uint16(v)
	case e >= -25: // binary16 subnormal (or rounds up to the smallest normal)
		m := man | 0x800000 // value = m * 2^(e-23) = (m >> shift) * 2^-24
		shift := uint(-1 - e)
		v := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && v&1 == 1 {
			v++
		}
		return sign | uint16(v)
	default:
		return sign
	}
}

// BFloat16ToFloat32 widens a bfloat16 value (its bits) to float32: exact,
// bfloat16 is the top half of a float32.
func BFloat16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// Float32ToBFloat16 rounds a float32 to the nearest bfloat16, ties to even,
// and returns its bits. Overflow gives infinities; a NaN stays a NaN of the
// same sign, made quiet, with the top 6 bits of its payload.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x0040
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}
