package algorithms

import "math"

// The two 8-bit floating-point formats of torch (float8_e4m3fn and
// float8_e5m2, the OCP FP8 formats). Conversions from float32 round to
// nearest, ties to even, and treat what does not fit as torch's casts do:
//
//   - E4M3: bias 7, 3 mantissa bits, no infinities; 0x7f and 0xff are NaN.
//     A magnitude that rounds above 448 (every value above 464, and
//     infinities) becomes NaN.
//   - E5M2: bias 15, 2 mantissa bits, the top byte of a binary16; exponent
//     31 holds infinities (mantissa 0) and NaNs. A magnitude that rounds
//     above 57344 (61440 and more) becomes infinity.
//
// Every NaN converts to 0x7f with its sign bit. Widening to float32 is
// exact for every value.

// Float8E4M3ToFloat32 widens a float8_e4m3fn value (its bits) to float32.
func Float8E4M3ToFloat32(b uint8) float32 {
	sign := uint32(b&0x80) << 24
	mag := b & 0x7f
	if mag == 0x7f {
		return math.Float32frombits(sign | 0x7fc00000)
	}
	exp, man := uint32(mag>>3), uint32(mag&7)
	if exp == 0 { // subnormal: man * 2^-9
		return math.Float32frombits(sign | math.Float32bits(float32(man)/512))
	}
	return math.Float32frombits(sign | (exp+127-7)<<23 | man<<20)
}

// Float8E5M2ToFloat32 widens a float8_e5m2 value (its bits) to float32.
func Float8E5M2ToFloat32(b uint8) float32 {
	return Float16ToFloat32(uint16(b) << 8)
}

// Float32ToFloat8E4M3 rounds a float32 to the nearest float8_e4m3fn value
// (see the formats above) and returns its bits.
func Float32ToFloat8E4M3(f float32) uint8 {
	return float8Round(f, 3, 7, 0x7e, 0x7f)
}

// Float32ToFloat8E5M2 rounds a float32 to the nearest float8_e5m2 value
// (see the formats above) and returns its bits.
func Float32ToFloat8E5M2(f float32) uint8 {
	return float8Round(f, 2, 15, 0x7b, 0x7c)
}

// float8Round rounds f to a float8 format with man mantissa bits and the
// given exponent bias, ties to even. A magnitude whose code would exceed
// maxCode becomes overflow (E4M3: NaN; E5M2: infinity); NaN becomes 0x7f.
// The sign bit is kept in every case.
func float8Round(f float32, man, bias uint32, maxCode, overflow uint8) uint8 {
	bits := math.Float32bits(f)
	sign := uint8(bits>>24) & 0x80
	a := bits & 0x7fffffff
	if a > 0x7f800000 {
		return sign | 0x7f
	}
	var code uint32
	if a < (128-bias)<<23 { // below the smallest normal, 2^(1-bias)
		// The subnormal grid has spacing 2^(1-bias-man): scale it to the
		// integers (exact, a power of two in float64) and round to even.
		q := float64(math.Float32frombits(a)) * math.Ldexp(1, int(bias+man-1))
		code = uint32(math.RoundToEven(q)) // 1 << man is the smallest normal: its code too
	} else {
		shift := 23 - man
		v := a >> shift
		rem := a & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && v&1 == 1 {
			v++
		}
		code = v - (127-bias)<<man // rebias the exponent field
	}
	if code > uint32(maxCode) {
		return sign | overflow
	}
	return sign | uint8(code)
}
