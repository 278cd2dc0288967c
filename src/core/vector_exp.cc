#include "core/vector_exp.h"

#include <algorithm>
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

// Four doubles read one by one: for arrays just written one element at a time (the engine's
// gathered shares), which a vector load could not take from the pending stores (it would wait
// for them to reach the cache: a store-forwarding stall).
// The empty asm keeps the compiler from merging the four loads back into one.
DAR_KERNEL double LoadOne(const double* p) {
  double x = *p;
  asm("" : "+x"(x));
  return x;
}
DAR_KERNEL V4d LoadEach(const double* p) {
  return V4d{LoadOne(p), LoadOne(p + 1), LoadOne(p + 2), LoadOne(p + 3)};
}

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

// ln(x) for x positive, finite and normal. x = 2^e m with m in (sqrt(1/2), sqrt(2)]; ln m =
// 2 atanh(s) with s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^21 (truncation
// error below 1e-17 relative); then e ln2 (Cody-Waite split) + ln m. Separate multiplies and
// adds (no FMA), so every version rounds alike.
DAR_KERNEL V4d Log4(const V4d& x) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kSqrt2 = 1.4142135623730951;
  constexpr int64_t kMantissa = (int64_t{1} << 52) - 1;
  constexpr double kTwo52 = 0x1p52;
  const V4i bits = AS_INTS(x);
  V4d m = AS_DOUBLES((bits & kMantissa) | std::bit_cast<int64_t>(1.0));  // [1, 2)
  // The biased exponent as a double, exactly: 2^52 + it, less 2^52 and the bias.
  V4d e = AS_DOUBLES((bits >> 52) | std::bit_cast<int64_t>(kTwo52)) - (kTwo52 + 1023);
  const V4i big = m > kSqrt2;
  m = big ? m * 0.5 : m;
  e = big ? e + 1.0 : e;
  const V4d s = (m - 1.0) / (m + 1.0);
  const V4d s2 = s * s;
  V4d p = s2 * (2.0 / 21) + 2.0 / 19;
  p = p * s2 + 2.0 / 17;
  p = p * s2 + 2.0 / 15;
  p = p * s2 + 2.0 / 13;
  p = p * s2 + 2.0 / 11;
  p = p * s2 + 2.0 / 9;
  p = p * s2 + 2.0 / 7;
  p = p * s2 + 2.0 / 5;
  p = p * s2 + 2.0 / 3;
  const V4d ln_m = s * 2.0 + (s * s2) * p;
  return e * kLn2Hi + (ln_m + e * kLn2Lo);
}

DAR_KERNEL void LogPositiveBody(const double* x, double* out, uint32_t n) {
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) Store(out + i, Log4(Load(x + i)));
  if (i < n) StorePartial(out + i, n - i, Log4(LoadPartial(x + i, n - i, 1.0)));
}

// Lane-wise min and max, as minpd and maxpd compute them (the second operand where either
// is NaN; the engine's operands never are).
DAR_KERNEL V4d Min4(const V4d& a, const V4d& b) { return a < b ? a : b; }
DAR_KERNEL V4d Max4(const V4d& a, const V4d& b) { return a > b ? a : b; }

DAR_KERNEL double SumLanes(const V4d& v) { return (v[0] + v[1]) + (v[2] + v[3]); }

DAR_KERNEL void ExpNonPositiveBody(const double* y, double* out, uint32_t n) {
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) Store(out + i, Exp4(Load(y + i)));
  if (i < n) StorePartial(out + i, n - i, Exp4(LoadPartial(y + i, n - i, 0.0)));
}

// |a - b| summed four lanes at a time into `sum`, for AbsDiffSumBody and ShareBody.
DAR_KERNEL V4d AbsDiff4(const float* a, const V4d& b) {
  using V4f = float __attribute__((vector_size(16)));
  const V4i sign = {INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN};
  V4f af;
  std::memcpy(&af, a, sizeof(af));
  const V4d d = __builtin_convertvector(af, V4d) - b;
  return AS_DOUBLES(AS_INTS(d) & ~sign);
}

// Floored, normalised shares into w: the end of both weight kernels. e[0..n) holds the shares
// (all but the last n % 4, which are in `tail`, 0 in the lanes past n) and z is their sum.
// e may be w. With kEach, e is read one element at a time (LoadEach). With `installed`, sets
// *diff as AbsDiffSumBody(installed, w, n) would.
template <bool kEach>
DAR_KERNEL void ShareBody(const double* e, double* w, uint32_t n, const V4d& tail,
                          double min_weight, double z, const float* installed, double* diff) {
  const uint32_t full = n & ~3u, rest = n - full;
  const double inv_z = 1 / z;
  V4d total4 = {0, 0, 0, 0};
  for (uint32_t i = 0; i < full; i += 4) {
    V4d s = (kEach ? LoadEach(e + i) : Load(e + i)) * inv_z;
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
  if (installed == nullptr) {
    for (uint32_t i = 0; i < full; i += 4) Store(w + i, Load(w + i) * inv_total);
    for (uint32_t i = full; i < n; ++i) w[i] *= inv_total;
    return;
  }
  V4d sum = {0, 0, 0, 0};
  for (uint32_t i = 0; i < full; i += 4) {
    const V4d wi = Load(w + i) * inv_total;
    Store(w + i, wi);
    sum += AbsDiff4(installed + i, wi);
  }
  double sum_rest = 0;
  for (uint32_t i = full; i < n; ++i) {
    w[i] *= inv_total;
    sum_rest += std::abs(installed[i] - w[i]);
  }
  *diff = SumLanes(sum) + sum_rest;
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
  ShareBody<false>(w, w, n, tail, min_weight, z, nullptr, nullptr);
  return z;
}

DAR_KERNEL double ShareWeightsBody(const double* e, double* w, uint32_t n, double min_weight,
                                   const float* installed, double* diff) {
  const uint32_t full = n & ~3u, rest = n - full;
  V4d z4 = {0, 0, 0, 0};
  for (uint32_t i = 0; i < full; i += 4) {
    z4 += LoadEach(e + i);
  }
  const V4d tail = {rest > 0 ? LoadOne(e + full) : 0.0, rest > 1 ? LoadOne(e + full + 1) : 0.0,
                    rest > 2 ? LoadOne(e + full + 2) : 0.0, 0.0};
  z4 += tail;  // + 0 in the lanes past n: no change
  const double z = SumLanes(z4);
  if (!(z >= kShareZMin && z <= kShareZMax)) return z;  // the caller falls back: leave w alone
  ShareBody<true>(e, w, n, tail, min_weight, z, installed, diff);
  return z;
}

DAR_KERNEL double AbsDiffSumBody(const float* a, const double* b, uint32_t n) {
  V4d sum = {0, 0, 0, 0};
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) sum += AbsDiff4(a + i, Load(b + i));
  double rest = 0;
  for (; i < n; ++i) rest += std::abs(a[i] - b[i]);
  return SumLanes(sum) + rest;
}

// The first r (1 to 3) lanes from p, the others `fill`; no store to memory on the way (which
// would stall the vector load behind it).
DAR_KERNEL V4d LoadFirst(const double* p, uint32_t r, double fill) {
  return V4d{p[0], r > 1 ? p[1] : fill, r > 2 ? p[2] : fill, fill};
}

DAR_KERNEL RunResult RunWeightsBody(const RunInputs& in, uint32_t r, double min_weight,
                                    const float* installed, double* w, int32_t* link) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // Locals, not in.*: the stores to link could alias `in` as far as the compiler knows.
  const double *cost = in.cost, *twin_cost = in.twin_cost, *arc_boltz = in.arc_boltz;
  const double *dist = in.dist, *dist_floor = in.dist_floor, *phi = in.phi, *boltz = in.boltz;
  const int32_t* in_link = in.link;
  const uint32_t full = r & ~3u, rest = r - full, groups = (r + 3) / 4;
  V4d e[kMaxRun / 4];  // the shares, four to a group; 0 in the lanes past r
  V4d best = {kInf, kInf, kInf, kInf}, top = -best, slack = -best, z4 = {0, 0, 0, 0};
  for (uint32_t i = 0; i < full; i += 4) {
    best = Min4(best, Load(cost + i) + Load(dist + i));
    top = Max4(top, Load(phi + i));
    slack = Max4(slack, Load(dist_floor + i) - Load(twin_cost + i));
    e[i / 4] = Load(arc_boltz + i) * Load(boltz + i);
    z4 += e[i / 4];
    std::memcpy(link + i, in_link + i, 4 * sizeof(int32_t));
  }
  if (rest > 0) {  // lanes past r: +inf cost, -inf potential and floor, so they change nothing
    best = Min4(best, LoadFirst(cost + full, rest, kInf) + LoadFirst(dist + full, rest, 0));
    top = Max4(top, LoadFirst(phi + full, rest, -kInf));
    slack = Max4(slack,
                 LoadFirst(dist_floor + full, rest, -kInf) - LoadFirst(twin_cost + full, rest, 0));
    e[full / 4] = LoadFirst(arc_boltz + full, rest, 0) * LoadFirst(boltz + full, rest, 0);
    z4 += e[full / 4];
    for (uint32_t i = full; i < r; ++i) link[i] = in_link[i];
  }
  RunResult out;
  out.best = std::min(std::min(best[0], best[1]), std::min(best[2], best[3]));
  out.top = std::max(std::max(top[0], top[1]), std::max(top[2], top[3]));
  out.slack = std::max(std::max(slack[0], slack[1]), std::max(slack[2], slack[3]));
  out.z = SumLanes(z4);
  out.diff = 0;
  if (!(out.z >= kShareZMin && out.z <= kShareZMax)) return out;
  // As ShareBody.
  const double inv_z = 1 / out.z;
  V4d total4 = {0, 0, 0, 0};
  for (uint32_t g = 0; g < groups; ++g) {
    V4d s = e[g] * inv_z;
    s = s < min_weight ? min_weight : s;
    if (g * 4 + 4 > r) s = V4i{0, 1, 2, 3} < static_cast<int64_t>(rest) ? s : 0.0;
    e[g] = s;
    total4 += s;
  }
  const double inv_total = 1 / SumLanes(total4);
  V4d sum = {0, 0, 0, 0};
  for (uint32_t i = 0; i < full; i += 4) {
    const V4d wi = e[i / 4] * inv_total;
    Store(w + i, wi);
    if (installed != nullptr) sum += AbsDiff4(installed + i, wi);
  }
  if (rest > 0) StorePartial(w + full, rest, e[full / 4] * inv_total);
  if (installed != nullptr) {
    double sum_rest = 0;
    for (uint32_t i = full; i < r; ++i) sum_rest += std::abs(installed[i] - w[i]);
    out.diff = SumLanes(sum) + sum_rest;
  }
  return out;
}

#undef DAR_KERNEL

}  // namespace

namespace vector_exp_internal {

void ExpNonPositivePortable(const double* y, double* out, uint32_t n) {
  ExpNonPositiveBody(y, out, n);
}

void LogPositivePortable(const double* x, double* out, uint32_t n) { LogPositiveBody(x, out, n); }

double SoftMinWeightsPortable(const double* x, double* w, uint32_t n, double m, double inv_t,
                              double min_weight) {
  return SoftMinWeightsBody(x, w, n, m, inv_t, min_weight);
}

double ShareWeightsPortable(const double* e, double* w, uint32_t n, double min_weight,
                            const float* installed, double* diff) {
  return ShareWeightsBody(e, w, n, min_weight, installed, diff);
}

double AbsDiffSumPortable(const float* a, const double* b, uint32_t n) {
  return AbsDiffSumBody(a, b, n);
}

RunResult RunWeightsPortable(const RunInputs& in, uint32_t r, double min_weight,
                             const float* installed, double* w, int32_t* link) {
  return RunWeightsBody(in, r, min_weight, installed, w, link);
}

#if defined(__x86_64__)
bool HasAvx2() { return __builtin_cpu_supports("avx2"); }

__attribute__((target("avx2"))) void ExpNonPositiveAvx2(const double* y, double* out, uint32_t n) {
  ExpNonPositiveBody(y, out, n);
}

__attribute__((target("avx2"))) void LogPositiveAvx2(const double* x, double* out, uint32_t n) {
  LogPositiveBody(x, out, n);
}

__attribute__((target("avx2"))) double SoftMinWeightsAvx2(const double* x, double* w, uint32_t n,
                                                          double m, double inv_t,
                                                          double min_weight) {
  return SoftMinWeightsBody(x, w, n, m, inv_t, min_weight);
}
__attribute__((target("avx2"))) double ShareWeightsAvx2(const double* e, double* w, uint32_t n,
                                                        double min_weight, const float* installed,
                                                        double* diff) {
  return ShareWeightsBody(e, w, n, min_weight, installed, diff);
}
__attribute__((target("avx2"))) double AbsDiffSumAvx2(const float* a, const double* b, uint32_t n) {
  return AbsDiffSumBody(a, b, n);
}
__attribute__((target("avx2"))) RunResult RunWeightsAvx2(const RunInputs& in, uint32_t r,
                                                         double min_weight, const float* installed,
                                                         double* w, int32_t* link) {
  return RunWeightsBody(in, r, min_weight, installed, w, link);
}
#else
bool HasAvx2() { return false; }

double ShareWeightsAvx2(const double* e, double* w, uint32_t n, double min_weight,
                        const float* installed, double* diff) {
  return ShareWeightsBody(e, w, n, min_weight, installed, diff);
}

double AbsDiffSumAvx2(const float* a, const double* b, uint32_t n) {
  return AbsDiffSumBody(a, b, n);
}

RunResult RunWeightsAvx2(const RunInputs& in, uint32_t r, double min_weight, const float* installed,
                         double* w, int32_t* link) {
  return RunWeightsBody(in, r, min_weight, installed, w, link);
}

void ExpNonPositiveAvx2(const double* y, double* out, uint32_t n) { ExpNonPositiveBody(y, out, n); }

void LogPositiveAvx2(const double* x, double* out, uint32_t n) { LogPositiveBody(x, out, n); }

double SoftMinWeightsAvx2(const double* x, double* w, uint32_t n, double m, double inv_t,
                          double min_weight) {
  return SoftMinWeightsBody(x, w, n, m, inv_t, min_weight);
}
#endif

}  // namespace vector_exp_internal

const VectorKernels& ChosenKernels() {
  namespace internal = vector_exp_internal;
  static const VectorKernels kernels =
      internal::HasAvx2()
          ? VectorKernels{&internal::ExpNonPositiveAvx2, &internal::LogPositiveAvx2,
                          &internal::SoftMinWeightsAvx2, &internal::ShareWeightsAvx2,
                          &internal::AbsDiffSumAvx2,     &internal::RunWeightsAvx2}
          : VectorKernels{&internal::ExpNonPositivePortable, &internal::LogPositivePortable,
                          &internal::SoftMinWeightsPortable, &internal::ShareWeightsPortable,
                          &internal::AbsDiffSumPortable,     &internal::RunWeightsPortable};
  return kernels;
}

void ExpNonPositive(const double* y, double* out, uint32_t n) {
  ChosenKernels().exp_non_positive(y, out, n);
}

void LogPositive(const double* x, double* out, uint32_t n) {
  ChosenKernels().log_positive(x, out, n);
}

double SoftMinWeights(const double* x, double* w, uint32_t n, double m, double inv_t,
                      double min_weight) {
  return ChosenKernels().soft_min_weights(x, w, n, m, inv_t, min_weight);
}

double ShareWeights(const double* e, double* w, uint32_t n, double min_weight,
                    const float* installed, double* diff) {
  return ChosenKernels().share_weights(e, w, n, min_weight, installed, diff);
}

double AbsDiffSum(const float* a, const double* b, uint32_t n) {
  return ChosenKernels().abs_diff_sum(a, b, n);
}

RunResult RunWeights(const RunInputs& in, uint32_t r, double min_weight, const float* installed,
                     double* w, int32_t* link) {
  return ChosenKernels().run_weights(in, r, min_weight, installed, w, link);
}

}  // namespace dar
