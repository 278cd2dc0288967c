#include "core/vector_exp.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

// The four-lane helpers below are always inlined, so no vector crosses a call and GCC's warning
// that returning one without AVX changes the ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace dar {
namespace {

// Four lanes through GCC's vector extensions: one AVX2 register in the AVX2 versions, two SSE2
// registers in the portable ones. The bodies below are inlined into each version, so each is
// compiled for its own instruction set from the same source.
using V4d = double __attribute__((vector_size(32)));
using V4i = int64_t __attribute__((vector_size(32)));

#define DAR_KERNEL inline __attribute__((always_inline))

// The bits of one vector as the other type: a cast between GCC vector types of one size
// reinterprets the bits (std::bit_cast, which takes a reference, trips UBSan's null check on
// these types in the target("avx2") versions).
#define AS_INTS(v) ((V4i)(v))
#define AS_DOUBLES(v) ((V4d)(v))

DAR_KERNEL V4d Load(const double* p) {
  V4d v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

DAR_KERNEL void Store(double* p, const V4d& v) { std::memcpy(p, &v, sizeof(v)); }

// The first r < 4 lanes from p, the others `fill`.
DAR_KERNEL V4d LoadPartial(const double* p, uint32_t r, double fill) {
  double lanes[4] = {fill, fill, fill, fill};
  std::memcpy(lanes, p, r * sizeof(double));
  return Load(lanes);
}

DAR_KERNEL void StorePartial(double* p, uint32_t r, const V4d& v) {
  double lanes[4];
  Store(lanes, v);
  std::memcpy(p, lanes, r * sizeof(double));
}

// exp(y) for y <= 0, and 0 below -708. y = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of
// ln2), exp(r) by its Taylor series to r^12 (truncation error below 2e-16), then 2^n by adding
// n to the exponent. Separate multiplies and adds (no FMA), so every version rounds alike.
DAR_KERNEL V4d Exp4(const V4d& y) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kShift = 0x1.8p52;  // adding it rounds to an integer held in the low bits
  const V4d floor = {-708.0, -708.0, -708.0, -708.0};
  const V4i in_range = y >= floor;  // all ones or all zeros per lane
  const V4d yc = y >= floor ? y : floor;
  const V4d shifted = yc * kLog2e + kShift;
  const V4i n = AS_INTS(shifted) - std::bit_cast<int64_t>(kShift);
  const V4d nd = shifted - kShift;
  const V4d r = (yc - nd * kLn2Hi) - nd * kLn2Lo;
  V4d p = r * (1.0 / 479001600) + 1.0 / 39916800;  // 1/12!, 1/11!
  p = p * r + 1.0 / 3628800;
  p = p * r + 1.0 / 362880;
  p = p * r + 1.0 / 40320;
  p = p * r + 1.0 / 5040;
  p = p * r + 1.0 / 720;
  p = p * r + 1.0 / 120;
  p = p * r + 1.0 / 24;
  p = p * r + 1.0 / 6;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const V4i e = (AS_INTS(p) + (n << 52)) & in_range;
  return AS_DOUBLES(e);
}

DAR_KERNEL double SumLanes(const V4d& v) { return (v[0] + v[1]) + (v[2] + v[3]); }

DAR_KERNEL void ExpNonPositiveBody(const double* y, double* out, uint32_t n) {
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) Store(out + i, Exp4(Load(y + i)));
  if (i < n) StorePartial(out + i, n - i, Exp4(LoadPartial(y + i, n - i, 0.0)));
}

// Floored, normalised shares into w: the end of both weight kernels. e[0..n) holds the shares
// (all but the last n % 4, which are in `tail`, 0 in the lanes past n) and z is their sum.
// e may be w.
DAR_KERNEL void ShareBody(const double* e, double* w, uint32_t n, const V4d& tail,
                          double min_weight, double z) {
  const uint32_t full = n & ~3u, rest = n - full;
  const double inv_z = 1 / z;
  V4d total4 = {0, 0, 0, 0};
  for (uint32_t i = 0; i < full; i += 4) {
    V4d s = Load(e + i) * inv_z;
    s = s < min_weight ? min_weight : s;
    Store(w + i, s);
    total4 += s;
  }
  if (rest > 0) {
    const V4i live = V4i{0, 1, 2, 3} < static_cast<int64_t>(rest);
    V4d s = tail * inv_z;
    s = s < min_weight ? min_weight : s;
    s = live ? s : 0.0;
    StorePartial(w + full, rest, s);
    total4 += s;
  }
  const double inv_total = 1 / SumLanes(total4);
  for (uint32_t i = 0; i < full; i += 4) Store(w + i, Load(w + i) * inv_total);
  for (uint32_t i = full; i < n; ++i) w[i] *= inv_total;
}

DAR_KERNEL double SoftMinWeightsBody(const double* x, double* w, uint32_t n, double m, double inv_t,
                                     double min_weight) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const uint32_t full = n & ~3u, rest = n - full;
  // Shares: e = exp((m - x) / T). The lanes past n get x = inf, so e = 0 there.
  V4d z4 = {0, 0, 0, 0};
  for (uint32_t i = 0; i < full; i += 4) {
    const V4d e = Exp4((m - Load(x + i)) * inv_t);
    Store(w + i, e);
    z4 += e;
  }
  V4d tail = {0, 0, 0, 0};
  if (rest > 0) {
    tail = Exp4((m - LoadPartial(x + full, rest, kInf)) * inv_t);
    z4 += tail;
  }
  const double z = SumLanes(z4);
  ShareBody(w, w, n, tail, min_weight, z);
  return z;
}

DAR_KERNEL double ShareWeightsBody(const double* e, double* w, uint32_t n, double min_weight) {
  const uint32_t full = n & ~3u, rest = n - full;
  V4d z4 = {0, 0, 0, 0};
  for (uint32_t i = 0; i < full; i += 4) {
    z4 += Load(e + i);
  }
  V4d tail = {0, 0, 0, 0};
  if (rest > 0) {
    tail = LoadPartial(e + full, rest, 0.0);
    z4 += tail;
  }
  const double z = SumLanes(z4);
  if (!(z >= kShareZMin && z <= kShareZMax)) return z;  // the caller falls back: leave w alone
  ShareBody(e, w, n, tail, min_weight, z);
  return z;
}

DAR_KERNEL double AbsDiffSumBody(const float* a, const double* b, uint32_t n) {
  using V4f = float __attribute__((vector_size(16)));
  const V4i sign = {INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN};
  V4d sum = {0, 0, 0, 0};
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    V4f af;
    std::memcpy(&af, a + i, sizeof(af));
    const V4d d = __builtin_convertvector(af, V4d) - Load(b + i);
    sum += AS_DOUBLES(AS_INTS(d) & ~sign);
  }
  double rest = 0;
  for (; i < n; ++i) rest += std::abs(a[i] - b[i]);
  return SumLanes(sum) + rest;
}

#undef DAR_KERNEL

}  // namespace

namespace vector_exp_internal {

void ExpNonPositivePortable(const double* y, double* out, uint32_t n) {
  ExpNonPositiveBody(y, out, n);
}

double SoftMinWeightsPortable(const double* x, double* w, uint32_t n, double m, double inv_t,
                              double min_weight) {
  return SoftMinWeightsBody(x, w, n, m, inv_t, min_weight);
}

double ShareWeightsPortable(const double* e, double* w, uint32_t n, double min_weight) {
  return ShareWeightsBody(e, w, n, min_weight);
}

double AbsDiffSumPortable(const float* a, const double* b, uint32_t n) {
  return AbsDiffSumBody(a, b, n);
}

#if defined(__x86_64__)
bool HasAvx2() { return __builtin_cpu_supports("avx2"); }

__attribute__((target("avx2"))) void ExpNonPositiveAvx2(const double* y, double* out, uint32_t n) {
  ExpNonPositiveBody(y, out, n);
}

__attribute__((target("avx2"))) double SoftMinWeightsAvx2(const double* x, double* w, uint32_t n,
                                                          double m, double inv_t,
                                                          double min_weight) {
  return SoftMinWeightsBody(x, w, n, m, inv_t, min_weight);
}
__attribute__((target("avx2"))) double ShareWeightsAvx2(const double* e, double* w, uint32_t n,
                                                        double min_weight) {
  return ShareWeightsBody(e, w, n, min_weight);
}
__attribute__((target("avx2"))) double AbsDiffSumAvx2(const float* a, const double* b, uint32_t n) {
  return AbsDiffSumBody(a, b, n);
}
#else
bool HasAvx2() { return false; }

double ShareWeightsAvx2(const double* e, double* w, uint32_t n, double min_weight) {
  return ShareWeightsBody(e, w, n, min_weight);
}

double AbsDiffSumAvx2(const float* a, const double* b, uint32_t n) {
  return AbsDiffSumBody(a, b, n);
}

void ExpNonPositiveAvx2(const double* y, double* out, uint32_t n) { ExpNonPositiveBody(y, out, n); }

double SoftMinWeightsAvx2(const double* x, double* w, uint32_t n, double m, double inv_t,
                          double min_weight) {
  return SoftMinWeightsBody(x, w, n, m, inv_t, min_weight);
}
#endif

}  // namespace vector_exp_internal

void ExpNonPositive(const double* y, double* out, uint32_t n) {
  static const auto impl = vector_exp_internal::HasAvx2()
                               ? &vector_exp_internal::ExpNonPositiveAvx2
                               : &vector_exp_internal::ExpNonPositivePortable;
  impl(y, out, n);
}

double SoftMinWeights(const double* x, double* w, uint32_t n, double m, double inv_t,
                      double min_weight) {
  static const auto impl = vector_exp_internal::HasAvx2()
                               ? &vector_exp_internal::SoftMinWeightsAvx2
                               : &vector_exp_internal::SoftMinWeightsPortable;
  return impl(x, w, n, m, inv_t, min_weight);
}

double ShareWeights(const double* e, double* w, uint32_t n, double min_weight) {
  static const auto impl = vector_exp_internal::HasAvx2()
                               ? &vector_exp_internal::ShareWeightsAvx2
                               : &vector_exp_internal::ShareWeightsPortable;
  return impl(e, w, n, min_weight);
}

double AbsDiffSum(const float* a, const double* b, uint32_t n) {
  static const auto impl = vector_exp_internal::HasAvx2()
                               ? &vector_exp_internal::AbsDiffSumAvx2
                               : &vector_exp_internal::AbsDiffSumPortable;
  return impl(a, b, n);
}

}  // namespace dar
