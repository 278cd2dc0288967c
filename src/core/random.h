// A seeded pseudo-random source (xoshiro256**, seeded through splitmix64).
//
// Every random choice in the engine and the simulator goes through an instance of this class,
// so a seed fixes a run. The generator and the derived distributions are written out here
// (not taken from <random>) so that output is identical across standard libraries.
// Not thread-safe; give each thread its own instance.
#ifndef DAR_CORE_RANDOM_H_
#define DAR_CORE_RANDOM_H_

#include <cmath>
#include <cstdint>

namespace dar {

class Random {
 public:
  explicit Random(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& s : s_) s = SplitMix64(x);
  }

  // Uniform 64-bit value.
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1).
  double Uniform() { return ToUnit(Next()); }
  // The top 53 bits of `bits` as a double in [0, 1).
  static double ToUnit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
  // Exponentially distributed with the given mean.
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }

  // A generator for an independent stream, derived deterministically from this one.
  Random Fork() { return Random(Next()); }

  // The splitmix64 mixing step; also a good 64-bit hash.
  static uint64_t SplitMix64(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  static uint64_t Hash(uint64_t v) { return SplitMix64(v); }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace dar

#endif  // DAR_CORE_RANDOM_H_
