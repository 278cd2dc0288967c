// Vector kernels of the diffusion engine: exp over non-positive arguments and the soft-minimum
// weights of one node, its innermost work (once per downhill arc and destination): from costs
// (SoftMinWeights, one exp per arc) or from shares already factored into products
// (ShareWeights, no exp); and, where a node's downhill arcs lie side by side toward nodes that
// do too, its whole relaxation four arcs at a time (RunWeights). Also ln over positive
// arguments (LogPositive), for the learned policy's features (core/policy_features.h).
//
// Each kernel has a portable version (SSE2, which every x86-64 has, or plain C++ elsewhere)
// and, on x86-64, an AVX2 version chosen at run time when the CPU has it. Both versions do the
// same IEEE operations in the same order — no fused multiply-add, no reassociation — so they
// return bit-identical results: a simulation gives the same output on any machine.
// A caller in a hot loop takes the versions for its CPU once (ChosenKernels).
// Thread-safe: pure functions.
#ifndef DAR_CORE_VECTOR_EXP_H_
#define DAR_CORE_VECTOR_EXP_H_

#include <cstdint>

namespace dar {

// out[i] = exp(y[i]) for y[i] <= 0, within 2 ulp; 0 below -708 (where exp leaves the normal
// range). `y` and `out` may be the same array. REQUIRES: y[i] <= 0 or NaN-free.
void ExpNonPositive(const double* y, double* out, uint32_t n);

// out[i] = ln(x[i]) within 2 ulp, for x[i] positive, finite and normal (anything else gives
// an unspecified finite or NaN value). `x` and `out` may be the same array.
void LogPositive(const double* x, double* out, uint32_t n);

// The soft-minimum weights of one node's next hops. x[i] is cost + potential through next hop
// i and m = min x. With e[i] = exp((m - x[i]) * inv_t) (the best is exactly 1) and
// z = sum of e, writes w[i] = max(e[i] / z, min_weight) / total, where total is the sum of the
// floored shares, so the weights sum to 1. Returns z: the node's soft minimum is
// m - T ln z. A share that underflows stays 0 if min_weight is 0. Sums are taken four lanes
// at a time, then lanes 0+1 and 2+3, then the two; the same in every version.
// REQUIRES: n >= 1, inv_t > 0, every x[i] finite and >= m, m one of them. w may alias x.
double SoftMinWeights(const double* x, double* w, uint32_t n, double m, double inv_t,
                      double min_weight);

// The range of z in which ShareWeights writes weights. With a min_weight of at least
// kShareMinWeightFloor and factors of each e[i] at most kShareZMax, every share that escapes
// the floor is then a normal double and so are its factors: rounding is all that differs from
// SoftMinWeights.
inline constexpr double kShareZMin = 1e-270;
inline constexpr double kShareZMax = 1e10;
inline constexpr double kShareMinWeightFloor = 1e-20;

// The weights of one node's next hops from their unnormalised shares e[i] >= 0 (NaN allowed):
// with z = sum of e, writes w[i] = max(e[i] / z, min_weight) / total as SoftMinWeights does,
// summing in the same order, and returns z. If z is outside [kShareZMin, kShareZMax] or NaN,
// writes nothing (the caller computes the weights another way). w may alias e. e is read
// one element at a time, so it may have just been written that way (no store-forwarding
// stall). If `installed` is not null and the weights are written, also sets *diff to
// AbsDiffSum(installed, w, n), bit for bit (the row's hysteresis test, in the same pass).
// REQUIRES: n >= 1; diff is not null if installed is not.
double ShareWeights(const double* e, double* w, uint32_t n, double min_weight,
                    const float* installed = nullptr, double* diff = nullptr);

// Sum of |a[i] - b[i]| over i < n, a widened to double: how far a row's weights moved. Summed
// four lanes at a time like SoftMinWeights, so within n ulp of the plain sum.
double AbsDiffSum(const float* a, const double* b, uint32_t n);

// One node's downhill arcs toward a destination where they are a run of r consecutive arc
// slots leading to r consecutive nodes: the arcs' arrays (cost, twin cost, exp(-cost / T),
// link) and the nodes' (cheapest-path cost, its floor, potential, exp(-psi / T)), each from
// the run's first element.
struct RunInputs {
  const double *cost, *twin_cost, *arc_boltz;
  const int32_t* link;
  const double *dist, *dist_floor, *phi, *boltz;
};
struct RunResult {
  double best;   // min(cost + dist)
  double top;    // max phi
  double slack;  // max(dist_floor - twin_cost)
  double z;      // the sum of the shares arc_boltz * boltz, as ShareWeights returns it
  double diff;   // as ShareWeights sets it (with `installed`, z in range)
};
inline constexpr uint32_t kMaxRun = 64;
// A node's whole factored relaxation over such a run, four arcs at a time, the shares kept in
// the kernel (not stored for a second call to read back): copies the links to `link` and
// writes what ShareWeights(shares, w, r, min_weight, installed, &diff) would, bit for bit
// (nothing to w if z is out of range). The gathered min and maxima are exact, so they too
// equal what a loop over the arcs one by one gives.
// REQUIRES: 1 <= r <= kMaxRun.
RunResult RunWeights(const RunInputs& in, uint32_t r, double min_weight, const float* installed,
                     double* w, int32_t* link);

// The versions of the kernels for this CPU, chosen once. A caller in a hot loop keeps a
// reference and calls through it: the functions above check which version to take each call.
struct VectorKernels {
  void (*exp_non_positive)(const double* y, double* out, uint32_t n);
  void (*log_positive)(const double* x, double* out, uint32_t n);
  double (*soft_min_weights)(const double* x, double* w, uint32_t n, double m, double inv_t,
                             double min_weight);
  double (*share_weights)(const double* e, double* w, uint32_t n, double min_weight,
                          const float* installed, double* diff);
  double (*abs_diff_sum)(const float* a, const double* b, uint32_t n);
  RunResult (*run_weights)(const RunInputs& in, uint32_t r, double min_weight,
                           const float* installed, double* w, int32_t* link);
};
const VectorKernels& ChosenKernels();

// The versions behind the functions above, for tests and benchmarks.
namespace vector_exp_internal {
bool HasAvx2();
void ExpNonPositivePortable(const double* y, double* out, uint32_t n);
void LogPositivePortable(const double* x, double* out, uint32_t n);
double SoftMinWeightsPortable(const double* x, double* w, uint32_t n, double m, double inv_t,
                              double min_weight);
double ShareWeightsPortable(const double* e, double* w, uint32_t n, double min_weight,
                            const float* installed, double* diff);
double AbsDiffSumPortable(const float* a, const double* b, uint32_t n);
RunResult RunWeightsPortable(const RunInputs& in, uint32_t r, double min_weight,
                             const float* installed, double* w, int32_t* link);
// REQUIRES: HasAvx2().
void ExpNonPositiveAvx2(const double* y, double* out, uint32_t n);
void LogPositiveAvx2(const double* x, double* out, uint32_t n);
double SoftMinWeightsAvx2(const double* x, double* w, uint32_t n, double m, double inv_t,
                          double min_weight);
double ShareWeightsAvx2(const double* e, double* w, uint32_t n, double min_weight,
                        const float* installed, double* diff);
double AbsDiffSumAvx2(const float* a, const double* b, uint32_t n);
RunResult RunWeightsAvx2(const RunInputs& in, uint32_t r, double min_weight, const float* installed,
                         double* w, int32_t* link);
}  // namespace vector_exp_internal

}  // namespace dar

#endif  // DAR_CORE_VECTOR_EXP_H_
