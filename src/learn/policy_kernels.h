// The INT8 row kernels of QuantizedPolicyModel (learn/policy_model.h), internal to learn: what
// they are given (the network's layers as plain arrays, the rows' link halves, scratch) and
// the choice among them. Portable, AVX2 (three ways of multiplying int16 pairs) and AVX-512;
// all give the same logits bit for bit (policy_kernels.cc).
#ifndef DAR_LEARN_POLICY_KERNELS_H_
#define DAR_LEARN_POLICY_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "absl/types/span.h"
#include "core/weight_policy.h"
#include "learn/policy_model.h"

namespace dar::learn {

// The first layer's inputs in two halves: those of the candidate's link (the same in every
// row that uses the link: computed once per link) and those of the row. Every kernel sums
// them in this order, so that all agree bit for bit.
constexpr int kLinkFeatures[] = {kFeatLinkDelay, kFeatLinkQueue, kFeatLinkLoss,
                                 kFeatLinkUtilisation, kFeatLinkUtilisationNow};
constexpr int kRowFeatures[] = {kFeatAnalyticLogit,   kFeatPathDelayRatio, kFeatCapacityShare,
                                kFeatDestinationLoad, kFeatPreviousWeight, kFeatInverseCount};
static_assert(std::size(kLinkFeatures) + std::size(kRowFeatures) == kPolicyFeatures);
// PolicyBatch::link_features holds them in this order.
static_assert(std::size(kLinkFeatures) == kPolicyLinkFeatures &&
              kLinkFeatures[0] == kFeatLinkDelay && kLinkFeatures[1] == kFeatLinkDelay + 1 &&
              kLinkFeatures[2] == kFeatLinkDelay + 2 && kLinkFeatures[3] == kFeatLinkDelay + 3 &&
              kLinkFeatures[4] == kFeatLinkDelay + 4);

constexpr float kLevels = 32767.0f;  // activations are quantised to [0, 32767] (int16)

// What the row kernels need of a layer (QuantizedPolicyModel::Layer is private).
struct KernelLayer {
  int in_padded = 0, out = 0, out_padded = 0;
  const int16_t* weight = nullptr;     // out_padded x in_padded
  const int16_t* packed = nullptr;     // [out_padded / 8][in_padded / 2][8][2]
  const int16_t* broadcast = nullptr;  // [out_padded][in_padded / 2][8][2]
  const float* scale = nullptr;        // out_padded
  const float* bias = nullptr;         // out_padded
};

struct KernelNet {
  int out1_padded = 0;
  bool relu1 = false;
  const float* w1 = nullptr;  // [kPolicyFeatures][out1_padded]
  const float* b1 = nullptr;
  // Per output: b1, then w1 of each of kRowFeatures, each 8 times.
  const float* wide1 = nullptr;
  absl::Span<const KernelLayer> layers;
};

// Rows go through the network in blocks: each stage (a layer, a quantisation) runs over
// every row of the block before the next stage, so that the rows' independent chains of
// work overlap in the processor instead of one row's latency following another's.
constexpr int kBlock = 16;

// Scratch of one block: per row, two float vectors and one of 16-bit activations, each
// `width` wide (the widest padded layer), and the rows' activation scales.
struct BlockScratch {
  int width = 0;
  float* a;
  float* b;
  int16_t* q;
  float* sx;
  uint32_t* slot;  // kBlock
};

// Where the kernels find the first layer's link half of each row: Fill(ctx, first, m, slot)
// makes those of rows [first, first + m) and returns the array that holds them, row r's at
// slot[r - first] * out1_padded.
struct LinkHalves {
  const float* (*fill)(void* ctx, size_t first, int m, uint32_t* slot);
  void* ctx;
};

// Logits of n rows: row r's features at rows + r * stride bytes, their link halves from
// `halves`, into logits[0, n); `s` is the caller's scratch.
using RowsKernel = void (*)(const KernelNet& net, const char* rows, size_t stride, size_t n,
                            LinkHalves halves, float* logits, BlockScratch s);

// The kernel that runs `kernel` (not kAuto): for a network whose hidden layers are all at most
// 32 wide (`narrow`), the unrolled one of that instruction set.
RowsKernel RowsKernelFor(QuantizedPolicyModel::Kernel kernel, bool narrow);

}  // namespace dar::learn

#endif  // DAR_LEARN_POLICY_KERNELS_H_
