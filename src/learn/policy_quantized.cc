// QuantizedPolicyModel (learn/policy_model.h): the INT8 model made from a PolicyModel, the
// first layer's link halves computed once per link, and the dispatch to the row kernels
// (policy_kernels.cc).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <utility>
#include <vector>

#include "learn/policy_kernels.h"
#include "learn/policy_model.h"

namespace dar::learn {
namespace {

// Quantises the weights `w` (n values) to symmetric INT8 levels [-127, 127] in `q` (held
// as int16, which the kernels multiply) with the scale it returns (w ~ q * scale, scale =
// max |w| / 127). Zero if all of w is zero.
float QuantiseWeights(const float* w, int n, int16_t* q) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::abs(w[i]));
  if (amax == 0) {
    std::fill(q, q + n, int16_t{0});
    return 0;
  }
  constexpr float kWeightLevels = 127.0f;
  const float inv = kWeightLevels / amax;
  for (int i = 0; i < n; ++i) {
    q[i] =
        static_cast<int16_t>(std::clamp(std::nearbyint(w[i] * inv), -kWeightLevels, kWeightLevels));
  }
  return amax / kWeightLevels;
}

int RoundUp(int n, int m) { return (n + m - 1) / m * m; }

// The fastest kernel this processor runs (chosen once).
QuantizedPolicyModel::Kernel ChosenKernel() {
  using Kernel = QuantizedPolicyModel::Kernel;
  static const Kernel kernel = [] {
    for (Kernel k :
         {Kernel::kAvx512Vnni, Kernel::kAvx2VnniVex, Kernel::kAvx2VnniEvex, Kernel::kAvx2}) {
      if (QuantizedPolicyModel::Supports(k)) return k;
    }
    return Kernel::kPortable;
  }();
  return kernel;
}

}  // namespace

QuantizedPolicyModel::QuantizedPolicyModel(const PolicyModel& model) {
  const DenseLayer& first = model.layers.front();
  relu1_ = model.layers.size() > 1;
  out1_padded_ = RoundUp(first.out, relu1_ ? 32 : 8);
  w1_.assign(static_cast<size_t>(kPolicyFeatures) * out1_padded_, 0);
  b1_.assign(out1_padded_, 0);
  for (int o = 0; o < first.out; ++o) {
    double bias = first.bias[o];
    for (int j = 0; j < kPolicyFeatures; ++j) {
      const double w = first.weight[static_cast<size_t>(o) * kPolicyFeatures + j];
      w1_[static_cast<size_t>(j) * out1_padded_ + o] =
          static_cast<float>(w / model.feature_scale[j]);
      bias -= w * model.feature_mean[j] / model.feature_scale[j];
    }
    b1_[o] = static_cast<float>(bias);
  }
  // The row half of the first layer, each number 8 times, for the 8-rows-at-once kernel.
  constexpr size_t kRowTerms = std::size(kRowFeatures) + 1;
  wide1_.resize(static_cast<size_t>(out1_padded_) * kRowTerms * 8);
  for (int o = 0; o < out1_padded_; ++o) {
    for (size_t t = 0; t < kRowTerms; ++t) {
      const float v =
          t == 0 ? b1_[o] : w1_[static_cast<size_t>(kRowFeatures[t - 1]) * out1_padded_ + o];
      std::fill_n(wide1_.begin() + static_cast<std::ptrdiff_t>((o * kRowTerms + t) * 8), 8, v);
    }
  }
  widest_ = out1_padded_;
  for (size_t li = 1; li < model.layers.size(); ++li) {
    const DenseLayer& l = model.layers[li];
    const bool last = li + 1 == model.layers.size();
    if (l.in > kMaxInt8LayerInput) {
      std::fprintf(stderr, "QuantizedPolicyModel: layers[%zu] has in %d > %d (not validated)\n", li,
                   l.in, kMaxInt8LayerInput);
      std::abort();
    }
    Layer q;
    q.in = l.in;
    q.out = l.out;
    q.in_padded = RoundUp(l.in, 32);
    q.out_padded = RoundUp(l.out, last ? 8 : 32);
    q.weight.assign(static_cast<size_t>(q.out_padded) * q.in_padded, 0);
    q.scale.assign(q.out_padded, 0);
    q.bias.assign(q.out_padded, 0);
    std::copy(l.bias.begin(), l.bias.end(), q.bias.begin());
    for (int o = 0; o < l.out; ++o) {
      const float* w = l.weight.data() + static_cast<size_t>(o) * l.in;
      q.scale[o] = QuantiseWeights(w, l.in, q.weight.data() + static_cast<size_t>(o) * q.in_padded);
    }
    // The same weights by groups of 8 outputs and pairs of inputs: one 32-byte load holds
    // the pair of 8 outputs that one broadcast pair of inputs meets.
    const int pairs = q.in_padded / 2;
    q.packed.assign(static_cast<size_t>(q.out_padded) * q.in_padded, 0);
    for (int o = 0; o < l.out; ++o) {
      for (int i = 0; i < l.in; ++i) {
        q.packed[((static_cast<size_t>(o / 8) * pairs + i / 2) * 8 + o % 8) * 2 + i % 2] =
            q.weight[static_cast<size_t>(o) * q.in_padded + i];
      }
    }
    // And each output's pairs, each repeated 8 times (one register's worth); zeros up to
    // out_padded, which the 8-rows-at-once kernel reads whole.
    q.broadcast.assign(static_cast<size_t>(q.out_padded) * q.in_padded * 8, 0);
    for (int o = 0; o < l.out; ++o) {
      for (int i = 0; i < q.in_padded; ++i) {
        for (int lane = 0; lane < 8; ++lane) {
          q.broadcast[((static_cast<size_t>(o) * pairs + i / 2) * 8 + lane) * 2 + i % 2] =
              q.weight[static_cast<size_t>(o) * q.in_padded + i];
        }
      }
    }
    widest_ = std::max({widest_, q.in_padded, q.out_padded});
    layers_.push_back(std::move(q));
  }
}

void QuantizedPolicyModel::LinkPartial(const float* x, float* out) const {
  for (int o = 0; o < out1_padded_; ++o) {
    float l = 0;
    for (int j : kLinkFeatures) l = l + w1_[static_cast<size_t>(j) * out1_padded_ + o] * x[j];
    out[o] = l;
  }
}

bool QuantizedPolicyModel::Supports(Kernel kernel) {
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (kernel) {
    case Kernel::kAuto:
    case Kernel::kPortable:
      return true;
    case Kernel::kAvx2:
      return avx2;
    case Kernel::kAvx2VnniVex:
#if defined(__clang__) && __clang_major__ < 15
      return false;  // clang 14 (clang-tidy's) knows no "avxvnni"; g++ builds the product
#else
      return avx2 && __builtin_cpu_supports("avxvnni");
#endif
    case Kernel::kAvx2VnniEvex:
      return avx2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
    case Kernel::kAvx512Vnni:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

void QuantizedPolicyModel::Logits(absl::Span<const float> features, absl::Span<float> logits,
                                  Kernel kernel) const {
  // Every row's link half, computed as it comes.
  struct Rows {
    const QuantizedPolicyModel* model;
    const float* features;
    std::vector<float> partials;
  } rows{this, features.data(), std::vector<float>(static_cast<size_t>(kBlock) * out1_padded_)};
  const LinkHalves halves{[](void* ctx, size_t first, int m, uint32_t* slot) -> const float* {
                            auto* rows = static_cast<Rows*>(ctx);
                            const int width = rows->model->out1_padded_;
                            for (int r = 0; r < m; ++r) {
                              rows->model->LinkPartial(
                                  rows->features + (first + r) * kPolicyFeatures,
                                  rows->partials.data() + static_cast<size_t>(r) * width);
                              slot[r] = static_cast<uint32_t>(r);
                            }
                            return rows->partials.data();
                          },
                          &rows};
  Run(reinterpret_cast<const char*>(features.data()), kPolicyFeatures * sizeof(float),
      logits.size(), halves, logits.data(), kernel);
}

void QuantizedPolicyModel::BatchLogits(const PolicyBatch& batch, absl::Span<float> logits,
                                       Workspace& ws, Kernel kernel) const {
  BatchLogits(batch, 0, logits, ws, kernel);
}

void QuantizedPolicyModel::BatchLogits(const PolicyBatch& batch, size_t begin,
                                       absl::Span<float> logits, Workspace& ws,
                                       Kernel kernel) const {
  // A new call number marks every link's slot stale (stamps restart when it wraps).
  if (++ws.call == 0) {
    for (Workspace::Link& l : ws.links) l.stamp = 0;
    ws.call = 1;
  }
  ws.slots = 0;
  ws.partials.clear();
  struct Rows {
    const QuantizedPolicyModel* model;
    const PolicyCandidate* candidates;  // from `begin`
    Workspace* ws;
    size_t links;  // batch.link_features.size()
  } rows{this, batch.candidates.data() + begin, &ws, batch.link_features.size()};
  if (rows.links > 0) {
    // The batch promises that its candidates' link features are their links': each link's
    // half once, in slot = link id, and no check per candidate (a candidate without a link,
    // or with one past the list, gets a slot past them from LinkSlot).
    ws.partials.resize(rows.links * out1_padded_);
    std::array<float, kPolicyFeatures> x{};
    for (size_t l = 0; l < rows.links; ++l) {
      std::copy(batch.link_features[l].begin(), batch.link_features[l].end(),
                x.begin() + kFeatLinkDelay);
      LinkPartial(x.data(), ws.partials.data() + l * out1_padded_);
    }
    ws.slots = static_cast<uint32_t>(rows.links);
  }
  const LinkHalves halves{[](void* ctx, size_t first, int m, uint32_t* slot) -> const float* {
                            auto* rows = static_cast<Rows*>(ctx);
                            for (int r = 0; r < m; ++r) {
                              const PolicyCandidate& c = rows->candidates[first + r];
                              slot[r] = c.link >= 0 && static_cast<size_t>(c.link) < rows->links
                                            ? static_cast<uint32_t>(c.link)
                                            : rows->model->LinkSlot(c, *rows->ws);
                            }
                            return rows->ws->partials.data();
                          },
                          &rows};
  Run(reinterpret_cast<const char*>(rows.candidates) + offsetof(PolicyCandidate, features),
      sizeof(PolicyCandidate), logits.size(), halves, logits.data(), kernel);
}

uint32_t QuantizedPolicyModel::LinkSlot(const PolicyCandidate& c, Workspace& ws) const {
  constexpr int kLink = std::size(kLinkFeatures);
  const float* x = c.features.data();
  std::array<uint32_t, kLink> bits;
  for (int k = 0; k < kLink; ++k) bits[k] = std::bit_cast<uint32_t>(x[kLinkFeatures[k]]);
  // A candidate without a link (kNoLink) gets a slot of its own.
  Workspace::Link* link = nullptr;
  if (c.link >= 0) {
    const auto l = static_cast<size_t>(c.link);
    if (l >= ws.links.size()) ws.links.resize(l + 1);
    link = &ws.links[l];
    // The link has a slot: reuse it if its features are these, bit for bit.
    uint32_t differ = link->stamp ^ ws.call;  // (std::array's == calls memcmp)
    for (int k = 0; k < kLink; ++k) differ |= link->features[k] ^ bits[k];
    if (differ == 0) return link->slot;
  }
  const uint32_t slot = ws.slots++;
  ws.partials.resize(static_cast<size_t>(ws.slots) * out1_padded_);
  LinkPartial(x, ws.partials.data() + static_cast<size_t>(slot) * out1_padded_);
  if (link != nullptr) *link = Workspace::Link{ws.call, slot, bits};
  return slot;
}

void QuantizedPolicyModel::Run(const char* rows, size_t stride, size_t n, const LinkHalves& halves,
                               float* logits, Kernel kernel) const {
  if (!Supports(kernel)) {
    std::fprintf(stderr, "QuantizedPolicyModel: this processor cannot run the kernel asked for\n");
    std::abort();
  }
  std::vector<KernelLayer> layers;
  for (const Layer& l : layers_) {
    layers.push_back(KernelLayer{l.in_padded, l.out, l.out_padded, l.weight.data(), l.packed.data(),
                                 l.broadcast.data(), l.scale.data(), l.bias.data()});
  }
  const KernelNet net{out1_padded_, relu1_, w1_.data(), b1_.data(), wide1_.data(), layers};
  // Thread-local: the kernels run with no allocation after the first call on a thread (the
  // threads of an executor's pool live as long as it, so theirs are kept from call to call).
  thread_local std::vector<float> a, b, sx;
  thread_local std::vector<int16_t> q;
  thread_local std::vector<uint32_t> slot;
  const size_t block = static_cast<size_t>(kBlock) * widest_;
  a.assign(block, 0);
  b.assign(block, 0);
  q.assign(block, 0);
  sx.assign(kBlock, 0);
  slot.assign(kBlock, 0);
  const BlockScratch s{widest_, a.data(), b.data(), q.data(), sx.data(), slot.data()};
  if (kernel == Kernel::kAuto) kernel = ChosenKernel();
  // Every hidden layer at most 32 wide: the unrolled kernel.
  bool narrow = relu1_ && out1_padded_ == 32;
  for (const Layer& l : layers_) narrow = narrow && l.in_padded == 32;
  const RowsKernel run = RowsKernelFor(kernel, narrow);
  run(net, rows, stride, n, halves, logits, s);
}

}  // namespace dar::learn
