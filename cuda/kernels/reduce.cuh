// gotree element operations: the device twin of algorithms/reduce_ref.go.
// No CUDA headers: the file compiles with nvcc and with NVRTC alone.
//
//   float32, float64: IEEE arithmetic in the type (the build passes
//     -fmad=false; there is no multiply-add here anyway); Min/Max propagate
//     NaN (the left operand's NaN when both are) and order -0 below +0.
//   float16, bfloat16: widened to float32 exactly, op in float32, rounded
//     to nearest-even; NaNs keep sign and top payload bits exactly as the
//     Go reference does (the hardware conversion canonicalises NaNs, so
//     NaNs and infinities take a software path).
//   integers: Sum/Prod wrap (done in unsigned 64-bit arithmetic and
//     truncated), Min/Max in the signed or unsigned order, bitwise ops.
//   bool: logical or / and / xor, results 0 or 1.
//   complex: Sum only, as independent sums of the parts.
#ifndef GOTREE_REDUCE_CUH
#define GOTREE_REDUCE_CUH

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char i8;
typedef short i16;
typedef int i32;
typedef long long i64;

// 16 bytes: the unit every thread moves.
struct alignas(16) V4 {
  u32 x, y, z, w;
};

// ---- float16 / bfloat16 <-> float32 -------------------------------------

__device__ __forceinline__ float gtF16ToF32(u16 h) {
  if ((h & 0x7c00u) == 0x7c00u) {  // Inf or NaN: keep sign and payload
    u32 b = ((u32)(h & 0x8000u) << 16) | 0x7f800000u | ((u32)(h & 0x3ffu) << 13);
    return __uint_as_float(b);
  }
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ u16 gtF32ToF16(float f) {
  u32 b = __float_as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) {  // NaN: quiet, top 9 payload bits
    return (u16)(((b >> 16) & 0x8000u) | 0x7e00u | ((b & 0x7fffffu) >> 13));
  }
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ float gtBF16ToF32(u16 h) { return __uint_as_float((u32)h << 16); }

__device__ __forceinline__ u16 gtF32ToBF16(float f) {
  u32 b = __float_as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x0040u);
  return (u16)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// ---- scalar operators -----------------------------------------------------

__device__ __forceinline__ bool gtSignbit(float a) { return (__float_as_uint(a) >> 31) != 0; }
__device__ __forceinline__ bool gtSignbit(double a) { return (__double_as_longlong(a) >> 63) != 0; }

// IEEE 754-2019 minimum/maximum as refMinMax.
template <typename F, bool IsMax>
__device__ __forceinline__ F gtMinMax(F a, F b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return (gtSignbit(a) == IsMax) ? b : a;
  return ((a > b) == IsMax) ? a : b;
}

struct OpSum {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return a + b; }
};
struct OpProd {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return a * b; }
};
struct OpMin {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return gtMinMax<T, false>(a, b); }
};
struct OpMax {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return gtMinMax<T, true>(a, b); }
};

// Integers: T is the storage type (signed or unsigned).
struct IOpSum {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return (T)((u64)a + (u64)b); }
};
struct IOpProd {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return (T)((u64)a * (u64)b); }
};
struct IOpMin {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return b < a ? b : a; }
};
struct IOpMax {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return a < b ? b : a; }
};
struct IOpAnd {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return (T)(a & b); }
};
struct IOpOr {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return (T)(a | b); }
};
struct IOpXor {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return (T)(a ^ b); }
};
struct BOpOr {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return (T)((a != 0) | (b != 0)); }
};
struct BOpAnd {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return (T)((a != 0) & (b != 0)); }
};
struct BOpXor {
  template <typename T> __device__ __forceinline__ static T f(T a, T b) { return (T)((a != 0) ^ (b != 0)); }
};

// 16-bit floats through float32.
template <class Op>
struct HOp {
  __device__ __forceinline__ static u16 f(u16 a, u16 b) { return gtF32ToF16(Op::f(gtF16ToF32(a), gtF16ToF32(b))); }
};
template <class Op>
struct BOp16 {
  __device__ __forceinline__ static u16 f(u16 a, u16 b) { return gtF32ToBF16(Op::f(gtBF16ToF32(a), gtBF16ToF32(b))); }
};

// ---- 16-byte vector reduction ---------------------------------------------

// Red<T, Op>::apply reduces two 16-byte units element by element.
template <typename T, class Op>
struct Red {
  __device__ __forceinline__ static V4 apply(V4 a, V4 b) {
    union U {
      V4 v;
      T e[16 / sizeof(T)];
    } x, y;
    x.v = a;
    y.v = b;
#pragma unroll
    for (int i = 0; i < (int)(16 / sizeof(T)); i++) x.e[i] = Op::template f<T>(x.e[i], y.e[i]);
    return x.v;
  }
};

template <class Op16>
struct Red16 {
  __device__ __forceinline__ static V4 apply(V4 a, V4 b) {
    union U {
      V4 v;
      u16 e[8];
    } x, y;
    x.v = a;
    y.v = b;
#pragma unroll
    for (int i = 0; i < 8; i++) x.e[i] = Op16::f(x.e[i], y.e[i]);
    return x.v;
  }
};

#endif
