#include "learn/policy_model.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <utility>

#include "base/files.h"
#include "base/status_macros.h"
#include "core/vector_exp.h"
#include "fmt/format.h"

namespace dar::learn {
namespace {

constexpr char kFormat[] = "dar-policy";
constexpr double kSmallestWeight = 1e-9;  // WeightsFromLogits' floor when min_weight is 0

// FNV-1a, 64 bits, over the little-endian bytes of each number (model_checksum below).
class Fnv1a64 {
 public:
  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= b[i];
      h_ *= 0x100000001b3ULL;
    }
  }
  void Int(int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i)
      b[i] = static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * i));
    Bytes(b, 8);
  }
  void Float(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    unsigned char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(bits >> (8 * i));
    Bytes(b, 4);
  }
  void Double(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    Int(static_cast<int64_t>(bits));
  }
  void Floats(const std::vector<float>& v) {
    for (float x : v) Float(x);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

absl::Status Refused(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(fmt::format("model file {}: {}", path, why));
}

// Reads an array of finite numbers at `key` of `j` into `out`.
absl::Status ReadFloats(const nlohmann::json& j, const std::string& key, std::vector<float>& out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) {
    return absl::InvalidArgumentError(fmt::format("\"{}\": missing or not an array", key));
  }
  out.clear();
  out.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& x = (*it)[i];
    if (!x.is_number()) {
      return absl::InvalidArgumentError(fmt::format("\"{}\"[{}]: not a number", key, i));
    }
    const double v = x.get<double>();
    if (!std::isfinite(v) || std::abs(v) > 3.4e38) {
      return absl::InvalidArgumentError(fmt::format("\"{}\"[{}]: not a finite float", key, i));
    }
    out.push_back(static_cast<float>(v));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ReadInt(const nlohmann::json& j, const std::string& key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    return absl::InvalidArgumentError(fmt::format("\"{}\": missing or not an integer", key));
  }
  return it->get<int64_t>();
}

absl::Status AllFinite(const std::vector<float>& v, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return absl::InvalidArgumentError(fmt::format("{}[{}] is not finite", what, i));
    }
  }
  return absl::OkStatus();
}

// Line (1-based) of byte `offset` of `text`.
size_t LineOf(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + offset, '\n'));
}

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

}  // namespace

// Over the numbers in file order: format_version and seed (int64), each feature_mean and
// feature_scale (float32), per layer in and out (int64), weight and bias (float32), and
// min_weight (float64); all little-endian.
std::string PolicyModelChecksum(const PolicyModel& m) {
  Fnv1a64 h;
  h.Int(kModelFormatVersion);
  h.Int(static_cast<int64_t>(m.seed));
  h.Floats(m.feature_mean);
  h.Floats(m.feature_scale);
  for (const DenseLayer& l : m.layers) {
    h.Int(l.in);
    h.Int(l.out);
    h.Floats(l.weight);
    h.Floats(l.bias);
  }
  h.Double(m.min_weight);
  return fmt::format("fnv1a64:{:016x}", h.value());
}

absl::Status PolicyModel::Validate() const {
  if (feature_mean.size() != kPolicyFeatures || feature_scale.size() != kPolicyFeatures) {
    return absl::InvalidArgumentError(
        fmt::format("feature_mean and feature_scale: must have {} entries, have {} and {}",
                    static_cast<int>(kPolicyFeatures), feature_mean.size(), feature_scale.size()));
  }
  RETURN_IF_ERROR(AllFinite(feature_mean, "feature_mean"));
  for (size_t i = 0; i < feature_scale.size(); ++i) {
    if (!std::isfinite(feature_scale[i]) || feature_scale[i] <= 0) {
      return absl::InvalidArgumentError(
          fmt::format("feature_scale[{}]: must be finite and > 0, got {}", i, feature_scale[i]));
    }
  }
  if (layers.empty()) return absl::InvalidArgumentError("layers: none");
  int in = kPolicyFeatures;
  for (size_t i = 0; i < layers.size(); ++i) {
    const DenseLayer& l = layers[i];
    if (l.in != in || l.out < 1) {
      return absl::InvalidArgumentError(
          fmt::format("layers[{}]: in {} out {}; expected in {} (the {}) and out >= 1", i, l.in,
                      l.out, in, i == 0 ? "number of features" : "previous layer's out"));
    }
    if (l.weight.size() != static_cast<size_t>(l.in) * static_cast<size_t>(l.out) ||
        l.bias.size() != static_cast<size_t>(l.out)) {
      return absl::InvalidArgumentError(
          fmt::format("layers[{}]: {} weights and {} biases for in {} out {}", i, l.weight.size(),
                      l.bias.size(), l.in, l.out));
    }
    if (i > 0 && l.in > kMaxInt8LayerInput) {
      return absl::InvalidArgumentError(fmt::format(
          "layers[{}]: in {} is wider than INT8 inference takes ({}: a wider layer's int32 "
          "sum of 16-bit activations times INT8 weights could overflow)",
          i, l.in, kMaxInt8LayerInput));
    }
    RETURN_IF_ERROR(AllFinite(l.weight, fmt::format("layers[{}].weight", i)));
    RETURN_IF_ERROR(AllFinite(l.bias, fmt::format("layers[{}].bias", i)));
    in = l.out;
  }
  if (layers.back().out != 1) {
    return absl::InvalidArgumentError(
        fmt::format("layers[{}]: the last layer must have out 1, has {}", layers.size() - 1,
                    layers.back().out));
  }
  if (!(min_weight >= 0 && min_weight < 0.5)) {
    return absl::InvalidArgumentError(
        fmt::format("min_weight: must be in [0, 0.5), got {}", min_weight));
  }
  return absl::OkStatus();
}

absl::StatusOr<PolicyModel> LoadPolicyModel(const std::string& path) {
  absl::StatusOr<std::string> read = ReadFile(path);
  if (!read.ok()) return Refused(path, std::string(read.status().message()));
  const std::string text = std::move(*read);
  nlohmann::json j;
  // nlohmann reports bad JSON by exception; caught here, it goes no further.
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return Refused(
        path, fmt::format("bad JSON at line {}: {}", LineOf(text, e.byte), std::string(e.what())));
  } catch (const nlohmann::json::exception& e) {
    return Refused(path, fmt::format("bad JSON: {}", std::string(e.what())));
  }
  if (!j.is_object()) return Refused(path, "bad JSON: not an object");
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kFormat) {
    return Refused(path, fmt::format("not a {} file (\"format\": {})", kFormat,
                                     format == j.end() ? "missing" : format->dump()));
  }
  absl::StatusOr<int64_t> version = ReadInt(j, "format_version");
  if (!version.ok()) return Refused(path, std::string(version.status().message()));
  if (*version != kModelFormatVersion) {
    return Refused(path, fmt::format("format_version {}: this build reads version {}", *version,
                                     kModelFormatVersion));
  }
  auto features = j.find("features");
  if (features == j.end() || !features->is_array()) {
    return Refused(path, "\"features\": missing or not an array");
  }
  std::vector<std::string> expected(PolicyFeatureNames().begin(), PolicyFeatureNames().end());
  std::vector<std::string> got;
  for (const nlohmann::json& x : *features)
    got.push_back(x.is_string() ? x.get<std::string>() : x.dump());
  if (got != expected) {
    std::string g, e;
    for (const auto& x : got) g += (g.empty() ? "" : ",") + x;
    for (const auto& x : expected) e += (e.empty() ? "" : ",") + x;
    return Refused(path,
                   fmt::format("trained on other features [{}]; this build computes [{}]", g, e));
  }

  PolicyModel m;
  auto str = [&j](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  m.name = str("name");
  m.created_by = str("created_by");
  if (auto it = j.find("seed"); it != j.end() && it->is_number_unsigned()) {
    m.seed = it->get<uint64_t>();
  } else if (it != j.end() && it->is_number_integer()) {
    m.seed = static_cast<uint64_t>(it->get<int64_t>());
  }
  if (auto it = j.find("config"); it != j.end()) m.config = *it;
  if (absl::Status s = ReadFloats(j, "feature_mean", m.feature_mean); !s.ok()) {
    return Refused(path, std::string(s.message()));
  }
  if (absl::Status s = ReadFloats(j, "feature_scale", m.feature_scale); !s.ok()) {
    return Refused(path, std::string(s.message()));
  }
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array()) {
    return Refused(path, "\"layers\": missing or not an array");
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    const nlohmann::json& lj = (*layers)[i];
    if (!lj.is_object()) return Refused(path, fmt::format("layers[{}]: not an object", i));
    DenseLayer l;
    absl::StatusOr<int64_t> in = ReadInt(lj, "in"), out = ReadInt(lj, "out");
    if (!in.ok() || !out.ok() || *in < 1 || *out < 1 || *in > (1 << 16) || *out > (1 << 16)) {
      return Refused(path, fmt::format("layers[{}]: \"in\" and \"out\" must be integers in "
                                       "[1, 65536]",
                                       i));
    }
    l.in = static_cast<int>(*in);
    l.out = static_cast<int>(*out);
    for (const char* key : {"weight", "bias"}) {
      if (absl::Status s = ReadFloats(lj, key, key[0] == 'w' ? l.weight : l.bias); !s.ok()) {
        return Refused(path, fmt::format("layers[{}]: {}", i, std::string(s.message())));
      }
    }
    m.layers.push_back(std::move(l));
  }
  auto mw = j.find("min_weight");
  if (mw == j.end() || !mw->is_number()) {
    return Refused(path, "\"min_weight\": missing or not a number");
  }
  m.min_weight = mw->get<double>();
  if (absl::Status s = m.Validate(); !s.ok()) return Refused(path, std::string(s.message()));
  auto checksum = j.find("checksum");
  if (checksum == j.end() || !checksum->is_string()) {
    return Refused(path, "\"checksum\": missing");
  }
  const std::string want = PolicyModelChecksum(m);
  if (checksum->get<std::string>() != want) {
    return Refused(path, fmt::format("checksum {} does not match its numbers ({}): the file was "
                                     "cut short or edited",
                                     checksum->get<std::string>(), want));
  }
  return m;
}

PolicyModel LinearPolicyModel(std::string name, const std::array<float, kPolicyFeatures>& weights,
                              float bias) {
  PolicyModel m;
  m.name = std::move(name);
  m.feature_mean.assign(kPolicyFeatures, 0);
  m.feature_scale.assign(kPolicyFeatures, 1);
  DenseLayer l;
  l.in = kPolicyFeatures;
  l.out = 1;
  l.weight.assign(weights.begin(), weights.end());
  l.bias = {bias};
  m.layers.push_back(std::move(l));
  return m;
}

absl::Status SavePolicyModel(const PolicyModel& model, const std::string& path) {
  if (absl::Status s = model.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("model for {}: {}", path, std::string(s.message())));
  }
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["format_version"] = kModelFormatVersion;
  j["name"] = model.name;
  j["created_by"] = model.created_by;
  j["seed"] = model.seed;
  j["config"] = nlohmann::ordered_json::parse(model.config.is_null() ? "{}" : model.config.dump());
  j["features"] =
      std::vector<std::string>(PolicyFeatureNames().begin(), PolicyFeatureNames().end());
  j["feature_mean"] = model.feature_mean;
  j["feature_scale"] = model.feature_scale;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const DenseLayer& l : model.layers) {
    nlohmann::ordered_json lj;
    lj["in"] = l.in;
    lj["out"] = l.out;
    lj["weight"] = l.weight;
    lj["bias"] = l.bias;
    layers.push_back(std::move(lj));
  }
  j["layers"] = std::move(layers);
  j["min_weight"] = model.min_weight;
  j["checksum"] = PolicyModelChecksum(model);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) {
      return absl::UnavailableError(fmt::format("cannot write {} ({})", tmp, std::strerror(errno)));
    }
    f << j.dump(1) << '\n';
    f.flush();
    if (!f) return absl::UnavailableError(fmt::format("write error on {}", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::UnavailableError(fmt::format("cannot rename {} to {} ({})", tmp, path, why));
  }
  return absl::OkStatus();
}

void LogitsFloat(const PolicyModel& model, absl::Span<const float> features,
                 absl::Span<float> logits) {
  const size_t rows = logits.size();
  int widest = kPolicyFeatures;
  for (const DenseLayer& l : model.layers) widest = std::max(widest, l.out);
  std::vector<float> a(widest), b(widest);
  for (size_t r = 0; r < rows; ++r) {
    const float* x = features.data() + r * kPolicyFeatures;
    for (int i = 0; i < kPolicyFeatures; ++i) {
      a[i] = (x[i] - model.feature_mean[i]) / model.feature_scale[i];
    }
    for (size_t li = 0; li < model.layers.size(); ++li) {
      const DenseLayer& l = model.layers[li];
      const bool relu = li + 1 < model.layers.size();
      for (int o = 0; o < l.out; ++o) {
        const float* w = l.weight.data() + static_cast<size_t>(o) * l.in;
        float acc = 0;
        for (int i = 0; i < l.in; ++i) acc += w[i] * a[i];
        acc += l.bias[o];
        b[o] = relu ? std::max(acc, 0.0f) : acc;
      }
      std::swap(a, b);
    }
    logits[r] = a[0];
  }
}

namespace {

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

int RoundUp(int n, int m) { return (n + m - 1) / m * m; }

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

namespace {

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

}  // namespace

// Where the kernels find the first layer's link half of each row: Fill(ctx, first, m, slot)
// makes those of rows [first, first + m) and returns the array that holds them, row r's at
// slot[r - first] * out1_padded.
struct LinkHalves {
  const float* (*fill)(void* ctx, size_t first, int m, uint32_t* slot);
  void* ctx;
};

namespace {

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

using RowsKernel = void (*)(const KernelNet&, const char*, size_t, size_t, LinkHalves, float*,
                            BlockScratch);

}  // namespace

bool QuantizedPolicyModel::Supports(Kernel kernel) {
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (kernel) {
    case Kernel::kAuto:
    case Kernel::kPortable:
      return true;
    case Kernel::kAvx2:
      return avx2;
    case Kernel::kAvx2VnniVex:
      return avx2 && __builtin_cpu_supports("avxvnni");
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
  run(net, rows, stride, n, halves, logits, s);
}

namespace {

// Each decision's exps (in `w`) divided by their sum, floored at min_weight, divided by the
// floored sum. The sums run in candidate order; the divisions, element by element, are the
// same in any order, so they are in loops of their own, which the compiler vectorises.
inline void NormaliseRowsLoop(absl::Span<const PolicyDecision> decisions, double min_weight,
                              double* w) {
  for (const PolicyDecision& d : decisions) {
    double* row = w + d.first;
    const uint32_t n = d.count;
    double sum = 0;
    for (uint32_t i = 0; i < n; ++i) sum += row[i];
    for (uint32_t i = 0; i < n; ++i) row[i] = std::max(row[i] / sum, min_weight);
    double floored = 0;
    for (uint32_t i = 0; i < n; ++i) floored += row[i];
    for (uint32_t i = 0; i < n; ++i) row[i] /= floored;
  }
}

void NormaliseRows(absl::Span<const PolicyDecision> decisions, double min_weight, double* w) {
  NormaliseRowsLoop(decisions, min_weight, w);
}

__attribute__((target("avx2"))) void NormaliseRowsAvx2(absl::Span<const PolicyDecision> decisions,
                                                       double min_weight, double* w) {
  NormaliseRowsLoop(decisions, min_weight, w);
}

}  // namespace

void WeightsFromLogits(const PolicyBatch& batch, absl::Span<const float> logits, double min_weight,
                       absl::Span<double> weights) {
  WeightsFromLogits(batch.decisions, logits, min_weight, weights);
}

void WeightsFromLogits(absl::Span<const PolicyDecision> decisions, absl::Span<const float> logits,
                       double min_weight, absl::Span<double> weights) {
  if (decisions.empty()) return;
  // The forwarders' validator refuses a zero weight, which softmax can underflow to.
  min_weight = std::max(min_weight, kSmallestWeight);
  // Each logit less its row's largest, then the exps (within 2 ulp) in one vector pass where
  // the rows tile the weights (as PolicyFeatureBuilder's do), else row by row.
  bool tiled = true;
  const uint32_t start = decisions.front().first;
  uint32_t next = start;
  for (const PolicyDecision& d : decisions) {
    double top = -std::numeric_limits<double>::infinity();
    for (uint32_t i = d.first; i < d.first + d.count; ++i) top = std::max<double>(top, logits[i]);
    for (uint32_t i = d.first; i < d.first + d.count; ++i) {
      weights[i] = static_cast<double>(logits[i]) - top;
    }
    tiled = tiled && d.first == next;
    next = d.first + d.count;
  }
  if (tiled) {
    ExpNonPositive(weights.data() + start, weights.data() + start, next - start);
  } else {
    for (const PolicyDecision& d : decisions) {
      ExpNonPositive(weights.data() + d.first, weights.data() + d.first, d.count);
    }
  }
  static const auto normalise = __builtin_cpu_supports("avx2") ? NormaliseRowsAvx2 : NormaliseRows;
  normalise(decisions, min_weight, weights.data());
}

namespace {

// Whether the batch's decisions cover its candidates one after the other, in order.
bool TilesInOrder(const PolicyBatch& batch) {
  uint32_t next = 0;
  for (const PolicyDecision& d : batch.decisions) {
    if (d.first != next) return false;
    next += d.count;
  }
  return next == batch.candidates.size();
}

}  // namespace

LearnedPolicy::LearnedPolicy(PolicyModel model, std::string path, Precision precision)
    : model_(std::move(model)), path_(std::move(path)), precision_(precision), quantized_(model_) {}

absl::StatusOr<std::unique_ptr<LearnedPolicy>> LearnedPolicy::Load(const std::string& path,
                                                                   Precision precision) {
  ASSIGN_OR_RETURN(PolicyModel model, LoadPolicyModel(path));
  return std::make_unique<LearnedPolicy>(std::move(model), path, precision);
}

absl::Status LearnedPolicy::Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                                  Executor& executor) {
  const size_t n = batch.candidates.size();
  if (weights.size() != n) {
    return absl::InvalidArgumentError(
        fmt::format("{} weights for {} candidates", weights.size(), n));
  }
  logits_.resize(n);
  // Half h is decisions [row[h], row[h + 1]) and their candidates [cut[h], cut[h + 1]): two
  // halves for INT8 where there are threads, the batch is large enough to be worth one, and
  // its decisions tile its candidates in order (PolicyFeatureBuilder's do); FP32, the
  // reference, runs whole.
  const std::vector<PolicyDecision>& decisions = batch.decisions;
  std::array<size_t, 3> row = {0, decisions.size(), decisions.size()};
  std::array<size_t, 3> cut = {0, n, n};
  constexpr size_t kSmallestSplit = 4096;
  if (precision_ == Precision::kInt8 && executor.concurrency() >= 2 && n >= kSmallestSplit &&
      TilesInOrder(batch)) {
    const auto middle =
        std::partition_point(decisions.begin(), decisions.end(),
                             [n](const PolicyDecision& d) { return d.first < n / 2; });
    if (middle != decisions.end()) {
      row[1] = static_cast<size_t>(middle - decisions.begin());
      cut[1] = middle->first;
    }
  }
  const int halves = row[1] < decisions.size() ? 2 : 1;
  std::atomic<bool> finite = true;
  executor.RunEach(halves, [&](int h) {
    const absl::Span<float> logits = absl::MakeSpan(logits_).subspan(cut[h], cut[h + 1] - cut[h]);
    if (precision_ == Precision::kInt8) {
      quantized_.BatchLogits(batch, cut[h], logits, workspaces_[h]);
    } else {
      features_.resize(n * kPolicyFeatures);
      for (size_t i = 0; i < n; ++i) {
        std::copy(batch.candidates[i].features.begin(), batch.candidates[i].features.end(),
                  features_.begin() + static_cast<std::ptrdiff_t>(i * kPolicyFeatures));
      }
      LogitsFloat(model_, features_, logits);
    }
    for (float x : logits) {
      if (!std::isfinite(x)) finite = false;
    }
    if (!finite) return;
    WeightsFromLogits(absl::MakeConstSpan(decisions).subspan(row[h], row[h + 1] - row[h]), logits_,
                      model_.min_weight, weights);
  });
  if (!finite) return absl::InternalError("the network gave a non-finite logit");
  return absl::OkStatus();
}

std::string LearnedPolicy::Describe() const {
  return fmt::format("{} model {} ({})", precision_ == Precision::kInt8 ? "int8" : "float",
                     model_.name.empty() ? "(unnamed)" : model_.name, path_);
}

}  // namespace dar::learn
