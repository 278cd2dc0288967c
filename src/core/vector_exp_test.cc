#include "core/vector_exp.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

namespace internal = vector_exp_internal;

// Distance in units in the last place between two finite doubles of the same sign.
int64_t UlpDistance(double a, double b) {
  return std::abs(std::bit_cast<int64_t>(a) - std::bit_cast<int64_t>(b));
}

bool SameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST(VectorExpTest, MatchesStdExpWithinTwoUlp) {
  // A dense sweep of [-708, 0], the edges, and odd lengths (tails of 1 to 3 lanes).
  std::vector<double> y;
  for (int i = 0; i <= 708000; ++i) y.push_back(-i / 1000.0);
  Random rng(7);
  for (int i = 0; i < 100000; ++i) y.push_back(-708 * rng.Uniform());
  for (double v : {-0.0, -1e-300, -4.9e-324, -1e-17, -0.34657359027997264, -707.999999}) {
    y.push_back(v);
  }
  while (y.size() % 4 != 3) y.push_back(-1.5);  // a tail of three lanes
  std::vector<double> out(y.size());
  ExpNonPositive(y.data(), out.data(), static_cast<uint32_t>(y.size()));
  int64_t worst = 0;
  double at = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const int64_t ulp = UlpDistance(out[i], std::exp(y[i]));
    if (ulp > worst) {
      worst = ulp;
      at = y[i];
    }
  }
  EXPECT_LE(worst, 2) << "at exp(" << at << ")";
  EXPECT_EQ(out[0], 1.0);  // exp(0) exactly
}

TEST(VectorExpTest, ZeroBelowTheNormalRange) {
  std::vector<double> y = {-708.5, -745.2, -1e6, -std::numeric_limits<double>::infinity(), -709};
  std::vector<double> out(y.size(), 1);
  ExpNonPositive(y.data(), out.data(), static_cast<uint32_t>(y.size()));
  for (double e : out) EXPECT_EQ(e, 0.0);
}

TEST(VectorExpTest, InPlace) {
  std::vector<double> y = {0, -1, -2, -3, -4, -5, -6};
  ExpNonPositive(y.data(), y.data(), static_cast<uint32_t>(y.size()));
  for (int i = 0; i < 7; ++i) EXPECT_LE(UlpDistance(y[i], std::exp(-i)), 2);
}

// The AVX2 and portable versions must agree to the bit, or a simulation would depend on the
// machine it runs on.
TEST(VectorExpTest, Avx2AndPortableAgreeToTheBit) {
  if (!internal::HasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  Random rng(11);
  for (uint32_t n = 1; n <= 67; ++n) {
    std::vector<double> y(n), a(n), b(n);
    for (double& v : y) v = -750 * rng.Uniform() * rng.Uniform();
    internal::ExpNonPositivePortable(y.data(), a.data(), n);
    internal::ExpNonPositiveAvx2(y.data(), b.data(), n);
    EXPECT_TRUE(SameBits(a, b)) << "n=" << n;

    std::vector<double> x(n);
    double m = std::numeric_limits<double>::infinity();
    for (double& v : x) {
      v = 3 + 6 * rng.Uniform();
      m = std::min(m, v);
    }
    const double inv_t = 1 / (0.01 + 2 * rng.Uniform());
    const double floor = rng.Uniform() < 0.3 ? 0 : 0.01 * rng.Uniform();
    const double za = internal::SoftMinWeightsPortable(x.data(), a.data(), n, m, inv_t, floor);
    const double zb = internal::SoftMinWeightsAvx2(x.data(), b.data(), n, m, inv_t, floor);
    EXPECT_EQ(std::bit_cast<uint64_t>(za), std::bit_cast<uint64_t>(zb)) << "n=" << n;
    EXPECT_TRUE(SameBits(a, b)) << "n=" << n;
  }
}

TEST(VectorExpTest, LogMatchesStdLogWithinTwoUlp) {
  // Every binade of the normal range, dense around 1 (the features' ratios and weights), the
  // edges, and a tail of three lanes.
  std::vector<double> x;
  Random rng(5);
  for (int e = -1022; e <= 1023; ++e) {
    for (int i = 0; i < 40; ++i) x.push_back(std::ldexp(1 + rng.Uniform(), e));
  }
  for (int i = 0; i <= 200000; ++i) x.push_back(0.5 + i / 100000.0);
  for (double v :
       {1.0, 2.0, 0.5, 1.4142135623730951, 1.4142135623730949, 1.0000000000000002,
        0.9999999999999999, 1e-6, 0.001, 2.2250738585072014e-308, 1.7976931348623157e308}) {
    x.push_back(v);
  }
  while (x.size() % 4 != 3) x.push_back(3.0);
  std::vector<double> out(x.size());
  LogPositive(x.data(), out.data(), static_cast<uint32_t>(x.size()));
  int64_t worst = 0;
  double at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::log(x[i]);
    // Ulps are counted between values of one sign; a wrong sign is a failure.
    const int64_t ulp = (want < 0) == (out[i] < 0) ? UlpDistance(out[i], want) : 1 << 30;
    if (ulp > worst) {
      worst = ulp;
      at = x[i];
    }
  }
  EXPECT_LE(worst, 2) << "at ln(" << at << ")";
  const std::vector<double> one = {1.0};
  std::vector<double> zero(1, 5);
  LogPositive(one.data(), zero.data(), 1);
  EXPECT_EQ(zero[0], 0.0);  // ln 1 exactly: a ratio of equals gives a feature of 0
}

TEST(VectorExpTest, LogAvx2AndPortableAgreeToTheBit) {
  if (!internal::HasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  Random rng(12);
  for (uint32_t n = 1; n <= 67; ++n) {
    std::vector<double> x(n), a(n), b(n);
    for (double& v : x)
      v = std::ldexp(1 + rng.Uniform(), static_cast<int>(60 * rng.Uniform()) - 30);
    internal::LogPositivePortable(x.data(), a.data(), n);
    internal::LogPositiveAvx2(x.data(), b.data(), n);
    EXPECT_TRUE(SameBits(a, b)) << "n=" << n;
  }
}

// Against the plain formula, in long double.
TEST(VectorExpTest, SoftMinWeightsMatchTheFormula) {
  Random rng(5);
  for (uint32_t n = 1; n <= 40; ++n) {
    std::vector<double> x(n);
    double m = std::numeric_limits<double>::infinity();
    for (double& v : x) {
      v = 2 + 4 * rng.Uniform();
      m = std::min(m, v);
    }
    const double t = 0.05 + rng.Uniform(), min_weight = 0.02 * rng.Uniform();
    long double z = 0;
    std::vector<long double> e(n);
    for (uint32_t i = 0; i < n; ++i) z += e[i] = std::exp(static_cast<long double>(m - x[i]) / t);
    long double total = 0;
    for (uint32_t i = 0; i < n; ++i) total += e[i] = std::max<long double>(e[i] / z, min_weight);
    std::vector<double> w(n);
    const double got_z = SoftMinWeights(x.data(), w.data(), n, m, 1 / t, min_weight);
    EXPECT_NEAR(got_z, static_cast<double>(z), 1e-14 * n);
    double sum = 0;
    for (uint32_t i = 0; i < n; ++i) {
      EXPECT_NEAR(w[i], static_cast<double>(e[i] / total), 1e-15) << "n=" << n << " i=" << i;
      EXPECT_GE(w[i], min_weight / static_cast<double>(total) * (1 - 1e-15));
      sum += w[i];
    }
    EXPECT_NEAR(sum, 1, 1e-14);
  }
}

TEST(VectorExpTest, AbsDiffSumMatchesThePlainSum) {
  Random rng(3);
  for (uint32_t n = 0; n <= 37; ++n) {
    std::vector<float> a(n);
    std::vector<double> b(n);
    long double plain = 0;
    for (uint32_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(rng.Uniform());
      b[i] = rng.Uniform();
      plain += std::abs(static_cast<long double>(a[i]) - b[i]);
    }
    const double got = AbsDiffSum(a.data(), b.data(), n);
    EXPECT_NEAR(got, static_cast<double>(plain), 1e-15 * (n + 1)) << "n=" << n;
    if (internal::HasAvx2()) {
      EXPECT_EQ(std::bit_cast<uint64_t>(internal::AbsDiffSumAvx2(a.data(), b.data(), n)),
                std::bit_cast<uint64_t>(internal::AbsDiffSumPortable(a.data(), b.data(), n)));
    }
  }
}

TEST(VectorExpTest, UnderflowingShareStaysZeroWithoutAFloor) {
  // exp(-2000) underflows: with min_weight 0 that next hop gets exactly 0, the rest share 1.
  const std::vector<double> x = {1, 1001, 1, 1, 1};
  std::vector<double> w(x.size());
  const double z = SoftMinWeights(x.data(), w.data(), 5, 1, 2, 0);
  EXPECT_EQ(z, 4);
  EXPECT_EQ(w[1], 0);
  for (size_t i : {0, 2, 3, 4}) EXPECT_EQ(w[i], 0.25);
  // With a floor it is kept at the floor (before normalisation).
  SoftMinWeights(x.data(), w.data(), 5, 1, 2, 0.01);
  EXPECT_DOUBLE_EQ(w[1], 0.01 / 1.01);
}

// Shares given as products (the factored way) give the weights SoftMinWeights gives from the
// costs, to rounding, in every version to the bit; the sum is the shares' sum.
TEST(VectorExpTest, ShareWeightsMatchSoftMinWeights) {
  Random rng(17);
  for (uint32_t n = 1; n <= 43; ++n) {
    const double t = 0.05 + rng.Uniform(), min_weight = 0.02 * rng.Uniform() + 1e-4;
    // Potentials up to psi / T ~ 580: the sum gets as small as 1e-252, still in range.
    const double offset = 500 * t * rng.Uniform();
    std::vector<double> x(n), e(n);
    double m = std::numeric_limits<double>::infinity();
    for (uint32_t i = 0; i < n; ++i) {
      x[i] = offset + 4 * rng.Uniform();
      m = std::min(m, x[i]);
      const double c = 0.5 + 0.5 * rng.Uniform();  // the arc's part of x, then the node's
      e[i] = std::exp(-c / t) * std::exp(-(x[i] - c) / t);
    }
    std::vector<double> want(n), got(n), avx(n);
    SoftMinWeights(x.data(), want.data(), n, m, 1 / t, min_weight);
    const double z = ShareWeights(e.data(), got.data(), n, min_weight);
    long double sum = 0;
    for (double v : e) sum += v;
    EXPECT_NEAR(z / static_cast<double>(sum), 1, 1e-14) << "n=" << n;
    for (uint32_t i = 0; i < n; ++i) {
      // x / T in the hundreds: a rounding of x (1e-13 at 500) moves a share by 1e-13 / T.
      EXPECT_NEAR(got[i], want[i], 1e-10) << "n=" << n << " i=" << i;
    }
    if (internal::HasAvx2()) {
      const double za =
          internal::ShareWeightsAvx2(e.data(), avx.data(), n, min_weight, nullptr, nullptr);
      const double zp =
          internal::ShareWeightsPortable(e.data(), got.data(), n, min_weight, nullptr, nullptr);
      EXPECT_EQ(std::bit_cast<uint64_t>(za), std::bit_cast<uint64_t>(zp)) << "n=" << n;
      EXPECT_TRUE(SameBits(avx, got)) << "n=" << n;
    }
  }
}

// Outside its range (or with a NaN share) ShareWeights leaves the weights to the caller.
TEST(VectorExpTest, ShareWeightsWritesNothingOutOfRange) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const std::vector<double>& e :
       {std::vector<double>{1e-280, 1e-300, 0}, std::vector<double>{1e11, 1, 1, 1, 1},
        std::vector<double>{0.5, nan, 0.25, 0.25, 0.5}}) {
    std::vector<double> w(e.size(), -1);
    const double z = ShareWeights(e.data(), w.data(), static_cast<uint32_t>(e.size()), 0.01);
    EXPECT_FALSE(z >= kShareZMin && z <= kShareZMax) << z;
    for (double v : w) EXPECT_EQ(v, -1);
  }
  // The edges of the range are in it.
  std::vector<double> e = {kShareZMin}, w(1);
  EXPECT_EQ(ShareWeights(e.data(), w.data(), 1, 0.01), kShareZMin);
  EXPECT_EQ(w[0], 1);
}

// With the installed weights, ShareWeights also returns the hysteresis sum: AbsDiffSum over
// the weights it wrote, to the bit, in every version; without a weight written it leaves
// `diff` alone.
TEST(VectorExpTest, ShareWeightsTakesTheDiffAsAbsDiffSum) {
  Random rng(23);
  for (uint32_t n = 1; n <= 41; ++n) {
    std::vector<double> e(n), w(n);
    std::vector<float> installed(n);
    for (uint32_t i = 0; i < n; ++i) {
      e[i] = rng.Uniform() * std::exp(-30 * rng.Uniform());
      installed[i] = static_cast<float>(rng.Uniform() / n);
    }
    double diff = -1;
    ShareWeights(e.data(), w.data(), n, 1e-3, installed.data(), &diff);
    EXPECT_EQ(std::bit_cast<uint64_t>(diff),
              std::bit_cast<uint64_t>(AbsDiffSum(installed.data(), w.data(), n)))
        << "n=" << n;
    std::vector<double> plain(n);
    ShareWeights(e.data(), plain.data(), n, 1e-3);
    EXPECT_TRUE(SameBits(w, plain)) << "n=" << n;  // the weights do not depend on it
    if (internal::HasAvx2()) {
      std::vector<double> wa(n), wp(n);
      double da = -1, dp = -2;
      internal::ShareWeightsAvx2(e.data(), wa.data(), n, 1e-3, installed.data(), &da);
      internal::ShareWeightsPortable(e.data(), wp.data(), n, 1e-3, installed.data(), &dp);
      EXPECT_EQ(std::bit_cast<uint64_t>(da), std::bit_cast<uint64_t>(dp)) << "n=" << n;
      EXPECT_TRUE(SameBits(wa, wp)) << "n=" << n;
    }
  }
  std::vector<double> e = {1e-300, 1e-300}, w(2, -1);
  std::vector<float> installed = {0.5f, 0.5f};
  double diff = -1;
  ShareWeights(e.data(), w.data(), 2, 1e-3, installed.data(), &diff);
  EXPECT_EQ(diff, -1);
  EXPECT_EQ(w[0], -1);
}

// RunWeights against what it stands for: a loop over the arcs one by one (min, max, products)
// and ShareWeights over the products. Bit for bit, in every version, for every run length,
// with and without installed weights, and with a sum out of range (nothing written).
TEST(VectorExpTest, RunWeightsIsTheLoopAndShareWeights) {
  Random rng(31);
  const double inf = std::numeric_limits<double>::infinity();
  for (uint32_t r = 1; r <= kMaxRun; ++r) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<double> cost(r), twin(r), arc_boltz(r), dist(r), floor(r), phi(r), boltz(r);
      std::vector<int32_t> link(r);
      std::vector<float> installed(r);
      for (uint32_t i = 0; i < r; ++i) {
        cost[i] = 0.5 + rng.Uniform();
        twin[i] = rng.Uniform() < 0.1 ? inf : 0.5 + rng.Uniform();
        arc_boltz[i] = std::exp(-cost[i] / 0.4);
        dist[i] = 10 * rng.Uniform();
        floor[i] = dist[i] - 1e-9 * std::max(1.0, dist[i]);
        phi[i] = dist[i] + rng.Uniform();
        // variant 2: shares far below the range, so the sum is out of it.
        boltz[i] = (variant == 2 ? 1e-290 : 1.0) * std::exp(-30 * rng.Uniform());
        link[i] = static_cast<int32_t>(rng.Below(1000));
        installed[i] = static_cast<float>(rng.Uniform() / r);
      }
      double best = inf, top = -inf, slack = -inf;
      std::vector<double> shares(r);
      for (uint32_t i = 0; i < r; ++i) {
        best = std::min(cost[i] + dist[i], best);
        top = std::max(phi[i], top);
        slack = std::max(floor[i] - twin[i], slack);
        shares[i] = arc_boltz[i] * boltz[i];
      }
      const float* inst = variant == 1 ? installed.data() : nullptr;
      std::vector<double> want(r, -1);
      double want_diff = 0;
      const double want_z = ShareWeights(shares.data(), want.data(), r, 2e-3, inst, &want_diff);
      const RunInputs in{cost.data(), twin.data(),  arc_boltz.data(), link.data(),
                         dist.data(), floor.data(), phi.data(),       boltz.data()};
      auto check = [&](const RunResult& got, const std::vector<double>& w,
                       const std::vector<int32_t>& got_link, const char* version) {
        const std::string where = std::string(version) + " r=" + std::to_string(r) +
                                  " variant=" + std::to_string(variant);
        EXPECT_EQ(got.best, best) << where;
        EXPECT_EQ(got.top, top) << where;
        EXPECT_EQ(got.slack, slack) << where;
        EXPECT_EQ(std::bit_cast<uint64_t>(got.z), std::bit_cast<uint64_t>(want_z)) << where;
        EXPECT_TRUE(SameBits(w, want)) << where;
        if (inst != nullptr) {
          EXPECT_EQ(std::bit_cast<uint64_t>(got.diff), std::bit_cast<uint64_t>(want_diff)) << where;
        }
        EXPECT_EQ(got_link, link) << where;
      };
      std::vector<double> w(r, -1);
      std::vector<int32_t> got_link(r);
      check(RunWeights(in, r, 2e-3, inst, w.data(), got_link.data()), w, got_link, "chosen");
      std::fill(w.begin(), w.end(), -1);
      check(internal::RunWeightsPortable(in, r, 2e-3, inst, w.data(), got_link.data()), w, got_link,
            "portable");
      if (internal::HasAvx2()) {
        std::fill(w.begin(), w.end(), -1);
        check(internal::RunWeightsAvx2(in, r, 2e-3, inst, w.data(), got_link.data()), w, got_link,
              "avx2");
      }
    }
  }
}

}  // namespace
}  // namespace dar
