// Vectorised reduction kernels. Semantics: algorithms/reduce_ref.go, which
// the tests of this package compare against bit for bit.
//
// Most kernels are plain loops that gcc auto-vectorises. They are written
// once (kernels_body.h) and compiled three times, for x86-64-v4 (AVX-512),
// x86-64-v3 (AVX2, FMA, F16C) and baseline x86-64 (SSE2): the function
// multiversioning of target_clones("arch=x86-64-v4", "arch=x86-64-v3",
// "default"), done by hand (#pragma GCC target) so that a test can run
// every version on one machine (gotree_reduce_set_level) instead of only
// the one the ifunc resolver would pick. The version is chosen from CPUID
// once (__builtin_cpu_supports("x86-64-v4") / ("x86-64-v3")).
// gcc 12 does not vectorise conversions of _Float16, so the fp16
// arithmetic kernels are F16C intrinsics, one hand-written function per
// target. bfloat16 is the top half of a float32: shifts and an integer
// round-to-nearest-even, which vectorise as is.
//
// No expression here has a multiply feeding an add, so gcc's default
// -ffp-contract=fast cannot fuse anything: results are the IEEE results of
// each operation, as in Go.

#include <string.h>

#if defined(__x86_64__) && !defined(GT_PORTABLE_ONLY) // GT_PORTABLE_ONLY: to check that build
#define GT_X86 1
#include <immintrin.h>
#else
// Elsewhere (arm64: Grace) only the portable version is built: gcc
// vectorises it for the baseline of the target (NEON on arm64).
#define GT_X86 0
#endif

#include "kernels.h"

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

// ---------------------------------------------------------------- kernel macros

// BIN defines d[i] = EXPR(x = a[i], y = b[i]). ivdep: d may be identical to
// a or b (dependence distance 0), which vectorised code handles, and
// must not overlap them otherwise (checked in Go), so gcc need not emit a
// run-time alias check that would send d == a to the scalar loop.
#define BIN(name, T, EXPR)                                                      \
	static void SFX(name)(T *d, const T *a, const T *b, size_t n) {          \
		_Pragma("GCC ivdep") for (size_t i = 0; i < n; i++) {                   \
			T x = a[i], y = b[i];                                               \
			d[i] = (EXPR);                                                      \
		}                                                                       \
	}

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

// bfloat16 -> float32, as algorithms.BFloat16ToFloat32.
static inline float bf2f(uint16_t h) { return u2f((uint32_t)h << 16); }

// The bfloat16 arithmetic kernels work on pairs of elements as one 32-bit
// word: the even element shifted up and the odd one masked are the two
// float32 values, and the two rounded results recombine into one word.
// No widening or narrowing shuffles: fewer instructions than the element
// loop gcc makes of a widen-add-round-narrow per element.
typedef uint32_t u32u __attribute__((aligned(1), may_alias));

// bf_round_hi rounds f to bfloat16 as algorithms.Float32ToBFloat16 does
// (nearest-even; a NaN quieted, keeping its top payload bits) and returns
// the result in the top half of the word (the bottom half is garbage).
static inline uint32_t bf_round_hi(float f) {
	uint32_t u = f2u(f);
	uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
	return (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : r;
}
// bf_round_hi_exact is bf_round_hi without the NaN case, for results of
// an add or a multiply of two bfloat16 values (widened exactly). Such a
// NaN is quiet with its low 16 bits zero (x86 and arm64 return a quieted
// input NaN, whose low bits are those of a bfloat16, or a default NaN,
// 0xffc00000 or 0x7fc00000),
// so adding 0x7fff + lsb cannot carry out of the low half: the top half is
// the NaN itself, which is what the NaN case returns.
static inline uint32_t bf_round_hi_exact(float f) {
	uint32_t u = f2u(f);
	return u + 0x7fffu + ((u >> 16) & 1u);
}
#define BF2(name, ROUND_HI, EXPR)                                               \
	static void SFX(name)(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float c) { \
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

// F8 defines d[i] = ENC(EXPR) with x = DEC(a[i]) and a scalar c: the
// float8 division and multiplication (Avg, PremulSum).
#define F8(name, DEC, ENC, EXPR)                                                \
	static void SFX(name)(uint8_t *d, const uint8_t *a, size_t n, float c) { \
		_Pragma("GCC ivdep") for (size_t i = 0; i < n; i++) {                   \
			float x = DEC(a[i]);                                                \
			d[i] = ENC(EXPR);                                                   \
		}                                                                       \
	}
// UN defines d[i] = EXPR(x = a[i], c) for a scalar c of type C.
#define UN(name, T, C, EXPR)                                                    \
	static void SFX(name)(T *d, const T *a, size_t n, C c) {                 \
		_Pragma("GCC ivdep") for (size_t i = 0; i < n; i++) {                   \
			T x = a[i];                                                         \
			d[i] = (EXPR);                                                      \
		}                                                                       \
	}

// ---------------------------------------------------------------- fp16

// Portable binary16 <-> float32, as algorithms.Float16ToFloat32 and
// Float32ToFloat16 (a NaN keeps its sign and top payload bits, and comes
// back down quiet, like F16C).
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

#if GT_X86
#define ROUND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define T_V4 __attribute__((target("arch=x86-64-v4,f16c")))
#define T_V3 __attribute__((target("arch=x86-64-v3,f16c")))
#endif

// H16 defines the three versions of an fp16 kernel d[i] = round(EXPR(x, y))
// where x = a[i], y = b[i] (widened to float32) and c is a float32 scalar:
// name_v4 (AVX-512, 32 per step, masked tail), name_v3 (AVX2, 16 per step,
// scalar F16C tail) and name_sw (portable).
#define H16_V4(name, E512, ESCALAR)                                          \
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
	}

#define H16_V3(name, E256, ESCALAR)                                             \
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
	}

#define H16_SW(name, ESCALAR)                                                   \
	static void name##_sw(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float c) { \
		for (size_t i = 0; i < n; i++) {                                        \
			float x = h2f_sw(a[i]), y = h2f_sw(b[i]);                           \
			(void)y;                                                            \
			d[i] = f2h_sw((ESCALAR));                                           \
		}                                                                       \
	}

#if GT_X86
#define H16(name, E512, E256, ESCALAR) H16_V4(name, E512, ESCALAR) H16_V3(name, E256, ESCALAR) H16_SW(name, ESCALAR)
#else
#define H16(name, E512, E256, ESCALAR) H16_SW(name, ESCALAR)
#endif

H16(sum_f16, _mm512_add_ps(x, y), _mm256_add_ps(x, y), x + y)
H16(prod_f16, _mm512_mul_ps(x, y), _mm256_mul_ps(x, y), x * y)
H16(div_f16, _mm512_div_ps(x, vc), _mm256_div_ps(x, vc), x / c)
H16(mul_f16, _mm512_mul_ps(x, vc), _mm256_mul_ps(x, vc), x * c)

// ---------------------------------------------------------------- float8

// float8 <-> float32, as algorithms.Float8E4M3ToFloat32,
// Float32ToFloat8E4M3 and their E5M2 twins: widening is exact; rounding is
// to nearest-even, a magnitude whose code would pass max_code becomes ovf
// (E4M3: NaN 0x7f; E5M2: infinity 0x7c), and every NaN becomes 0x7f with
// its sign. They build the lookup tables below and run Avg and PremulSum.
// Scalar: gcc 12 vectorises neither these branches nor a branch-free form
// of them (a float computed in a case not taken may trap; without traps it
// still refuses float <-> byte conversions through bit casts): a sum
// computed with them ran at 170-210 MB/s, the table at 1.2 GB/s.
static inline float f8e4m3_to_f32(uint8_t b) {
	uint32_t sign = (uint32_t)(b & 0x80) << 24, mag = b & 0x7fu;
	uint32_t e = mag >> 3, m = mag & 7u;
	if (mag == 0x7f) return u2f(sign | 0x7fc00000u);
	if (e == 0) return u2f(sign | f2u((float)m * (1.0f / 512))); // m * 2^-9
	return u2f(sign | (e + 127 - 7) << 23 | m << 20);
}

static inline float f8e5m2_to_f32(uint8_t b) {
	uint32_t sign = (uint32_t)(b & 0x80) << 24, mag = b & 0x7fu;
	uint32_t e = mag >> 2, m = mag & 3u;
	if (e == 31) return u2f(sign | (m ? 0x7fc00000u : 0x7f800000u));
	if (e == 0) return u2f(sign | f2u((float)m * (1.0f / 65536))); // m * 2^-16
	return u2f(sign | (e + 127 - 15) << 23 | m << 21);
}

static inline uint8_t f32_to_f8(float f, uint32_t man, uint32_t bias, uint32_t max_code, uint8_t ovf) {
	uint32_t bits = f2u(f);
	uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
	uint32_t a = bits & 0x7fffffffu, code;
	if (a > 0x7f800000u) return sign | 0x7f;
	if (a < (128 - bias) << 23) {
		// Below the smallest normal 2^(1-bias): the grid is 2^(1-bias-man).
		// The value is sig * 2^(e - 150) (sig with its implicit bit): shift
		// sig right by the difference and round to even.
		uint32_t e = a >> 23, sig = a & 0x7fffffu;
		if (e) sig |= 0x800000u; else e = 1;
		uint32_t s = 150 - e + 1 - bias - man; // > 20, since a < 2^(1-bias)
		if (s >= 32) return sign;
		uint32_t v = sig >> s, rem = sig & ((1u << s) - 1), half = 1u << (s - 1);
		code = v + (rem > half || (rem == half && (v & 1)));
	} else {
		// Drop 23 - man mantissa bits, round to even, rebias the exponent.
		uint32_t sh = 23 - man;
		uint32_t v = a >> sh, rem = a & ((1u << sh) - 1), half = 1u << (sh - 1);
		v += rem > half || (rem == half && (v & 1));
		code = v - ((127 - bias) << man);
	}
	return code > max_code ? (uint8_t)(sign | ovf) : (uint8_t)(sign | code);
}
static inline uint8_t f32_to_f8e4m3(float f) { return f32_to_f8(f, 3, 7, 0x7e, 0x7f); }
static inline uint8_t f32_to_f8e5m2(float f) { return f32_to_f8(f, 2, 15, 0x7b, 0x7c); }

// f_select_b: whether IEEE minimum (is_max 0) or maximum (1) of x and y is
// y, as algorithms' refSelectsB decides (a NaN wins, x's first; -0 < +0).
static inline int f_select_b(float x, float y, int is_max) {
	int neg_x = (int)(f2u(x) >> 31);
	int ordered = x == y ? neg_x == is_max : (is_max ? y > x : y < x);
	return (x == x) & ((y != y) | ordered);
}

// The binary float8 ops are table lookups: one 64 KiB table per format and
// op (result of every pair of operands), built on first use from the
// scalar functions above, about 1 ms. Lookups run at 1-2 GB/s where the
// arithmetic ran at 0.2.
enum { F8_SUM, F8_PROD, F8_MIN, F8_MAX, F8_NOPS };
static uint8_t f8_tab[2][F8_NOPS][1 << 16]; // .bss: untouched tables cost no memory
static int f8_state[2][F8_NOPS];              // 0 empty, 1 being built, 2 ready

static void f8_build(int e5m2, int op, uint8_t *t) {
	for (int x = 0; x < 256; x++) {
		for (int y = 0; y < 256; y++) {
			float fx = e5m2 ? f8e5m2_to_f32((uint8_t)x) : f8e4m3_to_f32((uint8_t)x);
			float fy = e5m2 ? f8e5m2_to_f32((uint8_t)y) : f8e4m3_to_f32((uint8_t)y);
			float r = op == F8_SUM ? fx + fy : fx * fy;
			uint8_t v;
			if (op == F8_MIN || op == F8_MAX) {
				v = (uint8_t)(f_select_b(fx, fy, op == F8_MAX) ? y : x);
			} else {
				v = e5m2 ? f32_to_f8e5m2(r) : f32_to_f8e4m3(r);
			}
			t[x << 8 | y] = v;
		}
	}
}

static const uint8_t *f8_table(int e5m2, int op) {
	int *st = &f8_state[e5m2][op];
	int empty = 0;
	if (__atomic_load_n(st, __ATOMIC_ACQUIRE) != 2) {
		if (__atomic_compare_exchange_n(st, &empty, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			f8_build(e5m2, op, f8_tab[e5m2][op]);
			__atomic_store_n(st, 2, __ATOMIC_RELEASE);
		}
		while (__atomic_load_n(st, __ATOMIC_ACQUIRE) != 2) {
			// another thread is building it (once per process and table)
		}
	}
	return f8_tab[e5m2][op];
}

static void f8_lookup(int dt, int op, uint8_t *d, const uint8_t *a, const uint8_t *b, size_t n) {
	const uint8_t *t = f8_table(dt == GT_F8E5M2, op);
	for (size_t i = 0; i < n; i++) d[i] = t[(size_t)a[i] << 8 | b[i]];
}

static int gt_level = -1; // -1: not yet probed
static int gt_cap = 2;

static int probe_level(void) {
#if GT_X86
	__builtin_cpu_init();
	if (__builtin_cpu_supports("x86-64-v4")) return 2;
	if (__builtin_cpu_supports("x86-64-v3")) return 1;
#endif
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

// ---------------------------------------------------------------- versions

#if GT_X86
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
#define SFX(name) name##_v4
#define H16SFX(name) name##_v4
#include "kernels_body.h"
#undef SFX
#undef H16SFX
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
#define SFX(name) name##_v3
#define H16SFX(name) name##_v3
#include "kernels_body.h"
#undef SFX
#undef H16SFX
#pragma GCC pop_options
#endif

#define SFX(name) name##_sw
#define H16SFX(name) name##_sw
#include "kernels_body.h"
#undef SFX
#undef H16SFX

// ---------------------------------------------------------------- entry points

int gotree_reduce3(int dt, int op, uintptr_t d, uintptr_t a, uintptr_t b, size_t n) {
	switch (gotree_reduce_level()) {
#if GT_X86
	case 2: return reduce3_v4(dt, op, (void *)d, (const void *)a, (const void *)b, n);
	case 1: return reduce3_v3(dt, op, (void *)d, (const void *)a, (const void *)b, n);
#endif
	default: return reduce3_sw(dt, op, (void *)d, (const void *)a, (const void *)b, n);
	}
}

int gotree_avg(int dt, uintptr_t d, uintptr_t a, size_t n, int64_t nranks) {
	switch (gotree_reduce_level()) {
#if GT_X86
	case 2: return avg_v4(dt, (void *)d, (const void *)a, n, nranks);
	case 1: return avg_v3(dt, (void *)d, (const void *)a, n, nranks);
#endif
	default: return avg_sw(dt, (void *)d, (const void *)a, n, nranks);
	}
}

int gotree_scale(int dt, uintptr_t d, uintptr_t a, size_t n, double factor) {
	switch (gotree_reduce_level()) {
#if GT_X86
	case 2: return scale_v4(dt, (void *)d, (const void *)a, n, factor);
	case 1: return scale_v3(dt, (void *)d, (const void *)a, n, factor);
#endif
	default: return scale_sw(dt, (void *)d, (const void *)a, n, factor);
	}
}

// ---------------------------------------------------------------- streaming copy

// gotree_copy_stream copies n bytes with non-temporal stores where the
// destination is 16-byte aligned (SSE2, part of every x86-64): the
// destination lines are written without being read first, and without
// taking cache space. Head and tail bytes are plain stores. A store fence
// orders the streamed stores before anything the caller does next (such as
// posting a FIFO flag). Elsewhere it is memcpy.
void gotree_copy_stream(uintptr_t d, uintptr_t s, size_t n) {
	unsigned char *dp = (unsigned char *)d;
	const unsigned char *sp = (const unsigned char *)s;
#if GT_X86
	size_t head = (16 - (d & 15)) & 15;
	if (head > n) {
		head = n;
	}
	memcpy(dp, sp, head);
	dp += head, sp += head, n -= head;
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		__m128i x0 = _mm_loadu_si128((const __m128i *)(sp + i));
		__m128i x1 = _mm_loadu_si128((const __m128i *)(sp + i + 16));
		__m128i x2 = _mm_loadu_si128((const __m128i *)(sp + i + 32));
		__m128i x3 = _mm_loadu_si128((const __m128i *)(sp + i + 48));
		_mm_stream_si128((__m128i *)(dp + i), x0);
		_mm_stream_si128((__m128i *)(dp + i + 16), x1);
		_mm_stream_si128((__m128i *)(dp + i + 32), x2);
		_mm_stream_si128((__m128i *)(dp + i + 48), x3);
	}
	for (; i + 16 <= n; i += 16) {
		_mm_stream_si128((__m128i *)(dp + i), _mm_loadu_si128((const __m128i *)(sp + i)));
	}
	memcpy(dp + i, sp + i, n - i);
	_mm_sfence();
#else
	memcpy(dp, sp, n);
#endif
}
