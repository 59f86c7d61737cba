// gotree collective kernels: the plan primitives of algorithms/plan.go as
// device code. One launch runs one rank's plan (GtArgs); block c runs
// channel c. A channel's streams run on separate thread groups of the block
// (tree-split: stream 0 reduces up, stream 1 broadcasts down). Each thread
// group walks its step list; a step moves `bytes` bytes in slices of one
// FIFO slot:
//
//   wait   the thread whose index equals a connection's index in the
//          channel table waits for that connection: a receive (Simple)
//          until tail > step, a send (both protocols) until
//          head + GT_NSLOTS > step. Barrier.
//   data   every thread moves 16-byte units: acc = src (or the first
//          receive), reduced with each received unit in RecvFrom order
//          (as RunOracle), written to dst and to each send slot.
//   post   barrier; the connection threads publish: a send posts
//          tail = step+1 (Simple: after a system fence), a receive frees
//          the slot with head = step+1.
//
// Simple: slots of simpleSlotBytes data in the receiver's memory; readers
// use ld.volatile (no stale L1 lines). LL: slots of llSlotLines 16-byte
// lines {data1, flag1, data2, flag2} written with one 16-byte store; the
// flag is (u32)(step+1); a reader spins until both flags of both lines of
// its unit match. The step counters are the tail/head words themselves, so
// they persist across launches: no reset is needed between collectives.
//
// A wait gives up after GtArgs.timeoutNs (or when *abortFlag != 0): it
// records GT_ERR_* in *err and from then on every wait of the thread group
// succeeds at once, so the kernel always terminates (with garbage results;
// the host reports the error and discards the connections).
//
// Never copied from NCCL: written from the protocol descriptions in
// shared/design/nccl-facts.md.

#include "abi.cuh"
#include "reduce.cuh"
#include "fp8.cuh"

#define GT_UNROLL 4

// ---- memory access helpers ----------------------------------------------

__device__ __forceinline__ u64 gtLdVol64(const void* p) {
  u64 v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void gtStVol64(void* p, u64 v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u32 gtLdVol32(const void* p) {
  u32 v;
  asm volatile("ld.volatile.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ V4 gtLdVol128(const void* p) {
  V4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ void gtStVol128(void* p, V4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void gtSt128(void* p, V4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ u64 gtGlobalTimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void gtBarrier(int id, int n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}

// A unit of user memory: 16 bytes, or `valid` < 16 bytes at the end of a
// step (whole elements). Aligned full units are one vector access; others
// go byte by byte (buffers whose address is not 16-byte aligned).
__device__ __forceinline__ V4 gtLoadUser(const u8* p, u32 valid, bool aligned) {
  if (aligned && valid == 16) return *(const V4*)p;
  union {
    V4 v;
    u8 b[16];
  } t;
  t.v.x = t.v.y = t.v.z = t.v.w = 0;
#pragma unroll
  for (int k = 0; k < 16; k++)
    if ((u32)k < valid) t.b[k] = p[k];
  return t.v;
}
__device__ __forceinline__ void gtStoreUser(u8* p, V4 v, u32 valid, bool aligned) {
  if (aligned && valid == 16) {
    *(V4*)p = v;
    return;
  }
  union {
    V4 v;
    u8 b[16];
  } t;
  t.v = v;
#pragma unroll
  for (int k = 0; k < 16; k++)
    if ((u32)k < valid) p[k] = t.b[k];
}

__device__ __forceinline__ u32 gtMinU(u32 a, u32 b) { return a < b ? a : b; }

// ---- waiting ---------------------------------------------------------------

struct GtSpin {
  u64 start;
  u32 n;
};

__device__ __forceinline__ void gtSetErr(const GtArgs& a, u32 code) {
  if (a.err) atomicCAS((unsigned int*)a.err, 0u, code);
}

// gtGiveUp is called in every iteration of a wait loop: true when the
// group has aborted (then the wait ends at once).
__device__ __forceinline__ bool gtGiveUpSlow(const GtArgs& a, GtSpin& s, volatile int* abort) {
  if (a.abortFlag && gtLdVol32((const void*)a.abortFlag) != 0) {
    gtSetErr(a, GT_ERR_ABORT);
    *abort = 1;
    return true;
  }
  if (a.timeoutNs) {
    u64 now = gtGlobalTimer();
    if (s.start == 0) {
      s.start = now;
    } else if (now - s.start > a.timeoutNs) {
      gtSetErr(a, GT_ERR_TIMEOUT);
      *abort = 1;
      return true;
    }
  }
  return false;
}
__device__ __forceinline__ bool gtGiveUp(const GtArgs& a, GtSpin& s, volatile int* abort) {
  if (*abort) return true;
  if ((++s.n & 1023u) != 0) return false;
  return gtGiveUpSlow(a, s, abort);
}

// ---- one slice ------------------------------------------------------------

struct GtSlice {
  const u8* src;           // local operand or null
  u8* dst;                 // local result or null
  const u8* rp[GT_MAX_PEERS];  // receive slots
  u8* wp[GT_MAX_PEERS];        // send slots
  u32 rflag[GT_MAX_PEERS];     // LL: expected flag per receive
  u32 wflag[GT_MAX_PEERS];     // LL: flag to write per send
  int nr, nw;
  u32 bytes;
};

template <class R>
__device__ __forceinline__ void gtSimpleSlice(const GtSlice& s, int tid, int nthr) {
  const u32 units = (s.bytes + 15u) >> 4;
  const bool srcAl = ((unsigned long long)s.src & 15u) == 0;
  const bool dstAl = ((unsigned long long)s.dst & 15u) == 0;
  for (u32 base = tid; base < units; base += (u32)nthr * GT_UNROLL) {
    V4 acc[GT_UNROLL];
#pragma unroll
    for (int j = 0; j < GT_UNROLL; j++) {
      const u32 u = base + (u32)j * nthr;
      if (u < units) {
        const u32 valid = gtMinU(16u, s.bytes - 16u * u);
        acc[j] = s.src ? gtLoadUser(s.src + 16ull * u, valid, srcAl) : gtLdVol128(s.rp[0] + 16ull * u);
      }
    }
#pragma unroll
    for (int i = 0; i < GT_MAX_PEERS; i++) {
      if (i < s.nr && (s.src || i > 0)) {
        V4 v[GT_UNROLL];
#pragma unroll
        for (int j = 0; j < GT_UNROLL; j++) {
          const u32 u = base + (u32)j * nthr;
          if (u < units) v[j] = gtLdVol128(s.rp[i] + 16ull * u);
        }
#pragma unroll
        for (int j = 0; j < GT_UNROLL; j++) {
          const u32 u = base + (u32)j * nthr;
          if (u < units) acc[j] = R::apply(acc[j], v[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < GT_UNROLL; j++) {
      const u32 u = base + (u32)j * nthr;
      if (u < units) {
        if (s.dst) gtStoreUser(s.dst + 16ull * u, acc[j], gtMinU(16u, s.bytes - 16u * u), dstAl);
#pragma unroll
        for (int i = 0; i < GT_MAX_PEERS; i++)
          if (i < s.nw) gtSt128(s.wp[i] + 16ull * u, acc[j]);
      }
    }
  }
}

// LL: unit u of a slot is lines 2u and 2u+1 (bytes 32u .. 32u+31).
template <class R>
__device__ __forceinline__ void gtLLSlice(const GtArgs& a, const GtSlice& s, int tid, int nthr,
                                          volatile int* abort) {
  const u32 units = (s.bytes + 15u) >> 4;
  const bool srcAl = ((unsigned long long)s.src & 15u) == 0;
  const bool dstAl = ((unsigned long long)s.dst & 15u) == 0;
  for (u32 u = tid; u < units; u += nthr) {
    const u32 valid = gtMinU(16u, s.bytes - 16u * u);
    V4 acc = {0, 0, 0, 0};
    if (s.src) acc = gtLoadUser(s.src + 16ull * u, valid, srcAl);
#pragma unroll
    for (int i = 0; i < GT_MAX_PEERS; i++) {
      if (i < s.nr) {
        const u8* p = s.rp[i] + 32ull * u;
        const u32 f = s.rflag[i];
        V4 l0, l1;
        GtSpin spin = {0, 0};
        do {
          l0 = gtLdVol128(p);
          l1 = gtLdVol128(p + 16);
        } while ((l0.y != f || l0.w != f || l1.y != f || l1.w != f) && !gtGiveUp(a, spin, abort));
        V4 v;
        v.x = l0.x;
        v.y = l0.z;
        v.z = l1.x;
        v.w = l1.z;
        acc = (s.src || i > 0) ? R::apply(acc, v) : v;
      }
    }
    if (s.dst) gtStoreUser(s.dst + 16ull * u, acc, valid, dstAl);
#pragma unroll
    for (int i = 0; i < GT_MAX_PEERS; i++) {
      if (i < s.nw) {
        u8* p = s.wp[i] + 32ull * u;
        const u32 f = s.wflag[i];
        V4 l0, l1;
        l0.x = acc.x;
        l0.y = f;
        l0.z = acc.y;
        l0.w = f;
        l1.x = acc.z;
        l1.y = f;
        l1.z = acc.w;
        l1.w = f;
        gtStVol128(p, l0);
        gtStVol128(p + 16, l1);
      }
    }
  }
}

// ---- one stream on one thread group ---------------------------------------

__device__ __forceinline__ int gtConnRole(const GtStep& st, int c) {
  // 1: this step receives on connection c, 2: sends on it, 0: neither.
  int r = 0;
#pragma unroll
  for (int i = 0; i < GT_MAX_PEERS; i++) {
    if (i < st.nrecv && st.recv[i] == c) r = 1;
    if (i < st.nsend && st.send[i] == c) r = 2;
  }
  return r;
}

template <class R>
__device__ __forceinline__ void gtRunStream(const GtArgs& a, const GtStep* steps, u32 nsteps, const GtConn* conns,
                                            u32 nconns, int tid, int nthr, int bar, u64* sStep, volatile int* abort) {
  u8* const in = (u8*)a.in;
  u8* const out = (u8*)a.out;
  const bool ll = a.proto == GT_PROTO_LL;
  const u32 sliceBytes = ll ? a.llSlotLines * 8u : a.simpleSlotBytes;
  const u64 slotStride = ll ? (u64)a.llSlotLines * GT_LL_LINE : (u64)a.simpleSlotBytes;

  for (u32 k = 0; k < nsteps; k++) {
    const GtStep st = steps[k];
    GtSlice s;
    s.src = st.srcBuf == GT_IN ? in + st.srcOff : st.srcBuf == GT_OUT ? out + st.srcOff : nullptr;
    s.dst = st.dstBuf == GT_IN ? in + st.dstOff : st.dstBuf == GT_OUT ? out + st.dstOff : nullptr;
    s.nr = st.nrecv;
    s.nw = st.nsend;
    if (st.prim == GT_COPY && s.src == s.dst) continue;  // in place: nothing to do
    const bool fifo = s.nr + s.nw > 0;
    i64 done = 0;
    do {
      const i64 left = st.bytes - done;
      s.bytes = left < (i64)sliceBytes ? (u32)left : sliceBytes;

      // wait
      if (fifo && tid < (int)nconns) {
        const int role = gtConnRole(st, tid);
        if (role != 0) {
          const GtConn& c = conns[tid];
          const u64 step = sStep[tid];
          GtSpin spin = {0, 0};
          if (role == 2) {
            while (gtLdVol64((const void*)c.head) + GT_NSLOTS <= step && !gtGiveUp(a, spin, abort)) {
            }
          } else if (!ll) {
            while (gtLdVol64((const void*)c.tail) <= step && !gtGiveUp(a, spin, abort)) {
            }
          }
          __threadfence();
        }
      }
      if (fifo) gtBarrier(bar, nthr);

      // data
#pragma unroll
      for (int i = 0; i < GT_MAX_PEERS; i++) {
        if (i < s.nr) {
          const int c = st.recv[i];
          const u64 step = sStep[c];
          s.rp[i] = (const u8*)((ll ? conns[c].ll : conns[c].simple) + (step % GT_NSLOTS) * slotStride);
          s.rflag[i] = (u32)(step + 1);
        }
        if (i < s.nw) {
          const int c = st.send[i];
          const u64 step = sStep[c];
          s.wp[i] = (u8*)((ll ? conns[c].ll : conns[c].simple) + (step % GT_NSLOTS) * slotStride);
          s.wflag[i] = (u32)(step + 1);
        }
      }
      if (ll) {
        gtLLSlice<R>(a, s, tid, nthr, abort);
      } else {
        gtSimpleSlice<R>(s, tid, nthr);
        if (s.nw > 0) __threadfence();
      }
      if (s.src) s.src += s.bytes;
      if (s.dst) s.dst += s.bytes;
      done += s.bytes;

      // post
      gtBarrier(bar, nthr);
      if (fifo && tid < (int)nconns) {
        const int role = gtConnRole(st, tid);
        if (role != 0) {
          const GtConn& c = conns[tid];
          const u64 next = sStep[tid] + 1;
          if (role == 2) {
            if (!ll) __threadfence_system();
            gtStVol64((void*)c.tail, next);
          } else {
            gtStVol64((void*)c.head, next);
          }
          sStep[tid] = next;
        }
      }
    } while (done < st.bytes);
  }
}

template <class R>
__device__ __forceinline__ void gtRun(const GtArgs& a) {
  __shared__ u64 sStep[GT_MAX_CONNS];
  __shared__ int sAbort[2];
  const GtChannel ch = ((const GtChannel*)a.channels)[blockIdx.x];
  const GtConn* conns = (const GtConn*)a.conns + ch.firstConn;
  if (threadIdx.x < ch.nconns) {
    const GtConn& c = conns[threadIdx.x];
    sStep[threadIdx.x] = gtLdVol64((const void*)(c.role == GT_ROLE_SEND ? c.tail : c.head));
  }
  if (threadIdx.x < 2) sAbort[threadIdx.x] = 0;
  __syncthreads();
  if (ch.nstreams == 0) return;
  int g = 0, tid = threadIdx.x, nthr = blockDim.x;
  if (ch.nstreams == 2) {
    if (tid >= (int)a.group0Threads) {
      g = 1;
      tid -= a.group0Threads;
      nthr = blockDim.x - a.group0Threads;
    } else {
      nthr = a.group0Threads;
    }
  }
  const GtStep* steps = (const GtStep*)a.steps + ch.firstStep[g];
  gtRunStream<R>(a, steps, ch.nsteps[g], conns, ch.nconns, tid, nthr, 1 + g, sStep, &sAbort[g]);
}

#define GT_RUN(name, ...) \
  extern "C" __global__ void __launch_bounds__(512) gotree_run_##name(GtArgs a) { gtRun<__VA_ARGS__>(a); }

// Each GT_RUN_<kind>(ty, X) below defines the kernels of one dtype, one per
// op of its kind (cuda/kernels.go KernelNames lists the same): X is the
// element type (F, ORD, INT), the 16-bit op wrapper (H) or the float8
// format (F8).
#define GT_RUN_F(ty, T)                \
  GT_RUN(ty##_sum, Red<T, OpSum>)      \
  GT_RUN(ty##_prod, Red<T, OpProd>)    \
  GT_RUN(ty##_min, Red<T, OpMin>)      \
  GT_RUN(ty##_max, Red<T, OpMax>)
#define GT_RUN_H(ty, W)                \
  GT_RUN(ty##_sum, Red16<W<OpSum>>)    \
  GT_RUN(ty##_prod, Red16<W<OpProd>>)  \
  GT_RUN(ty##_min, Red16<W<OpMin>>)    \
  GT_RUN(ty##_max, Red16<W<OpMax>>)
#define GT_RUN_F8(ty, F)               \
  GT_RUN(ty##_sum, Red8<F8Op<F, 0>>)   \
  GT_RUN(ty##_prod, Red8<F8Op<F, 1>>)  \
  GT_RUN(ty##_min, Red8<F8Op<F, 2>>)   \
  GT_RUN(ty##_max, Red8<F8Op<F, 3>>)
#define GT_RUN_ORD(ty, T)              \
  GT_RUN(ty##_min, Red<T, IOpMin>)     \
  GT_RUN(ty##_max, Red<T, IOpMax>)
// Integers: the bit patterns of sum, prod and the bitwise ops do not depend
// on signedness, so unsigned types share the signed kernels except for
// min/max (GT_RUN_ORD).
#define GT_RUN_INT(ty, T)                  \
  GT_RUN(ty##_sum, Red<T, IOpSum>)       \
  GT_RUN(ty##_prod, Red<T, IOpProd>)     \
  GT_RUN_ORD(ty, T)                      \
  GT_RUN(ty##_band, Red<T, IOpAnd>)      \
  GT_RUN(ty##_bor, Red<T, IOpOr>)        \
  GT_RUN(ty##_bxor, Red<T, IOpXor>)

// Floats (complex64 and complex128 use f32_sum and f64_sum).
GT_RUN_F(f32, float)
GT_RUN_F(f64, double)
GT_RUN_H(f16, HOp)
GT_RUN_H(bf16, BOp16)
GT_RUN_INT(i8, i8)
GT_RUN_INT(i16, i16)
GT_RUN_INT(i32, i32)
GT_RUN_INT(i64, i64)
GT_RUN_ORD(u8, u8)
GT_RUN_ORD(u16, u16)
GT_RUN_ORD(u32, u32)
GT_RUN_ORD(u64, u64)
GT_RUN_F8(f8e4m3, F8E4M3)
GT_RUN_F8(f8e5m2, F8E5M2)
GT_RUN(bool_or, Red<u8, BOpOr>)
GT_RUN(bool_and, Red<u8, BOpAnd>)
GT_RUN(bool_xor, Red<u8, BOpXor>)

// ---- Avg and PremulSum: Finalize and ScaleInto of reduce_ref.go -------------

template <typename T, typename W>
__device__ __forceinline__ void gtDivInt(u64 ptr, u64 n, u32 nranks) {
  T* p = (T*)ptr;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    p[i] = (T)((W)p[i] / (W)nranks);
}

extern "C" __global__ void gotree_finalize_f32(u64 ptr, u64 bytes, u32 nranks) {
  float* p = (float*)ptr;
  const float d = (float)nranks;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < bytes / 4; i += (u64)gridDim.x * blockDim.x)
    p[i] = p[i] / d;
}
extern "C" __global__ void gotree_finalize_f64(u64 ptr, u64 bytes, u32 nranks) {
  double* p = (double*)ptr;
  const double d = (double)nranks;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < bytes / 8; i += (u64)gridDim.x * blockDim.x)
    p[i] = p[i] / d;
}
extern "C" __global__ void gotree_finalize_f16(u64 ptr, u64 bytes, u32 nranks) {
  u16* p = (u16*)ptr;
  const float d = (float)nranks;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < bytes / 2; i += (u64)gridDim.x * blockDim.x)
    p[i] = gtF32ToF16(gtF16ToF32(p[i]) / d);
}
extern "C" __global__ void gotree_finalize_bf16(u64 ptr, u64 bytes, u32 nranks) {
  u16* p = (u16*)ptr;
  const float d = (float)nranks;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < bytes / 2; i += (u64)gridDim.x * blockDim.x)
    p[i] = gtF32ToBF16(gtBF16ToF32(p[i]) / d);
}
// Integer Avg: the division of the type's signed or unsigned order.
#define GT_FINALIZE_INT(ty, T, W)                                                 \
  extern "C" __global__ void gotree_finalize_##ty(u64 ptr, u64 bytes, u32 nranks) { \
    gtDivInt<T, W>(ptr, bytes / sizeof(T), nranks);                                \
  }
GT_FINALIZE_INT(i8, i8, i64)
GT_FINALIZE_INT(u8, u8, u64)
GT_FINALIZE_INT(i16, i16, i64)
GT_FINALIZE_INT(u16, u16, u64)
GT_FINALIZE_INT(i32, i32, i64)
GT_FINALIZE_INT(u32, u32, u64)
GT_FINALIZE_INT(i64, i64, i64)
GT_FINALIZE_INT(u64, u64, u64)

// float8 Avg and PremulSum: through float32 (fp8.cuh's gtF8Scale).
template <class F, bool IsDiv>
__device__ __forceinline__ void gtScaleF8(u64 ptr, u64 n, float c) {
  u8* p = (u8*)ptr;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    p[i] = gtF8Scale<F, IsDiv>(p[i], c);
}
extern "C" __global__ void gotree_finalize_f8e4m3(u64 ptr, u64 bytes, u32 nranks) {
  gtScaleF8<F8E4M3, true>(ptr, bytes, (float)nranks);
}
extern "C" __global__ void gotree_finalize_f8e5m2(u64 ptr, u64 bytes, u32 nranks) {
  gtScaleF8<F8E5M2, true>(ptr, bytes, (float)nranks);
}

extern "C" __global__ void gotree_scale_f32(u64 ptr, u64 bytes, double factor) {
  float* p = (float*)ptr;
  const float f = (float)factor;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < bytes / 4; i += (u64)gridDim.x * blockDim.x)
    p[i] = p[i] * f;
}
extern "C" __global__ void gotree_scale_f64(u64 ptr, u64 bytes, double factor) {
  double* p = (double*)ptr;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < bytes / 8; i += (u64)gridDim.x * blockDim.x)
    p[i] = p[i] * factor;
}
extern "C" __global__ void gotree_scale_f16(u64 ptr, u64 bytes, double factor) {
  u16* p = (u16*)ptr;
  const float f = (float)factor;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < bytes / 2; i += (u64)gridDim.x * blockDim.x)
    p[i] = gtF32ToF16(gtF16ToF32(p[i]) * f);
}
extern "C" __global__ void gotree_scale_bf16(u64 ptr, u64 bytes, double factor) {
  u16* p = (u16*)ptr;
  const float f = (float)factor;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < bytes / 2; i += (u64)gridDim.x * blockDim.x)
    p[i] = gtF32ToBF16(gtBF16ToF32(p[i]) * f);
}

extern "C" __global__ void gotree_scale_f8e4m3(u64 ptr, u64 bytes, double factor) {
  gtScaleF8<F8E4M3, false>(ptr, bytes, (float)factor);
}
extern "C" __global__ void gotree_scale_f8e5m2(u64 ptr, u64 bytes, double factor) {
  gtScaleF8<F8E5M2, false>(ptr, bytes, (float)factor);
}

// ---- timing gate -----------------------------------------------------------

// gotree_gate spins until the u32 at flag (host-mapped memory) is non-zero
// or timeoutNs passes. Benchmarks launch it first on every rank's stream,
// enqueue the measured work behind it, then open the gate from the host,
// so the work runs back to back without host launch gaps.
extern "C" __global__ void gotree_gate(u64 flag, u64 timeoutNs) {
  if (threadIdx.x != 0) return;
  const u64 start = gtGlobalTimer();
  while (gtLdVol32((const void*)flag) == 0) {
    if (gtGlobalTimer() - start > timeoutNs) break;
  }
}
