// The kernels and their dispatch by (dtype, op), compiled once per target:
// kernels.c includes this file three times, under
// #pragma GCC target("arch=x86-64-v4"), ("arch=x86-64-v3") and for baseline
// x86-64, with SFX(name) naming that copy (name_v4, name_v3, name_sw) and
// H16SFX the matching hand-written fp16 kernels. No include guard.

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
BIN(min_u16, uint16_t, x < y ? x : y)
BIN(max_u16, uint16_t, x > y ? x : y)
BIN(min_u32, uint32_t, x < y ? x : y)
BIN(max_u32, uint32_t, x > y ? x : y)
BIN(min_u64, uint64_t, x < y ? x : y)
BIN(max_u64, uint64_t, x > y ? x : y)
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

FMINMAX(min_f32, uint32_t, int32_t, 32, 0x7f800000u, <)
FMINMAX(max_f32, uint32_t, int32_t, 32, 0x7f800000u, >)
FMINMAX(min_f64, uint64_t, int64_t, 64, 0x7ff0000000000000ull, <)
FMINMAX(max_f64, uint64_t, int64_t, 64, 0x7ff0000000000000ull, >)
FMINMAX(min_f16, uint16_t, int16_t, 16, 0x7c00u, <)
FMINMAX(max_f16, uint16_t, int16_t, 16, 0x7c00u, >)
FMINMAX(min_bf16, uint16_t, int16_t, 16, 0x7f80u, <)
FMINMAX(max_bf16, uint16_t, int16_t, 16, 0x7f80u, >)

BF2(sum_bf16, bf_round_hi_exact, x + y)
BF2(prod_bf16, bf_round_hi_exact, x * y)
// A scalar c (1/nranks, a PremulSum factor) need not be a bfloat16: the
// NaN case stays.
BF2(div_bf16, bf_round_hi, x / c)
BF2(mul_bf16, bf_round_hi, x * c)

// float8 Avg and PremulSum: through float32, one rounding. (Sum, Prod,
// Min and Max are tables: f8_lookup.)
F8(div_f8e4m3, f8e4m3_to_f32, f32_to_f8e4m3, x / c)
F8(mul_f8e4m3, f8e4m3_to_f32, f32_to_f8e4m3, x * c)
F8(div_f8e5m2, f8e5m2_to_f32, f32_to_f8e5m2, x / c)
F8(mul_f8e5m2, f8e5m2_to_f32, f32_to_f8e5m2, x * c)

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
// Unsigned: the same argument, for x < 2^32.
UN(div_u16, uint16_t, double, (uint16_t)(uint32_t)((double)x / c))
UN(div_u32, uint32_t, double, (uint32_t)((double)x / c))
UN(div_u64, uint64_t, uint64_t, x / c)


// ---------------------------------------------------------------- dispatch

static int SFX(reduce3)(int dt, int op, void *d, const void *a, const void *b, size_t n) {
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
	case GT_F8E4M3: case GT_F8E5M2: {
		static const int f8op[] = {[GT_SUM] = F8_SUM, [GT_PROD] = F8_PROD, [GT_MIN] = F8_MIN, [GT_MAX] = F8_MAX};
		if (op != GT_SUM && op != GT_PROD && op != GT_MIN && op != GT_MAX) return -1;
		f8_lookup(dt, f8op[op], d, a, b, n);
		return 0;
	}
	case GT_I8: case GT_U8: case GT_I16: case GT_I32: case GT_I64: case GT_U16: case GT_U32: case GT_U64:
		if (op == GT_BAND || op == GT_BOR || op == GT_BXOR) {
			static const size_t sz[] = {[GT_I8] = 1, [GT_U8] = 1, [GT_I16] = 2, [GT_I32] = 4, [GT_I64] = 8,
				[GT_U16] = 2, [GT_U32] = 4, [GT_U64] = 8};
			n *= sz[dt];
			switch (op) {
			case GT_BAND: SFX(and_u8)(d, a, b, n); return 0;
			case GT_BOR: SFX(or_u8)(d, a, b, n); return 0;
			default: SFX(xor_u8)(d, a, b, n); return 0;
			}
		}
		break;
	}
#define K(DT, OP, fn) case (DT) * 16 + (OP): SFX(fn)(d, a, b, n); return 0;
	switch (dt * 16 + op) {
	K(GT_F32, GT_SUM, sum_f32) K(GT_F32, GT_PROD, prod_f32) K(GT_F32, GT_MIN, min_f32) K(GT_F32, GT_MAX, max_f32)
	K(GT_F64, GT_SUM, sum_f64) K(GT_F64, GT_PROD, prod_f64) K(GT_F64, GT_MIN, min_f64) K(GT_F64, GT_MAX, max_f64)
	K(GT_BF16, GT_MIN, min_bf16) K(GT_BF16, GT_MAX, max_bf16)
	case GT_BF16 * 16 + GT_SUM: SFX(sum_bf16)(d, a, b, n, 0); return 0;
	case GT_BF16 * 16 + GT_PROD: SFX(prod_bf16)(d, a, b, n, 0); return 0;
	K(GT_F16, GT_MIN, min_f16) K(GT_F16, GT_MAX, max_f16)
	case GT_F16 * 16 + GT_SUM: H16SFX(sum_f16)(d, a, b, n, 0); return 0;
	case GT_F16 * 16 + GT_PROD: H16SFX(prod_f16)(d, a, b, n, 0); return 0;
	K(GT_I8, GT_SUM, sum_u8) K(GT_I8, GT_PROD, prod_u8) K(GT_I8, GT_MIN, min_i8) K(GT_I8, GT_MAX, max_i8)
	K(GT_U8, GT_SUM, sum_u8) K(GT_U8, GT_PROD, prod_u8) K(GT_U8, GT_MIN, min_u8) K(GT_U8, GT_MAX, max_u8)
	K(GT_I16, GT_SUM, sum_u16) K(GT_I16, GT_PROD, prod_u16) K(GT_I16, GT_MIN, min_i16) K(GT_I16, GT_MAX, max_i16)
	K(GT_I32, GT_SUM, sum_u32) K(GT_I32, GT_PROD, prod_u32) K(GT_I32, GT_MIN, min_i32) K(GT_I32, GT_MAX, max_i32)
	K(GT_I64, GT_SUM, sum_u64) K(GT_I64, GT_PROD, prod_u64) K(GT_I64, GT_MIN, min_i64) K(GT_I64, GT_MAX, max_i64)
	K(GT_U16, GT_SUM, sum_u16) K(GT_U16, GT_PROD, prod_u16) K(GT_U16, GT_MIN, min_u16) K(GT_U16, GT_MAX, max_u16)
	K(GT_U32, GT_SUM, sum_u32) K(GT_U32, GT_PROD, prod_u32) K(GT_U32, GT_MIN, min_u32) K(GT_U32, GT_MAX, max_u32)
	K(GT_U64, GT_SUM, sum_u64) K(GT_U64, GT_PROD, prod_u64) K(GT_U64, GT_MIN, min_u64) K(GT_U64, GT_MAX, max_u64)
	K(GT_BOOL, GT_SUM, or_bool) K(GT_BOOL, GT_MAX, or_bool) K(GT_BOOL, GT_BOR, or_bool)
	K(GT_BOOL, GT_PROD, and_bool) K(GT_BOOL, GT_MIN, and_bool) K(GT_BOOL, GT_BAND, and_bool)
	K(GT_BOOL, GT_BXOR, xor_bool)
	}
#undef K
	return -1;
}

static int SFX(scale)(int dt, void *d, const void *a, size_t n, double factor);

static int SFX(avg)(int dt, void *d, const void *a, size_t n, int64_t nranks) {
	int integer = dt == GT_I8 || dt == GT_U8 || dt == GT_I16 || dt == GT_I32 || dt == GT_I64 ||
		dt == GT_U16 || dt == GT_U32 || dt == GT_U64;
	if ((nranks & (nranks - 1)) == 0 && !integer) {
		// x / 2^k and x * 2^-k are the same real number, so they round to
		// the same float (subnormal results included), and a multiply is
		// several times cheaper than a divide.
		return SFX(scale)(dt, d, a, n, 1.0 / (double)nranks);
	}
	switch (dt) {
	case GT_C64: n *= 2; /* fallthrough */
	case GT_F32: SFX(div_f32)(d, a, n, (float)nranks); return 0;
	case GT_C128: n *= 2; /* fallthrough */
	case GT_F64: SFX(div_f64)(d, a, n, (double)nranks); return 0;
	case GT_F16: H16SFX(div_f16)(d, a, a, n, (float)nranks); return 0;
	case GT_BF16: SFX(div_bf16)(d, a, a, n, (float)nranks); return 0;
	case GT_I8: SFX(div_i8)(d, a, n, (double)nranks); return 0;
	case GT_U8: SFX(div_u8)(d, a, n, (double)nranks); return 0;
	case GT_I16: SFX(div_i16)(d, a, n, (double)nranks); return 0;
	case GT_I32: SFX(div_i32)(d, a, n, (double)nranks); return 0;
	case GT_I64: SFX(div_i64)(d, a, n, nranks); return 0;
	case GT_U16: SFX(div_u16)(d, a, n, (double)nranks); return 0;
	case GT_U32: SFX(div_u32)(d, a, n, (double)nranks); return 0;
	case GT_U64: SFX(div_u64)(d, a, n, (uint64_t)nranks); return 0;
	case GT_F8E4M3: SFX(div_f8e4m3)(d, a, n, (float)nranks); return 0;
	case GT_F8E5M2: SFX(div_f8e5m2)(d, a, n, (float)nranks); return 0;
	}
	return -1;
}

static int SFX(scale)(int dt, void *d, const void *a, size_t n, double factor) {
	switch (dt) {
	case GT_C64: n *= 2; /* fallthrough */
	case GT_F32: SFX(mul_f32)(d, a, n, (float)factor); return 0;
	case GT_C128: n *= 2; /* fallthrough */
	case GT_F64: SFX(mul_f64)(d, a, n, factor); return 0;
	case GT_F16: H16SFX(mul_f16)(d, a, a, n, (float)factor); return 0;
	case GT_BF16: SFX(mul_bf16)(d, a, a, n, (float)factor); return 0;
	case GT_F8E4M3: SFX(mul_f8e4m3)(d, a, n, (float)factor); return 0;
	case GT_F8E5M2: SFX(mul_f8e5m2)(d, a, n, (float)factor); return 0;
	}
	return -1;
}
