// The INT8 row kernels (policy_kernels.h): the portable reference, AVX2 and FMA with three
// ways of multiplying int16 pairs, and AVX-512 for hidden layers of at most 32. Each is built
// for its own instruction set (target attributes) and chosen at run time, so the binary runs
// on any x86-64.
#include "learn/policy_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dar::learn {
namespace {

// The kernels index rows and registers with int products (a row of the block, at most 16,
// times a width, at most 528): far from overflowing int, and kept in int so that the
// compiler's address arithmetic stays what it is.
// NOLINTBEGIN(bugprone-implicit-widening-of-multiplication-result)

// Quantises the non-negative `x` (n values) to [0, 32767] in `q`; returns the scale (x ~ q *
// scale), 0 if all of x is 0.
float QuantiseActivations(const float* x, int n, int16_t* q) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, x[i]);
  if (amax == 0) {
    std::fill(q, q + n, 0);
    return 0;
  }
  const float inv = kLevels / amax;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<int16_t>(std::nearbyint(std::min(x[i] * inv, kLevels)));
  }
  return amax / kLevels;
}

// The reference kernel. Multiply-adds are fused (std::fma) where the AVX2 kernel fuses them.
void RowsPortable(const KernelNet& net, const char* rows, size_t stride, size_t n,
                  LinkHalves halves, float* logits, BlockScratch s) {
  const float* partials = nullptr;
  for (size_t r = 0; r < n; ++r) {
    if (r % kBlock == 0) {
      partials =
          halves.fill(halves.ctx, r, static_cast<int>(std::min<size_t>(kBlock, n - r)), s.slot);
    }
    const auto* x = reinterpret_cast<const float*>(rows + r * stride);
    const float* link = partials + static_cast<size_t>(s.slot[r % kBlock]) * net.out1_padded;
    float* a = s.a;
    float* b = s.b;
    for (int o = 0; o < net.out1_padded; ++o) {
      float acc = net.b1[o];
      for (int j : kRowFeatures) {
        acc = std::fma(net.w1[static_cast<size_t>(j) * net.out1_padded + o], x[j], acc);
      }
      const float y = acc + link[o];
      a[o] = net.relu1 ? std::max(y, 0.0f) : y;
    }
    for (size_t li = 0; li < net.layers.size(); ++li) {
      const KernelLayer& l = net.layers[li];
      const bool relu = li + 1 < net.layers.size();
      const float sx = QuantiseActivations(a, l.in_padded, s.q);
      for (int o = 0; o < l.out_padded; ++o) {
        int32_t acc = 0;
        if (o < l.out) {
          // Exact: at most kMaxInt8LayerInput products of at most 32767 * 127.
          const int16_t* w = l.weight + static_cast<size_t>(o) * l.in_padded;
          for (int i = 0; i < l.in_padded; ++i) acc += int32_t{w[i]} * int32_t{s.q[i]};
        }
        const float y = std::fma(static_cast<float>(acc) * l.scale[o], sx, l.bias[o]);
        b[o] = relu ? std::max(y, 0.0f) : y;
      }
      std::swap(a, b);
    }
    logits[r] = a[0];
  }
}

__attribute__((target("avx2"))) inline float HorizontalMax(__m256 m) {
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  return _mm_cvtss_f32(m4);
}

__attribute__((target("avx2"))) inline int32_t HorizontalSum(__m256i v) {
  __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4e));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xb1));
  return _mm_cvtsi128_si32(sum);
}

// QuantiseActivations in AVX2, bit for bit (cvtps rounds to nearest even, as nearbyint does).
// n is a multiple of 16.
__attribute__((target("avx2"))) inline float QuantiseActivationsAvx2(const float* x, int n,
                                                                     int16_t* q) {
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  const float amax = HorizontalMax(m);
  if (amax == 0) {
    std::memset(q, 0, static_cast<size_t>(n) * sizeof(int16_t));
    return 0;
  }
  const __m256 inv = _mm256_set1_ps(kLevels / amax);
  const __m256 top = _mm256_set1_ps(kLevels);
  for (int i = 0; i < n; i += 16) {
    const __m256i v0 =
        _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv), top));
    const __m256i v1 =
        _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), inv), top));
    // Packing 16 int32 (all in [0, 32767]) into 16 int16 interleaves the 128-bit lanes; the
    // permute undoes it.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xd8));
  }
  return amax / kLevels;
}

// How the AVX2 kernel multiplies int16 pairs (activations in [0, 32767], weights in [-127,
// 127], the 2 products summed into an int32 lane and added to it): vpdpwssd where the
// processor has AVX-VNNI (VEX, _mm256_dpwssd_avx_epi32) or AVX512-VNNI with AVX512-VL (EVEX,
// _mm256_dpwssd_epi32); else vpmaddwd then vpaddd. All three give the same int32 sums
// (neither saturates, and no sum overflows: kMaxInt8LayerInput). vpdpwssd is written as
// assembly so that the compiler emits it nowhere else: the kernels are built for plain AVX2.
enum class Dot { kMadd, kVnniVex, kVnniEvex };

template <Dot kDot>
__attribute__((target("avx2,fma"))) inline __m256i DotPairs(__m256i acc, __m256i x, __m256i w) {
  if constexpr (kDot == Dot::kVnniVex) {
    asm("%{vex%} vpdpwssd %2, %1, %0" : "+x"(acc) : "x"(x), "x"(w));
    return acc;
  } else if constexpr (kDot == Dot::kVnniEvex) {
    asm("vpdpwssd %2, %1, %0" : "+x"(acc) : "x"(x), "x"(w));
    return acc;
  } else {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(x, w));
  }
}

// The same with the weights read from memory (16 int16 at w16).
template <Dot kDot>
__attribute__((target("avx2,fma"))) inline __m256i DotPairs(__m256i acc, __m256i x,
                                                            const int16_t* w16) {
  const auto* w = reinterpret_cast<const __m256i_u*>(w16);
  if constexpr (kDot == Dot::kVnniVex) {
    asm("%{vex%} vpdpwssd %2, %1, %0" : "+x"(acc) : "x"(x), "m"(*w));
    return acc;
  } else if constexpr (kDot == Dot::kVnniEvex) {
    asm("vpdpwssd %2, %1, %0" : "+x"(acc) : "x"(x), "m"(*w));
    return acc;
  } else {
    return DotPairs<kDot>(acc, x, _mm256_loadu_si256(w));
  }
}

// Eight outputs of a layer from their int32 sums: fma(acc * scale, sx, bias), ReLU'd if asked.
__attribute__((target("avx2,fma"))) inline void StoreOutputs(__m256i acc, const float* scale,
                                                             __m256 sx, const float* bias,
                                                             bool relu, float* out) {
  __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_loadu_ps(scale)), sx,
                             _mm256_loadu_ps(bias));
  if (relu) y = _mm256_max_ps(y, _mm256_setzero_ps());
  _mm256_storeu_ps(out, y);
}

// RowsPortable in AVX2 and FMA, bit for bit: the first layer 8 outputs at a time; an INT8
// layer 32 outputs at a time, each pair of a row's inputs broadcast and met by the pairs of
// 8 outputs' weights (DotPairs); the last layer (one output) as a dot product.
template <Dot kDot>
__attribute__((target("avx2,fma"))) void RowsAvx2(const KernelNet& net, const char* rows,
                                                  size_t stride, size_t n, LinkHalves halves,
                                                  float* logits, BlockScratch s) {
  const __m256 zero = _mm256_setzero_ps();
  const size_t width = static_cast<size_t>(s.width);
  for (size_t first = 0; first < n; first += kBlock) {
    const int m = static_cast<int>(std::min<size_t>(kBlock, n - first));
    float* a = s.a;
    float* b = s.b;
    const float* partials = halves.fill(halves.ctx, first, m, s.slot);
    for (int r = 0; r < m; ++r) {
      const auto* x = reinterpret_cast<const float*>(rows + (first + r) * stride);
      const float* link = partials + static_cast<size_t>(s.slot[r]) * net.out1_padded;
      for (int o = 0; o < net.out1_padded; o += 8) {
        __m256 acc = _mm256_loadu_ps(net.b1 + o);
        for (int j : kRowFeatures) {
          acc = _mm256_fmadd_ps(_mm256_loadu_ps(net.w1 + j * net.out1_padded + o),
                                _mm256_set1_ps(x[j]), acc);
        }
        __m256 y = _mm256_add_ps(acc, _mm256_loadu_ps(link + o));
        if (net.relu1) y = _mm256_max_ps(y, zero);
        _mm256_storeu_ps(a + r * width + o, y);
      }
    }
    for (size_t li = 0; li < net.layers.size(); ++li) {
      const KernelLayer& l = net.layers[li];
      const bool relu = li + 1 < net.layers.size();
      for (int r = 0; r < m; ++r) {
        s.sx[r] = QuantiseActivationsAvx2(a + r * width, l.in_padded, s.q + r * width);
      }
      if (l.out == 1) {
        for (int r = 0; r < m; ++r) {
          __m256i acc = _mm256_setzero_si256();
          for (int i = 0; i < l.in_padded; i += 16) {
            acc = DotPairs<kDot>(
                acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.q + r * width + i)),
                l.weight + i);
          }
          StoreOutputs(_mm256_setr_epi32(HorizontalSum(acc), 0, 0, 0, 0, 0, 0, 0), l.scale,
                       _mm256_set1_ps(s.sx[r]), l.bias, relu, b + r * width);
        }
        std::swap(a, b);
        continue;
      }
      const int pairs = l.in_padded / 2;
      for (int r = 0; r < m; ++r) {
        const int16_t* q = s.q + r * width;
        const __m256 sx = _mm256_set1_ps(s.sx[r]);
        for (int g = 0; g < l.out_padded / 8; g += 4) {
          __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                            _mm256_setzero_si256()};
          const int16_t* w = l.packed + static_cast<size_t>(g) * pairs * 16;
          for (int p = 0; p < pairs; ++p) {
            int32_t pair;
            std::memcpy(&pair, q + 2 * p, 4);
            const __m256i x = _mm256_set1_epi32(pair);
            for (int k = 0; k < 4; ++k) {
              acc[k] = DotPairs<kDot>(acc[k], x, w + (static_cast<size_t>(k) * pairs + p) * 16);
            }
          }
          for (int k = 0; k < 4; ++k) {
            const int o = (g + k) * 8;
            StoreOutputs(acc[k], l.scale + o, sx, l.bias + o, relu, b + r * width + o);
          }
        }
      }
      std::swap(a, b);
    }
    for (int r = 0; r < m; ++r) logits[first + r] = a[r * width];
  }
}

// Transposes 8 x 8 floats in registers: r[i][k] becomes r[k][i].
__attribute__((target("avx2"))) inline void Transpose8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Quantises, for 8 rows at once (one per lane), their 32 activations h[0..31] (>= 0, the
// rows' largest in `top_of_row`) as QuantiseActivations does, bit for bit: pair[k] holds
// each row's int16 levels 2k (low half) and 2k + 1. Returns the rows' scales.
__attribute__((target("avx2"))) inline __m256 QuantiseLanes(const __m256* h, __m256 top_of_row,
                                                            __m256i* pair) {
  const __m256 levels = _mm256_set1_ps(kLevels);
  const __m256 zero = _mm256_setzero_ps();
  // A row whose activations are all 0 gets 0s (and scale 0), not 0 * infinity.
  const __m256 inv = _mm256_andnot_ps(_mm256_cmp_ps(top_of_row, zero, _CMP_EQ_OQ),
                                      _mm256_div_ps(levels, top_of_row));
  for (int k = 0; k < 16; ++k) {
    const __m256i lo = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(h[2 * k], inv), levels));
    const __m256i hi = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(h[2 * k + 1], inv), levels));
    pair[k] = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16));  // both in [0, 32767]
  }
  return _mm256_div_ps(top_of_row, levels);
}

// RowsAvx2 for the common shape, every hidden layer at most 32 wide (in_padded 32), 8 rows at
// a time, one per lane: each step works on 8 rows at once, so there is no horizontal step and
// the rows' chains of work run side by side. A layer's output o for the 8 rows is one
// register; an INT8 layer is, per output, 16 DotPairs of the rows' pairs with that output's
// weight pair broadcast. The same arithmetic as RowsPortable, bit for bit.
template <Dot kDot>
__attribute__((target("avx2,fma"))) void Rows32(const KernelNet& net, const char* rows,
                                                size_t stride, size_t n, LinkHalves halves,
                                                float* logits, BlockScratch s) {
  static_assert(kBlock % 8 == 0);
  const __m256 zero = _mm256_setzero_ps();
  const size_t hidden = net.layers.size() - 1;
  const KernelLayer& last = net.layers.back();
  __m256 h[32];  // a layer's 32 outputs for the 8 rows
  alignas(32) float out[8];
  for (size_t first = 0; first < n; first += kBlock) {
    const int m = static_cast<int>(std::min<size_t>(kBlock, n - first));
    const float* partials = halves.fill(halves.ctx, first, m, s.slot);
    for (int g = 0; g < m; g += 8) {
      // Lanes past the last row repeat it (their results are not stored).
      const int live = std::min(8, m - g);
      const float* link[8];
      // The rows' features 0..7 and 3..10, transposed: lo[j] is feature j of the 8 rows, hi[j]
      // feature j + 3 (two transposes cost less than six gathers).
      __m256 lo[8], hi[8];
      for (int r = 0; r < 8; ++r) {
        const int row = g + std::min(r, live - 1);
        link[r] = partials + static_cast<size_t>(s.slot[row]) * 32;
        const auto* x = reinterpret_cast<const float*>(rows + (first + row) * stride);
        lo[r] = _mm256_loadu_ps(x);
        hi[r] = _mm256_loadu_ps(x + 3);
      }
      Transpose8(lo);
      Transpose8(hi);
      static_assert(kRowFeatures[0] == 0 && kRowFeatures[1] == 1 && kRowFeatures[2] == 7 &&
                    kRowFeatures[3] == 8 && kRowFeatures[4] == 9 && kRowFeatures[5] == 10 &&
                    kPolicyFeatures == 11);
      const __m256 feature[] = {lo[0], lo[1], lo[7], hi[5], hi[6], hi[7]};
      __m256 top = zero;
      for (int c = 0; c < 4; ++c) {
        __m256 lh[8];
        for (int r = 0; r < 8; ++r) lh[r] = _mm256_loadu_ps(link[r] + 8 * c);
        Transpose8(lh);
        for (int i = 0; i < 8; ++i) {
          const int o = 8 * c + i;
          // b1 and w1 8 times over (KernelNet::wide1): memory operands, no broadcasts.
          const float* w = net.wide1 + static_cast<size_t>(o) * (std::size(kRowFeatures) + 1) * 8;
          __m256 acc = _mm256_loadu_ps(w);
          for (size_t j = 0; j < std::size(kRowFeatures); ++j) {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + 8 * (j + 1)), feature[j], acc);
          }
          h[o] = _mm256_max_ps(_mm256_add_ps(acc, lh[i]), zero);
          top = _mm256_max_ps(top, h[o]);
        }
      }
      __m256i pair[16];
      __m256 sx = QuantiseLanes(h, top, pair);
      for (size_t li = 0; li < hidden; ++li) {
        const KernelLayer& l = net.layers[li];
        top = zero;
        // Four outputs at a time, their four chains of DotPairs interleaved.
        for (int o = 0; o < 32; o += 4) {
          __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                            _mm256_setzero_si256()};
          for (int k = 0; k < 16; ++k) {
            for (int i = 0; i < 4; ++i) {
              acc[i] = DotPairs<kDot>(acc[i], pair[k], l.broadcast + ((o + i) * 16 + k) * 16);
            }
          }
          for (int i = 0; i < 4; ++i) {
            const __m256 y = _mm256_fmadd_ps(
                _mm256_mul_ps(_mm256_cvtepi32_ps(acc[i]), _mm256_set1_ps(l.scale[o + i])), sx,
                _mm256_set1_ps(l.bias[o + i]));
            h[o + i] = _mm256_max_ps(y, zero);
            top = _mm256_max_ps(top, h[o + i]);
          }
        }
        sx = QuantiseLanes(h, top, pair);
      }
      __m256i acc = _mm256_setzero_si256();
      for (int k = 0; k < 16; ++k) acc = DotPairs<kDot>(acc, pair[k], last.broadcast + k * 16);
      _mm256_store_ps(out, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc),
                                                         _mm256_set1_ps(last.scale[0])),
                                           sx, _mm256_set1_ps(last.bias[0])));
      std::copy(out, out + live, logits + first + g);
    }
  }
}

// The AVX-512 kernel for the common shape (Rows32's), 16 rows at a time, one per zmm lane,
// for processors with AVX512-VNNI: each instruction does twice Rows32's work, and with 32
// registers an INT8 layer keeps its 16 pairs of inputs and 8 outputs' sums in registers.
// The first layer runs row by row (32 outputs in two registers, the row's features
// broadcast), then a 16 x 16 transpose puts the 16 rows in lanes. An INT8 layer is, per
// output, 16 vpdpwssd of the rows' pairs with the output's weight pair, read as an EVEX
// embedded broadcast (a 32-bit memory operand {1to16}): no broadcast table. The same
// arithmetic as RowsPortable, bit for bit.
#define DAR_AVX512_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma"
// GCC 12 warns of the _mm512_undefined_* that its own AVX-512 intrinsics pass as the unused
// source of an unmasked operation (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Transposes 16 x 16 floats in registers: r[i][k] becomes r[k][i].
__attribute__((target(DAR_AVX512_TARGET))) inline void Transpose16(__m512* r) {
  __m512 a[16], b[16];
  for (int i = 0; i < 16; i += 2) {
    a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // b[4i + c], 128-bit lane L: column 4L + c of rows 4i .. 4i + 3.
  for (int i = 0; i < 16; i += 4) {
    const __m512d lo0 = _mm512_castps_pd(a[i]), lo1 = _mm512_castps_pd(a[i + 2]);
    const __m512d hi0 = _mm512_castps_pd(a[i + 1]), hi1 = _mm512_castps_pd(a[i + 3]);
    b[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo0, lo1));
    b[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo0, lo1));
    b[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi0, hi1));
    b[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi0, hi1));
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 c1 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0x44);
    const __m512 c2 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0xee);
    const __m512 c3 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0x44);
    const __m512 c4 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0xee);
    r[c] = _mm512_shuffle_f32x4(c1, c3, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(c1, c3, 0xdd);
    r[8 + c] = _mm512_shuffle_f32x4(c2, c4, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(c2, c4, 0xdd);
  }
}

// QuantiseLanes for 16 rows: h[o] holds output o of the 16 rows (>= 0, the rows' largest in
// `top_of_row`); pair[k] gets each row's levels 2k (low half) and 2k + 1. Returns the rows'
// scales.
__attribute__((target(DAR_AVX512_TARGET))) inline __m512 QuantiseLanes16(const float (*h)[16],
                                                                         __m512 top_of_row,
                                                                         __m512i* pair) {
  const __m512 levels = _mm512_set1_ps(kLevels);
  // A row whose activations are all 0 gets 0s (and scale 0), not 0 * infinity.
  const __m512 inv = _mm512_maskz_div_ps(
      _mm512_cmp_ps_mask(top_of_row, _mm512_setzero_ps(), _CMP_NEQ_UQ), levels, top_of_row);
#pragma GCC unroll 16
  for (int k = 0; k < 16; ++k) {
    const __m512i lo =
        _mm512_cvtps_epi32(_mm512_min_ps(_mm512_mul_ps(_mm512_load_ps(h[2 * k]), inv), levels));
    const __m512i hi =
        _mm512_cvtps_epi32(_mm512_min_ps(_mm512_mul_ps(_mm512_load_ps(h[2 * k + 1]), inv), levels));
    pair[k] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));  // both in [0, 32767]
  }
  return _mm512_div_ps(top_of_row, levels);
}

__attribute__((target(DAR_AVX512_TARGET))) inline __m512 MaxOf4(const __m512* m) {
  return _mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3]));
}

// acc + the products of x's int16 pairs with the pair at w (in every lane), vpdpwssd with
// an embedded broadcast: GCC 12 does not fold _mm512_set1_epi32 of a load into it.
__attribute__((target(DAR_AVX512_TARGET))) inline __m512i DotPairsBroadcast(__m512i acc, __m512i x,
                                                                            const int16_t* w) {
  struct Pair {
    int16_t v[2];
  };
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*reinterpret_cast<const Pair*>(w)));
  return acc;
}

__attribute__((target(DAR_AVX512_TARGET))) void Rows32Avx512(const KernelNet& net, const char* rows,
                                                             size_t stride, size_t n,
                                                             LinkHalves halves, float* logits,
                                                             BlockScratch s) {
  static_assert(kBlock == 16);
  constexpr int kGroup = 8;
  const __m512 zero = _mm512_setzero_ps();
  const size_t hidden = net.layers.size() - 1;
  const KernelLayer& last = net.layers.back();
  alignas(64) float by_row[16][32];  // the first layer's outputs, a row of 32 per row
  alignas(64) float h[32][16];       // a layer's outputs, 16 rows per output
  for (size_t first = 0; first < n; first += kBlock) {
    const int m = static_cast<int>(std::min<size_t>(kBlock, n - first));
    const float* partials = halves.fill(halves.ctx, first, m, s.slot);
    // The first layer row by row, 32 outputs in two registers: b1, + w1 * x in kRowFeatures'
    // order, + the link half, ReLU. Rows past the last repeat it (their results are not
    // stored).
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      const int row = std::min(r, m - 1);
      const auto* x = reinterpret_cast<const float*>(rows + (first + row) * stride);
      const float* link = partials + static_cast<size_t>(s.slot[row]) * 32;
      __m512 acc0 = _mm512_loadu_ps(net.b1), acc1 = _mm512_loadu_ps(net.b1 + 16);
      for (int j : kRowFeatures) {
        const __m512 xj = _mm512_set1_ps(x[j]);
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(net.w1 + j * 32), xj, acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(net.w1 + j * 32 + 16), xj, acc1);
      }
      _mm512_store_ps(by_row[r], _mm512_max_ps(_mm512_add_ps(acc0, _mm512_loadu_ps(link)), zero));
      _mm512_store_ps(by_row[r] + 16,
                      _mm512_max_ps(_mm512_add_ps(acc1, _mm512_loadu_ps(link + 16)), zero));
    }
    // Transposed to 16 rows per output; each row's largest, in four chains (max(h, top)
    // keeps top +0 on -0).
    __m512 top[4] = {zero, zero, zero, zero};
    for (int half = 0; half < 2; ++half) {
      __m512 t[16];
      for (int r = 0; r < 16; ++r) t[r] = _mm512_load_ps(by_row[r] + 16 * half);
      Transpose16(t);
      for (int o = 0; o < 16; ++o) {
        _mm512_store_ps(h[16 * half + o], t[o]);
        top[o % 4] = _mm512_max_ps(t[o], top[o % 4]);
      }
    }
    __m512i pair[16];
    __m512 sx = QuantiseLanes16(h, MaxOf4(top), pair);
    for (size_t li = 0; li < hidden; ++li) {
      const KernelLayer& l = net.layers[li];
      for (__m512& t : top) t = zero;
      // Eight outputs at a time, their eight chains of vpdpwssd interleaved; the groups are
      // independent, so the processor overlaps one group's chains with the next's (vpdpwssd
      // takes about 6 cycles and issues two a cycle here: 12 chains in flight keep it busy).
      // Sixteen at a time measured the same, with an accumulator spilled.
      for (int o = 0; o < 32; o += kGroup) {
        const int16_t* w = l.weight + o * 32;
        __m512i acc[kGroup];
        for (int i = 0; i < kGroup; ++i) acc[i] = _mm512_setzero_si512();
#pragma GCC unroll 16
        for (int k = 0; k < 16; ++k) {
#pragma GCC unroll 16
          for (int i = 0; i < kGroup; ++i) {
            acc[i] = DotPairsBroadcast(acc[i], pair[k], w + i * 32 + 2 * k);
          }
        }
        for (int i = 0; i < kGroup; ++i) {
          const __m512 y = _mm512_fmadd_ps(
              _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i]), _mm512_set1_ps(l.scale[o + i])), sx,
              _mm512_set1_ps(l.bias[o + i]));
          const __m512 relu = _mm512_max_ps(y, zero);
          _mm512_store_ps(h[o + i], relu);
          top[i % 4] = _mm512_max_ps(relu, top[i % 4]);
        }
      }
      sx = QuantiseLanes16(h, MaxOf4(top), pair);
    }
    // The last layer (one output): four chains, summed (int32 sums are exact in any order).
    __m512i acc[4];
    for (int i = 0; i < 4; ++i) acc[i] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) {
      acc[k % 4] = DotPairsBroadcast(acc[k % 4], pair[k], last.weight + 2 * k);
    }
    const __m512i sum =
        _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
    const __m512 logit =
        _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(last.scale[0])), sx,
                        _mm512_set1_ps(last.bias[0]));
    _mm512_mask_storeu_ps(logits + first, static_cast<__mmask16>((1u << m) - 1), logit);
  }
}
#undef DAR_AVX512_TARGET
#pragma GCC diagnostic pop
// NOLINTEND(bugprone-implicit-widening-of-multiplication-result)

}  // namespace

RowsKernel RowsKernelFor(QuantizedPolicyModel::Kernel kernel, bool narrow) {
  using Kernel = QuantizedPolicyModel::Kernel;
  RowsKernel run = RowsPortable;
  switch (kernel) {
    case Kernel::kAuto:
    case Kernel::kPortable:
      break;
    case Kernel::kAvx2:
      run = narrow ? Rows32<Dot::kMadd> : RowsAvx2<Dot::kMadd>;
      break;
    case Kernel::kAvx2VnniVex:
      run = narrow ? Rows32<Dot::kVnniVex> : RowsAvx2<Dot::kVnniVex>;
      break;
    case Kernel::kAvx2VnniEvex:
      run = narrow ? Rows32<Dot::kVnniEvex> : RowsAvx2<Dot::kVnniEvex>;
      break;
    case Kernel::kAvx512Vnni:
      run = narrow ? Rows32Avx512 : RowsAvx2<Dot::kVnniEvex>;
      break;
  }
  return run;
}

}  // namespace dar::learn
