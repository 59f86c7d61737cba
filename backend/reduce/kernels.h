// Reduction kernels of package reduce (gotree/backend/reduce). Internal:
// only reduce.go calls these. Addresses travel as uintptr_t (see addr in
// reduce.go) and may be unaligned; counts are elements, not bytes; d may be
// identical to a or b but must not overlap them partially.
#ifndef GOTREE_REDUCE_KERNELS_H
#define GOTREE_REDUCE_KERNELS_H
#include <stddef.h>
#include <stdint.h>

// dtype and op codes: the values of algorithms.DType and algorithms.Op.
enum {
	GT_F32, GT_F64, GT_F16, GT_BF16, GT_I8, GT_U8, GT_I16, GT_I32, GT_I64,
	GT_BOOL, GT_C64, GT_C128, GT_U16, GT_U32, GT_U64, GT_F8E4M3, GT_F8E5M2
};
enum { GT_SUM, GT_AVG, GT_PROD, GT_MIN, GT_MAX, GT_BAND, GT_BOR, GT_BXOR, GT_PREMUL_SUM };

// d[i] = op(a[i], b[i]) for n elements of dtype dt. Avg and PremulSum are
// Sum. Returns 0, or -1 for a (dt, op) pair without a kernel.
int gotree_reduce3(int dt, int op, uintptr_t d, uintptr_t a, uintptr_t b, size_t n);
// d[i] = a[i] / nranks (the Avg finalisation). Returns 0 or -1.
int gotree_avg(int dt, uintptr_t d, uintptr_t a, size_t n, int64_t nranks);
// d[i] = a[i] * factor (PremulSum's premultiplication). Returns 0 or -1.
int gotree_scale(int dt, uintptr_t d, uintptr_t a, size_t n, double factor);

// Copies n bytes from s to d (not overlapping) with non-temporal stores
// and a store fence (x86-64; memcpy elsewhere).
void gotree_copy_stream(uintptr_t d, uintptr_t s, size_t n);

// The version of the kernels in use: 2 = x86-64-v4 (AVX-512), 1 =
// x86-64-v3 (AVX2, F16C), 0 = portable. gotree_reduce_set_level caps it
// (tests) and returns the level in effect.
int gotree_reduce_level(void);
int gotree_reduce_set_level(int max);
#endif
