// Host build of cuda/kernels/fp8.cuh for fp8_test.go: the device code with
// stand-ins for the CUDA qualifiers and bit-cast intrinsics.
//
//   fp8host FACTOR...   FACTOR: a float64's bits in hex (NaN signs survive);
//                       reads little-endian float32 bit patterns on stdin
//                       and writes, for e4m3fn then e5m2:
//     256 x u32   gtF8Widen of every code
//     4 x 65536   Red8<F8Op> Sum, Prod, Min, Max of every pair (a << 8 | b)
//     9 x 256     gtF8Scale division by 1..9 (Finalize of Avg)
//     K x 256     gtF8Scale product with each FACTOR (ScaleInto)
//     N           gtF8Round of each float read
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define __device__
#define __forceinline__ inline
static inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
struct alignas(16) V4 {  // as reduce.cuh's
  unsigned x, y, z, w;
};
#include "../kernels/fp8.cuh"

// pairs appends Op of every pair of codes (a << 8 | b), sixteen pairs at a
// time through Red8, as the kernels apply it to 16-byte units.
template <class Op>
static void pairs(std::vector<unsigned char>& out) {
  for (int k = 0; k < 65536; k += 16) {
    unsigned char a[16], b[16], r[16];
    for (int j = 0; j < 16; j++) a[j] = (unsigned char)((k + j) >> 8), b[j] = (unsigned char)(k + j);
    V4 va, vb;
    std::memcpy(&va, a, 16);
    std::memcpy(&vb, b, 16);
    V4 vr = Red8<Op>::apply(va, vb);
    std::memcpy(r, &vr, 16);
    out.insert(out.end(), r, r + 16);
  }
}

template <class F>
static void emit(const std::vector<float>& factors, const std::vector<float>& in, std::vector<unsigned char>& out) {
  for (int c = 0; c < 256; c++) {
    unsigned u = __float_as_uint(gtF8Widen<F>((unsigned char)c));
    for (int k = 0; k < 4; k++) out.push_back((unsigned char)(u >> (8 * k)));
  }
  pairs<F8Op<F, 0>>(out);
  pairs<F8Op<F, 1>>(out);
  pairs<F8Op<F, 2>>(out);
  pairs<F8Op<F, 3>>(out);
  for (int n = 1; n <= 9; n++)
    for (int c = 0; c < 256; c++) out.push_back(gtF8Scale<F, true>((unsigned char)c, (float)n));
  for (float f : factors)
    for (int c = 0; c < 256; c++) out.push_back(gtF8Scale<F, false>((unsigned char)c, f));
  for (float f : in) out.push_back(gtF8Round<F>(f));
}

int main(int argc, char** argv) {
  std::vector<float> factors;
  for (int i = 1; i < argc; i++) {
    unsigned long long u = std::strtoull(argv[i], nullptr, 16);
    double d;
    std::memcpy(&d, &u, 8);
    factors.push_back((float)d);
  }
  std::vector<float> in;
  unsigned char b[4];
  while (std::fread(b, 1, 4, stdin) == 4) {
    unsigned u = (unsigned)b[0] | (unsigned)b[1] << 8 | (unsigned)b[2] << 16 | (unsigned)b[3] << 24;
    in.push_back(__uint_as_float(u));
  }
  std::vector<unsigned char> out;
  emit<F8E4M3>(factors, in, out);
  emit<F8E5M2>(factors, in, out);
  return std::fwrite(out.data(), 1, out.size(), stdout) == out.size() ? 0 : 1;
}
