// gotree float8 (float8_e4m3fn and float8_e5m2) element operations for the
// device, with the semantics of algorithms/float8.go and reduce_ref.go:
//
//   widening to float32 is exact; rounding back is to nearest-even, a
//   magnitude past the largest finite code becomes the overflow code
//   (e4m3fn: NaN 0x7f; e5m2: infinity 0x7c) and every NaN becomes 0x7f
//   with its sign. Sum and Prod of two float8 values are exact in float32,
//   so each result is rounded once. Min and Max select one operand's bits.
//
// NaN signs are decided here in integer code, not by the float unit (the
// GPU's NaN results are canonical, positive; the host's on x86-64 are not):
// an operation with a NaN operand returns the first NaN operand's sign
// with code 0x7f, and one that makes a NaN from numbers (inf - inf,
// 0 * inf) returns 0xff, x86-64's negative default NaN, so device and host
// results agree bit for bit.
//
// Only portable integer and float code and the two bit-cast intrinsics:
// cuda/fp8_test.go compiles this header with the host C++ compiler (with
// stand-ins for __device__, __forceinline__, __uint_as_float and
// __float_as_uint) and compares every operand and every pair with the Go
// reference.
#ifndef GOTREE_FP8_CUH
#define GOTREE_FP8_CUH

// Format parameters: M mantissa bits, bias B, the largest finite code and
// the code that overflow becomes.
struct F8E4M3 {
  static constexpr unsigned M = 3, B = 7, MaxCode = 0x7e, Overflow = 0x7f;
  __device__ __forceinline__ static bool isNaN(unsigned char b) { return (b & 0x7fu) == 0x7fu; }
};
struct F8E5M2 {
  static constexpr unsigned M = 2, B = 15, MaxCode = 0x7b, Overflow = 0x7c;
  __device__ __forceinline__ static bool isNaN(unsigned char b) { return (b & 0x7fu) > 0x7cu; }
};

// gtF8Widen returns the float32 value of a float8 code. NaNs come back as
// the quiet NaN of their sign (only the sign survives a round trip).
template <class F>
__device__ __forceinline__ float gtF8Widen(unsigned char b) {
  const unsigned sign = (unsigned)(b & 0x80u) << 24, mag = b & 0x7fu;
  if (F::isNaN(b)) return __uint_as_float(sign | 0x7fc00000u);
  if (mag == F::Overflow) return __uint_as_float(sign | 0x7f800000u);  // e5m2 infinity
  if ((mag >> F::M) == 0) {
    // Subnormal: mag * 2^(1-B-M), a power of two times a small integer.
    const float quantum = __uint_as_float((unsigned)(127 + 1 - F::B - F::M) << 23);
    return __uint_as_float(sign | __float_as_uint((float)mag * quantum));
  }
  return __uint_as_float(sign | ((mag << (23 - F::M)) + ((127u - F::B) << 23)));
}

// gtF8Round rounds a float32 to the float8 format, ties to even.
template <class F>
__device__ __forceinline__ unsigned char gtF8Round(float f) {
  const unsigned bits = __float_as_uint(f);
  const unsigned sign = (bits >> 24) & 0x80u, a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned char)(sign | 0x7fu);
  // The float8 exponent of a (biased, may be <= 0), and how many low bits
  // of a's 24-bit significand fall below the float8 quantum there: 23 - M
  // for normal results, more below 2^(1-B) where the spacing stays fixed.
  const int e32 = (int)(a >> 23);
  const int e8 = (e32 == 0 ? 1 : e32) - 127 + (int)F::B;
  const unsigned drop = 23 - F::M + (unsigned)(e8 < 1 ? 1 - e8 : 0);
  if (drop > 31) return (unsigned char)sign;
  const unsigned sig = (a & 0x7fffffu) | (e32 == 0 ? 0u : 0x800000u);
  unsigned q = sig >> drop;
  const unsigned rest = sig & ((1u << drop) - 1), half = 1u << (drop - 1);
  q += (rest > half || (rest == half && (q & 1u))) ? 1u : 0u;
  // q counts quanta, the implicit bit included for normals: adding the
  // exponent field's offset carries a rounding overflow into the exponent.
  const unsigned code = q + ((unsigned)(e8 < 1 ? 0 : e8 - 1) << F::M);
  return (unsigned char)(sign | (code > F::MaxCode ? F::Overflow : code));
}

// gtF8SelectsB: whether IEEE minimum (IsMax false) or maximum of the
// widened x and y is y: a NaN wins (x's first), -0 orders below +0.
template <bool IsMax>
__device__ __forceinline__ bool gtF8SelectsB(float x, float y) {
  if (x != x) return false;
  if (y != y) return true;
  if (x == y) return ((__float_as_uint(x) >> 31) != 0) == IsMax;
  return (x > y) != IsMax;
}

// F8Op<F, Kind>::f is one element operation on codes: Kind 0 Sum, 1 Prod,
// 2 Min, 3 Max. It has the shape of the integer operators of reduce.cuh,
// so that Red<u8, F8Op<...>> runs it over 16-byte units.
template <class F, int Kind>
struct F8Op {
  template <typename T>
  __device__ __forceinline__ static T f(T a, T b) {
    const unsigned char ca = (unsigned char)a, cb = (unsigned char)b;
    const float x = gtF8Widen<F>(ca), y = gtF8Widen<F>(cb);
    if (Kind >= 2) return gtF8SelectsB<Kind == 3>(x, y) ? b : a;
    if (F::isNaN(ca)) return (T)(ca | 0x7fu);
    if (F::isNaN(cb)) return (T)(cb | 0x7fu);
    const float r = Kind == 0 ? x + y : x * y;
    if (r != r) return (T)0xffu;
    return (T)gtF8Round<F>(r);
  }
};

// Red8<Op>::apply reduces two 16-byte units of float8 codes. Unlike
// reduce.cuh's Red, which unrolls its element loop, it unrolls only the
// four words and loops over their bytes: an F8Op is some fifty
// instructions, and sixteen copies of it in every place the kernel reduces
// made each float8 kernel 3-4 times the size of a float16 one.
template <class Op>
struct Red8 {
  __device__ __forceinline__ static V4 apply(V4 a, V4 b) {
    return V4{word(a.x, b.x), word(a.y, b.y), word(a.z, b.z), word(a.w, b.w)};
  }
  __device__ __forceinline__ static unsigned word(unsigned x, unsigned y) {
    unsigned r = 0;
#pragma unroll 1
    for (int s = 0; s < 32; s += 8)
      r |= (unsigned)Op::template f<unsigned char>((unsigned char)(x >> s), (unsigned char)(y >> s)) << s;
    return r;
  }
};

// gtF8Scale is Finalize's division (IsDiv) and ScaleInto's product: through
// float32, one rounding; NaN signs as F8Op's (c is the second operand).
template <class F, bool IsDiv>
__device__ __forceinline__ unsigned char gtF8Scale(unsigned char b, float c) {
  if (F::isNaN(b)) return (unsigned char)(b | 0x7fu);
  if (c != c) return (unsigned char)(((__float_as_uint(c) >> 24) & 0x80u) | 0x7fu);
  const float x = gtF8Widen<F>(b);
  const float r = IsDiv ? x / c : x * c;
  if (r != r) return 0xffu;
  return gtF8Round<F>(r);
}

#endif
