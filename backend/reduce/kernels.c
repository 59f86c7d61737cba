// Vectorised reduction kernels. Semantics: algorithms/reduce_ref.go, which
// the tests of this package compare against bit for bit.
//
// Most kernels are plain loops that gcc auto-vectorises, compiled three
// times by target_clones (AVX-512, AVX2, baseline SSE2) and picked once at
// load time by an ifunc resolver. gcc 12 does not vectorise conversions of
// _Float16, so the fp16 arithmetic kernels use F16C intrinsics in functions
// compiled for one target each and chosen at run time from CPUID
// (gt_level). bfloat16 is the top half of a float32: shifts and an integer
// round-to-nearest-even, which vectorise as is.
//
// No expression here has a multiply feeding an add, so gcc's default
// -ffp-contract=fast cannot fuse anything: results are the IEEE results of
// each operation, as in Go.

#include <immintrin.h>
#include <string.h>

#include "kernels.h"

#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

static inline float u2f(uint32_t u) {
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static inline uint32_t f2u(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

// ---------------------------------------------------------------- generic

// BIN defines d[i] = EXPR(x = a[i], y = b[i]). ivdep: d may be identical to
// a or b (dependence distance 0), which vectorised code handles, and
// must not overlap them otherwise (checked in Go), so gcc need not emit a
// run-time alias check that would send d == a to the scalar loop.
#define BIN(name, T, EXPR)                                                      \
	CLONES static void name(T *d, const T *a, const T *b, size_t n) {          \
		_Pragma("GCC ivdep") for (size_t i = 0; i < n; i++) {                   \
			T x = a[i], y = b[i];                                               \
			d[i] = (EXPR);                                                      \
		}                                                                       \
	}

// Integers. Sum and Prod wrap: computed unsigned (the low bits of a sum or
// product do not depend on signedness), so there is no signed overflow.
BIN(sum_u8, uint8_t, (uint8_t)(x + y))
BIN(sum_u16, uint16_t, (uint16_t)(x + y))
BIN(sum_u32, uint32_t, x + y)
BIN(sum_u64, uint64_t, x + y)
BIN(prod_u8, uint8_t, (uint8_t)(x * y))
BIN(prod_u16, uint16_t, (uint16_t)((uint32_t)x * y))
BIN(prod_u32, uint32_t, x * y)
BIN(prod_u64, uint64_t, x * y)
BIN(min_i8, int8_t, x < y ? x : y)
BIN(max_i8, int8_t, x > y ? x : y)
BIN(min_u8, uint8_t, x < y ? x : y)
BIN(max_u8, uint8_t, x > y ? x : y)
BIN(min_i16, int16_t, x < y ? x : y)
BIN(max_i16, int16_t, x > y ? x : y)
BIN(min_i32, int32_t, x < y ? x : y)
BIN(max_i32, int32_t, x > y ? x : y)
BIN(min_i64, int64_t, x < y ? x : y)
BIN(max_i64, int64_t, x > y ? x : y)
// Bitwise ops do not care about element boundaries: bytes.
BIN(and_u8, uint8_t, x & y)
BIN(or_u8, uint8_t, x | y)
BIN(xor_u8, uint8_t, x ^ y)
// Bool: nonzero is true, results are 0 or 1.
BIN(or_bool, uint8_t, (uint8_t)((x != 0) | (y != 0)))
BIN(and_bool, uint8_t, (uint8_t)((x != 0) & (y != 0)))
BIN(xor_bool, uint8_t, (uint8_t)((x != 0) ^ (y != 0)))

BIN(sum_f32, float, x + y)
BIN(prod_f32, float, x * y)
BIN(sum_f64, double, x + y)
BIN(prod_f64, double, x * y)

// Float Min/Max on the bit patterns: IEEE 754-2019 minimum/maximum (NaN if
// either is NaN, a's NaN first; -0 < +0). Sign-magnitude bits map to a
// signed integer key that orders like the values, -0 below +0:
// key = bits ^ (sign ? 0x7f..f : 0).
#define FMINMAX(name, U, S, BITS, INF, CMP)                                      \
	BIN(name, U, ({                                                             \
		    const U absm = (U)~((U)1 << (BITS - 1));                             \
		    S ka = (S)x ^ (S)(((S)x >> (BITS - 1)) & (S)absm);                   \
		    S kb = (S)y ^ (S)(((S)y >> (BITS - 1)) & (S)absm);                   \
		    U r = (ka CMP kb) ? x : y;                                           \
		    r = ((U)(y & absm) > (U)(INF)) ? y : r;                              \
		    ((U)(x & absm) > (U)(INF)) ? x : r;                                  \
	    }))
FMINMAX(min_f32, uint32_t, int32_t, 32, 0x7f800000u, <)
FMINMAX(max_f32, uint32_t, int32_t, 32, 0x7f800000u, >)
FMINMAX(min_f64, uint64_t, int64_t, 64, 0x7ff0000000000000ull, <)
FMINMAX(max_f64, uint64_t, int64_t, 64, 0x7ff0000000000000ull, >)
FMINMAX(min_f16, uint16_t, int16_t, 16, 0x7c00u, <)
FMINMAX(max_f16, uint16_t, int16_t, 16, 0x7c00u, >)
FMINMAX(min_bf16, uint16_t, int16_t, 16, 0x7f80u, <)
FMINMAX(max_bf16, uint16_t, int16_t, 16, 0x7f80u, >)

// bfloat16 <-> float32, as algorithms.BFloat16ToFloat32/Float32ToBFloat16.
static inline float bf2f(uint16_t h) { return u2f((uint32_t)h << 16); }
static inline uint16_t f2bf(float f) {
	uint32_t u = f2u(f);
	uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)r;
}

// The bfloat16 arithmetic kernels work on pairs of elements as one 32-bit
// word: the even element shifted up and the odd one masked are the two
// float32 values, and the two rounded results recombine into one word.
// No widening or narrowing shuffles: ~25% fewer instructions than the
// element loop gcc makes of f2bf(bf2f(x) + bf2f(y)).
typedef uint32_t u32u __attribute__((aligned(1), may_alias));

// bf_round_hi is f2bf's result in the top half of the word (the bottom
// half is garbage).
static inline uint32_t bf_round_hi(float f) {
	uint32_t u = f2u(f);
	uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
	return (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : r;
}
// bf_round_hi_exact is bf_round_hi without the NaN case, for results of
// an add or a multiply of two bfloat16 values (widened exactly). Such a
// NaN is quiet with its low 16 bits zero (x86 returns a quieted input NaN,
// whose low bits are those of a bfloat16, or the default NaN 0xffc00000),
// so adding 0x7fff + lsb cannot carry out of the low half: the top half is
// the NaN itself, which is what the NaN case returns.
static inline uint32_t bf_round_hi_exact(float f) {
	uint32_t u = f2u(f);
	return u + 0x7fffu + ((u >> 16) & 1u);
}
#define BF2(name, ROUND_HI, EXPR)                                               \
	CLONES static void name(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float c) { \
		(void)c;                                                                \
		u32u *d2 = (u32u *)d;                                                   \
		const u32u *a2 = (const u32u *)a, *b2 = (const u32u *)b;                \
		size_t n2 = n / 2;                                                      \
		_Pragma("GCC ivdep") for (size_t i = 0; i < n2; i++) {                  \
			uint32_t xa = a2[i], xb = b2[i];                                    \
			float x = u2f(xa << 16), y = u2f(xb << 16);                         \
			(void)y;                                                            \
			uint32_t lo = ROUND_HI(EXPR);                                       \
			x = u2f(xa & 0xffff0000u), y = u2f(xb & 0xffff0000u);               \
			uint32_t hi = ROUND_HI(EXPR);                                       \
			d2[i] = (hi & 0xffff0000u) | (lo >> 16);                            \
		}                                                                       \
		if (n & 1) {                                                            \
			float x = bf2f(a[n - 1]), y = bf2f(b[n - 1]);                       \
			(void)y;                                                            \
			d[n - 1] = (uint16_t)(bf_round_hi(EXPR) >> 16);                     \
		}                                                                       \
	}
BF2(sum_bf16, bf_round_hi_exact, x + y)
BF2(prod_bf16, bf_round_hi_exact, x * y)
// A scalar c (1/nranks, a PremulSum factor) need not be a bfloat16: the
// NaN case stays.
BF2(div_bf16, bf_round_hi, x / c)
BF2(mul_bf16, bf_round_hi, x * c)

// UN defines d[i] = EXPR(x = a[i], c) for a scalar c of type C.
#define UN(name, T, C, EXPR)                                                    \
	CLONES static void name(T *d, const T *a, size_t n, C c) {                 \
		_Pragma("GCC ivdep") for (size_t i = 0; i < n; i++) {                   \
			T x = a[i];                                                         \
			d[i] = (EXPR);                                                      \
		}                                                                       \
	}
UN(div_f32, float, float, x / c)
UN(div_f64, double, double, x / c)
UN(mul_f32, float, float, x * c)
UN(mul_f64, double, double, x * c)
// Integer division truncating toward zero. For |x| < 2^31 the quotient
// rounded to double can never reach the next integer (its error is below
// 2^-21/n < 1/n, the distance of a non-integer x/n from any integer), so
// truncating the double quotient is exact and vectorises; int64 divides.
UN(div_i8, int8_t, double, (int8_t)(int32_t)((double)x / c))
UN(div_u8, uint8_t, double, (uint8_t)(int32_t)((double)x / c))
UN(div_i16, int16_t, double, (int16_t)(int32_t)((double)x / c))
UN(div_i32, int32_t, double, (int32_t)((double)x / c))
UN(div_i64, int64_t, int64_t, x / c)

// ---------------------------------------------------------------- fp16

// Portable binary16 <-> float32, as algorithms.Float16ToFloat32 and
// Float32ToFloat16 (NaNs: quieted, top payload bits kept, like F16C).
static inline float h2f_sw(uint16_t h) {
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
	if (exp == 0x1f) return u2f(sign | 0x7f800000u | man << 13);
	if (exp != 0) return u2f(sign | (exp + 112) << 23 | man << 13);
	// zero or subnormal: man * 2^-24, exact in float32
	float v = (float)man * 0x1p-24f;
	return u2f(sign | f2u(v));
}
static inline uint16_t f2h_sw(float f) {
	uint32_t b = f2u(f);
	uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
	int exp = (int)((b >> 23) & 0xffu);
	uint32_t man = b & 0x7fffffu;
	if (exp == 0xff) return man ? (uint16_t)(sign | 0x7e00u | (man >> 13)) : (uint16_t)(sign | 0x7c00u);
	int e = exp - 127;
	if (e > 15) return sign | 0x7c00u;
	if (e >= -14) {
		uint32_t v = (uint32_t)(e + 15) << 10 | man >> 13, rem = man & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (v & 1))) v++;
		return (uint16_t)(sign | v);
	}
	if (e >= -25) {
		uint32_t m = man | 0x800000u;
		unsigned shift = (unsigned)(-1 - e);
		uint32_t v = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (v & 1))) v++;
		return (uint16_t)(sign | v);
	}
	return sign;
}

#define ROUND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define T_V4 __attribute__((target("arch=x86-64-v4,f16c")))
#define T_V3 __attribute__((target("arch=x86-64-v3,f16c")))

// H16 defines the three versions of an fp16 kernel d[i] = round(EXPR(x, y))
// where x = a[i], y = b[i] (widened to float32) and c is a float32 scalar:
// name_v4 (AVX-512, 32 per step, masked tail), name_v3 (AVX2, 16 per step,
// scalar F16C tail) and name_sw (portable).
#define H16(name, E512, E256, ESCALAR)                                          \
	T_V4 static void name##_v4(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float c) { \
		const __m512 vc = _mm512_set1_ps(c);                                    \
		(void)vc;                                                               \
		size_t i = 0;                                                           \
		for (; i + 32 <= n; i += 32) {                                          \
			__m512 x0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i)));      \
			__m512 x1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i + 16))); \
			__m512 y0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i)));      \
			__m512 y1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i + 16))); \
			__m512 x = x0, y = y0;                                              \
			(void)y;                                                            \
			__m512 r0 = (E512);                                                 \
			x = x1, y = y1;                                                     \
			__m512 r1 = (E512);                                                 \
			_mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtps_ph(r0, ROUND));      \
			_mm256_storeu_si256((__m256i *)(d + i + 16), _mm512_cvtps_ph(r1, ROUND)); \
		}                                                                       \
		for (; i < n; i += 16) {                                                \
			__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1); \
			__m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, a + i));     \
			__m512 y = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b + i));     \
			(void)y;                                                            \
			_mm256_mask_storeu_epi16(d + i, m, _mm512_cvtps_ph((E512), ROUND)); \
		}                                                                       \
	}                                                                           \
	T_V3 static void name##_v3(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float c) { \
		const __m256 vc = _mm256_set1_ps(c);                                    \
		(void)vc;                                                               \
		size_t i = 0;                                                           \
		for (; i + 16 <= n; i += 16) {                                          \
			__m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));     \
			__m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 8))); \
			__m256 y0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));     \
			__m256 y1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8))); \
			__m256 x = x0, y = y0;                                              \
			(void)y;                                                            \
			__m256 r0 = (E256);                                                 \
			x = x1, y = y1;                                                     \
			__m256 r1 = (E256);                                                 \
			_mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(r0, ROUND));     \
			_mm_storeu_si128((__m128i *)(d + i + 8), _mm256_cvtps_ph(r1, ROUND)); \
		}                                                                       \
		for (; i < n; i++) {                                                    \
			float x = _cvtsh_ss(a[i]), y = _cvtsh_ss(b[i]);                     \
			(void)y;                                                            \
			d[i] = _cvtss_sh((ESCALAR), ROUND);                                 \
		}                                                                       \
	}                                                                           \
	static void name##_sw(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float c) { \
		for (size_t i = 0; i < n; i++) {                                        \
			float x = h2f_sw(a[i]), y = h2f_sw(b[i]);                           \
			(void)y;                                                            \
			d[i] = f2h_sw((ESCALAR));                                           \
		}                                                                       \
	}

H16(sum_f16, _mm512_add_ps(x, y), _mm256_add_ps(x, y), x + y)
H16(prod_f16, _mm512_mul_ps(x, y), _mm256_mul_ps(x, y), x * y)
H16(div_f16, _mm512_div_ps(x, vc), _mm256_div_ps(x, vc), x / c)
H16(mul_f16, _mm512_mul_ps(x, vc), _mm256_mul_ps(x, vc), x * c)

static int gt_level = -1; // -1: not yet probed
static int gt_cap = 2;

static int probe_level(void) {
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("f16c")) return 0;
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512cd"))
		return 2;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("bmi2"))
		return 1;
	return 0;
}

int gotree_reduce_level(void) {
	int l = __atomic_load_n(&gt_level, __ATOMIC_RELAXED);
	if (l < 0) {
		l = probe_level();
		__atomic_store_n(&gt_level, l, __ATOMIC_RELAXED);
	}
	int cap = __atomic_load_n(&gt_cap, __ATOMIC_RELAXED);
	return l < cap ? l : cap;
}

int gotree_reduce_set_level(int max) {
	__atomic_store_n(&gt_cap, max, __ATOMIC_RELAXED);
	return gotree_reduce_level();
}

typedef void (*h16fn)(uint16_t *, const uint16_t *, const uint16_t *, size_t, float);

static void run_h16(h16fn v4, h16fn v3, h16fn sw, uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float c) {
	switch (gotree_reduce_level()) {
	case 2: v4(d, a, b, n, c); return;
	case 1: v3(d, a, b, n, c); return;
	default: sw(d, a, b, n, c); return;
	}
}
#define RUN_H16(k, d, a, b, n, c) run_h16(k##_v4, k##_v3, k##_sw, (d), (a), (b), (n), (c))

// ---------------------------------------------------------------- entry points

int gotree_reduce3(int dt, int op, uintptr_t ud, uintptr_t ua, uintptr_t ub, size_t n) {
	void *d = (void *)ud;
	const void *a = (const void *)ua, *b = (const void *)ub;
	if (op == GT_AVG || op == GT_PREMUL_SUM) op = GT_SUM;
	switch (dt) {
	case GT_C64:
		if (op != GT_SUM) return -1;
		dt = GT_F32, n *= 2;
		break;
	case GT_C128:
		if (op != GT_SUM) return -1;
		dt = GT_F64, n *= 2;
		break;
	case GT_I8: case GT_U8: case GT_I16: case GT_I32: case GT_I64:
		if (op == GT_BAND || op == GT_BOR || op == GT_BXOR) {
			static const size_t sz[] = {[GT_I8] = 1, [GT_U8] = 1, [GT_I16] = 2, [GT_I32] = 4, [GT_I64] = 8};
			n *= sz[dt];
			switch (op) {
			case GT_BAND: and_u8(d, a, b, n); return 0;
			case GT_BOR: or_u8(d, a, b, n); return 0;
			default: xor_u8(d, a, b, n); return 0;
			}
		}
		break;
	}
#define K(DT, OP, fn) case (DT) * 16 + (OP): fn(d, a, b, n); return 0;
	switch (dt * 16 + op) {
	K(GT_F32, GT_SUM, sum_f32) K(GT_F32, GT_PROD, prod_f32) K(GT_F32, GT_MIN, min_f32) K(GT_F32, GT_MAX, max_f32)
	K(GT_F64, GT_SUM, sum_f64) K(GT_F64, GT_PROD, prod_f64) K(GT_F64, GT_MIN, min_f64) K(GT_F64, GT_MAX, max_f64)
	K(GT_BF16, GT_MIN, min_bf16) K(GT_BF16, GT_MAX, max_bf16)
	case GT_BF16 * 16 + GT_SUM: sum_bf16(d, a, b, n, 0); return 0;
	case GT_BF16 * 16 + GT_PROD: prod_bf16(d, a, b, n, 0); return 0;
	K(GT_F16, GT_MIN, min_f16) K(GT_F16, GT_MAX, max_f16)
	case GT_F16 * 16 + GT_SUM: RUN_H16(sum_f16, d, a, b, n, 0); return 0;
	case GT_F16 * 16 + GT_PROD: RUN_H16(prod_f16, d, a, b, n, 0); return 0;
	K(GT_I8, GT_SUM, sum_u8) K(GT_I8, GT_PROD, prod_u8) K(GT_I8, GT_MIN, min_i8) K(GT_I8, GT_MAX, max_i8)
	K(GT_U8, GT_SUM, sum_u8) K(GT_U8, GT_PROD, prod_u8) K(GT_U8, GT_MIN, min_u8) K(GT_U8, GT_MAX, max_u8)
	K(GT_I16, GT_SUM, sum_u16) K(GT_I16, GT_PROD, prod_u16) K(GT_I16, GT_MIN, min_i16) K(GT_I16, GT_MAX, max_i16)
	K(GT_I32, GT_SUM, sum_u32) K(GT_I32, GT_PROD, prod_u32) K(GT_I32, GT_MIN, min_i32) K(GT_I32, GT_MAX, max_i32)
	K(GT_I64, GT_SUM, sum_u64) K(GT_I64, GT_PROD, prod_u64) K(GT_I64, GT_MIN, min_i64) K(GT_I64, GT_MAX, max_i64)
	K(GT_BOOL, GT_SUM, or_bool) K(GT_BOOL, GT_MAX, or_bool) K(GT_BOOL, GT_BOR, or_bool)
	K(GT_BOOL, GT_PROD, and_bool) K(GT_BOOL, GT_MIN, and_bool) K(GT_BOOL, GT_BAND, and_bool)
	K(GT_BOOL, GT_BXOR, xor_bool)
	}
#undef K
	return -1;
}

int gotree_avg(int dt, uintptr_t ud, uintptr_t ua, size_t n, int64_t nranks) {
	void *d = (void *)ud;
	const void *a = (const void *)ua;
	if ((nranks & (nranks - 1)) == 0 && dt != GT_I8 && dt != GT_U8 && dt != GT_I16 && dt != GT_I32 && dt != GT_I64) {
		// x / 2^k and x * 2^-k are the same real number, so they round to
		// the same float (subnormal results included), and a multiply is
		// several times cheaper than a divide.
		return gotree_scale(dt, ud, ua, n, 1.0 / (double)nranks);
	}
	switch (dt) {
	case GT_C64: n *= 2; /* fallthrough */
	case GT_F32: div_f32(d, a, n, (float)nranks); return 0;
	case GT_C128: n *= 2; /* fallthrough */
	case GT_F64: div_f64(d, a, n, (double)nranks); return 0;
	case GT_F16: RUN_H16(div_f16, d, a, a, n, (float)nranks); return 0;
	case GT_BF16: div_bf16(d, a, a, n, (float)nranks); return 0;
	case GT_I8: div_i8(d, a, n, (double)nranks); return 0;
	case GT_U8: div_u8(d, a, n, (double)nranks); return 0;
	case GT_I16: div_i16(d, a, n, (double)nranks); return 0;
	case GT_I32: div_i32(d, a, n, (double)nranks); return 0;
	case GT_I64: div_i64(d, a, n, nranks); return 0;
	}
	return -1;
}

int gotree_scale(int dt, uintptr_t ud, uintptr_t ua, size_t n, double factor) {
	void *d = (void *)ud;
	const void *a = (const void *)ua;
	switch (dt) {
	case GT_C64: n *= 2; /* fallthrough */
	case GT_F32: mul_f32(d, a, n, (float)factor); return 0;
	case GT_C128: n *= 2; /* fallthrough */
	case GT_F64: mul_f64(d, a, n, factor); return 0;
	case GT_F16: RUN_H16(mul_f16, d, a, a, n, (float)factor); return 0;
	case GT_BF16: mul_bf16(d, a, a, n, (float)factor); return 0;
	}
	return -1;
}
