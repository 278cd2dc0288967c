#include "learn/policy_model.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "core/status_macros.h"
#include "fmt/format.h"

namespace dar::learn {
namespace {

constexpr char kFormat[] = "dar-policy";
constexpr int kLanes = 16;  // layer widths are padded to a multiple of this for the kernels
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

// The checksum of the model's numbers, in file order: format_version and seed (int64), each
// feature_mean and feature_scale (float32), per layer in and out (int64), weight and bias
// (float32), and min_weight (float64); all little-endian.
std::string ModelChecksum(const PolicyModel& m) {
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

// Quantises `x` (n values) into `q` with the scale it returns (x ~ q * scale): symmetric
// int8 levels [-127, 127] (scale max |x| / 127), or, for a vector known to be >= 0 (after a
// ReLU), unsigned levels [0, 255] (scale max x / 255): twice the resolution where the sign
// bit would be wasted. Zero if all of x is zero.
template <typename Q>
float QuantiseVector(const float* x, int n, bool non_negative, Q* q) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::abs(x[i]));
  if (amax == 0) {
    std::fill(q, q + n, Q{0});
    return 0;
  }
  const float levels = non_negative ? 255.0f : 127.0f;
  const float inv = levels / amax;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<Q>(std::clamp(std::nearbyint(x[i] * inv), -levels, levels));
  }
  return amax / levels;
}

// Dot product of int8 weights and 8-bit activations (held widened, as int16) of length n (a
// multiple of 16), accumulated in int32. A plain loop: the compiler multiplies and adds pairs
// of int16 lanes (pmaddwd). No product overflows int16 (255 * 127), no sum int32.
int32_t Dot8(const int8_t* w, const int16_t* a, int n) {
  int32_t acc = 0;
  for (int i = 0; i < n; ++i) acc += static_cast<int16_t>(w[i]) * a[i];
  return acc;
}

}  // namespace

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
  std::ifstream f(path, std::ios::binary);
  if (!f) return Refused(path, fmt::format("cannot read it ({})", std::strerror(errno)));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Refused(path, "read error");
  const std::string text = ss.str();
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
  const std::string want = ModelChecksum(m);
  if (checksum->get<std::string>() != want) {
    return Refused(path, fmt::format("checksum {} does not match its numbers ({}): the file was "
                                     "cut short or edited",
                                     checksum->get<std::string>(), want));
  }
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
  j["checksum"] = ModelChecksum(model);
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

QuantizedPolicyModel::QuantizedPolicyModel(const PolicyModel& model) {
  feature_mean_ = model.feature_mean;
  feature_inv_scale_.resize(model.feature_scale.size());
  for (size_t i = 0; i < model.feature_scale.size(); ++i) {
    feature_inv_scale_[i] = 1.0f / model.feature_scale[i];
  }
  for (const DenseLayer& l : model.layers) {
    Layer q;
    q.in = l.in;
    q.out = l.out;
    q.in_padded = (l.in + kLanes - 1) / kLanes * kLanes;
    q.out_padded = (l.out + kLanes - 1) / kLanes * kLanes;
    q.weight.assign(static_cast<size_t>(q.out) * q.in_padded, 0);
    q.scale.assign(q.out_padded, 0);
    q.bias.assign(q.out_padded, 0);
    std::copy(l.bias.begin(), l.bias.end(), q.bias.begin());
    for (int o = 0; o < l.out; ++o) {
      const float* w = l.weight.data() + static_cast<size_t>(o) * l.in;
      q.scale[o] = QuantiseVector(w, l.in, /*non_negative=*/false,
                                  q.weight.data() + static_cast<size_t>(o) * q.in_padded);
    }
    // The same weights, widened and interleaved by input pairs for the AVX2 kernel.
    q.pairs.assign(static_cast<size_t>(q.in_padded) * q.out_padded, 0);
    for (int o = 0; o < l.out; ++o) {
      for (int i = 0; i < l.in; ++i) {
        q.pairs[(static_cast<size_t>(i / 2) * q.out_padded + o) * 2 + i % 2] =
            q.weight[static_cast<size_t>(o) * q.in_padded + i];
      }
    }
    layers_.push_back(std::move(q));
  }
}

namespace {

// What the row kernels need of a layer (QuantizedPolicyModel::Layer is private).
struct KernelLayer {
  int in = 0, in_padded = 0, out = 0, out_padded = 0;
  const int8_t* weight = nullptr;  // out x in_padded
  const int16_t* pairs = nullptr;  // in_padded / 2 x out_padded x 2
  const float* scale = nullptr;    // out_padded
  const float* bias = nullptr;     // out_padded
};

// Scratch of the row kernels; `a` holds the normalised features of a row on entry (zero past
// kPolicyFeatures up to the first layer's in_padded). Layers alternate between a and b, so
// the logit ends in a[0] after an even number of layers, b[0] after an odd one.
struct KernelScratch {
  float* a;
  float* b;
  int16_t* q;
  int32_t* acc;
};

void RowPortable(const std::vector<KernelLayer>& layers, KernelScratch s) {
  for (size_t li = 0; li < layers.size(); ++li) {
    const KernelLayer& l = layers[li];
    const bool relu = li + 1 < layers.size();
    // The first layer's input (normalised features) has a sign; the others follow a ReLU.
    const float sx = QuantiseVector(s.a, l.in, /*non_negative=*/li > 0, s.q);
    std::fill(s.q + l.in, s.q + l.in_padded, 0);
    for (int o = 0; o < l.out; ++o) {
      const int32_t acc = Dot8(l.weight + static_cast<size_t>(o) * l.in_padded, s.q, l.in_padded);
      const float y = static_cast<float>(acc) * l.scale[o] * sx + l.bias[o];
      s.b[o] = relu ? std::max(y, 0.0f) : y;
    }
    std::fill(s.b + l.out, s.b + l.out_padded, 0.0f);
    std::swap(s.a, s.b);
  }
}

// Eight outputs of a layer from their int32 sums: acc * scale * sx + bias, ReLU'd if asked.
__attribute__((target("avx2"))) inline void StoreOutputs(__m256i acc, const float* scale, __m256 sx,
                                                         const float* bias, bool relu, float* out) {
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_loadu_ps(scale)), sx);
  y = _mm256_add_ps(y, _mm256_loadu_ps(bias));
  if (relu) y = _mm256_max_ps(y, _mm256_setzero_ps());
  _mm256_storeu_ps(out, y);
}

// The same arithmetic, bit for bit, in AVX2: inputs quantised 8 lanes at a time (rounding to
// nearest even, as nearbyint does), and the weights of 8 outputs multiplied with a broadcast
// pair of inputs and summed in int32 per instruction (vpmaddwd), accumulated over the pairs.
// No FMA: the float steps round as the portable ones do.
__attribute__((target("avx2"))) void RowAvx2(const std::vector<KernelLayer>& layers,
                                             KernelScratch s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (size_t li = 0; li < layers.size(); ++li) {
    const KernelLayer& l = layers[li];
    const bool relu = li + 1 < layers.size();
    const float levels = li > 0 ? 255.0f : 127.0f;
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < l.in_padded; i += 8) {
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(s.a + i)));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    float sx = 0;
    if (amax == 0) {
      std::fill(s.q, s.q + l.in_padded, 0);
    } else {
      const __m256 inv = _mm256_set1_ps(levels / amax);
      const __m256 hi = _mm256_set1_ps(levels), lo = _mm256_set1_ps(-levels);
      for (int i = 0; i < l.in_padded; i += 8) {
        const __m256 v =
            _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(s.a + i), inv), lo), hi);
        const __m256i iv = _mm256_cvtps_epi32(v);
        _mm_storeu_si128(
            reinterpret_cast<__m128i*>(s.q + i),
            _mm_packs_epi32(_mm256_castsi256_si128(iv), _mm256_extracti128_si256(iv, 1)));
      }
      sx = amax / levels;
    }
    const __m256 vsx = _mm256_set1_ps(sx);
    const size_t stride = static_cast<size_t>(l.out_padded) * 2;  // int16s per input pair
    if (l.out == 1) {
      // One output (the logit): a dot product of the int8 row, widened, with the inputs.
      __m256i acc = _mm256_setzero_si256();
      for (int i = 0; i < l.in_padded; i += 16) {
        const __m256i w =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(l.weight + i)));
        acc = _mm256_add_epi32(
            acc,
            _mm256_madd_epi16(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.q + i))));
      }
      __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
      sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4e));
      sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xb1));
      const float y = static_cast<float>(_mm_cvtsi128_si32(sum)) * l.scale[0] * sx + l.bias[0];
      s.b[0] = relu ? std::max(y, 0.0f) : y;
      std::swap(s.a, s.b);
      continue;
    }
    // 16 outputs at a time (out_padded is a multiple of 16): two independent accumulators,
    // one broadcast of the input pair for both.
    for (int ob = 0; ob < l.out_padded; ob += 16) {
      __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
      const int16_t* w = l.pairs + ob * 2;
      for (int p = 0; p < l.in_padded / 2; ++p, w += stride) {
        int32_t pair;
        std::memcpy(&pair, s.q + 2 * p, 4);
        const __m256i x = _mm256_set1_epi32(pair);
        acc0 = _mm256_add_epi32(
            acc0, _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)), x));
        acc1 = _mm256_add_epi32(
            acc1,
            _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16)), x));
      }
      StoreOutputs(acc0, l.scale + ob, vsx, l.bias + ob, relu, s.b + ob);
      StoreOutputs(acc1, l.scale + ob + 8, vsx, l.bias + ob + 8, relu, s.b + ob + 8);
    }
    std::swap(s.a, s.b);
  }
}

}  // namespace

void QuantizedPolicyModel::Logits(absl::Span<const float> features,
                                  absl::Span<float> logits) const {
  static const bool kAvx2 = __builtin_cpu_supports("avx2");
  Run(features, logits, kAvx2);
}

void QuantizedPolicyModel::LogitsPortable(absl::Span<const float> features,
                                          absl::Span<float> logits) const {
  Run(features, logits, /*avx2=*/false);
}

void QuantizedPolicyModel::Run(absl::Span<const float> features, absl::Span<float> logits,
                               bool avx2) const {
  std::vector<KernelLayer> layers;
  int widest = kLanes;
  for (const Layer& l : layers_) {
    layers.push_back(KernelLayer{l.in, l.in_padded, l.out, l.out_padded, l.weight.data(),
                                 l.pairs.data(), l.scale.data(), l.bias.data()});
    widest = std::max({widest, l.in_padded, l.out_padded});
  }
  std::vector<float> a(widest, 0), b(widest, 0);
  std::vector<int16_t> q(widest, 0);
  std::vector<int32_t> acc(widest, 0);
  const float* result = layers.size() % 2 == 1 ? b.data() : a.data();
  for (size_t r = 0; r < logits.size(); ++r) {
    const float* x = features.data() + r * kPolicyFeatures;
    for (int i = 0; i < kPolicyFeatures; ++i) {
      a[i] = (x[i] - feature_mean_[i]) * feature_inv_scale_[i];
    }
    std::fill(a.begin() + kPolicyFeatures, a.end(), 0.0f);
    const KernelScratch s{a.data(), b.data(), q.data(), acc.data()};
    if (avx2) {
      RowAvx2(layers, s);
    } else {
      RowPortable(layers, s);
    }
    logits[r] = result[0];
  }
}

void WeightsFromLogits(const PolicyBatch& batch, absl::Span<const float> logits, double min_weight,
                       absl::Span<double> weights) {
  // The forwarders' validator refuses a zero weight, which softmax can underflow to.
  min_weight = std::max(min_weight, kSmallestWeight);
  for (const PolicyDecision& d : batch.decisions) {
    double top = -std::numeric_limits<double>::infinity();
    for (uint32_t i = d.first; i < d.first + d.count; ++i) top = std::max<double>(top, logits[i]);
    double sum = 0;
    for (uint32_t i = d.first; i < d.first + d.count; ++i) {
      weights[i] = std::exp(static_cast<double>(logits[i]) - top);
      sum += weights[i];
    }
    double floored = 0;
    for (uint32_t i = d.first; i < d.first + d.count; ++i) {
      weights[i] = std::max(weights[i] / sum, min_weight);
      floored += weights[i];
    }
    for (uint32_t i = d.first; i < d.first + d.count; ++i) weights[i] /= floored;
  }
}

LearnedPolicy::LearnedPolicy(PolicyModel model, std::string path, Precision precision)
    : model_(std::move(model)), path_(std::move(path)), precision_(precision), quantized_(model_) {}

absl::StatusOr<std::unique_ptr<LearnedPolicy>> LearnedPolicy::Load(const std::string& path,
                                                                   Precision precision) {
  ASSIGN_OR_RETURN(PolicyModel model, LoadPolicyModel(path));
  return std::make_unique<LearnedPolicy>(std::move(model), path, precision);
}

absl::Status LearnedPolicy::Weigh(const PolicyBatch& batch, absl::Span<double> weights) {
  const size_t n = batch.candidates.size();
  if (weights.size() != n) {
    return absl::InvalidArgumentError(
        fmt::format("{} weights for {} candidates", weights.size(), n));
  }
  features_.resize(n * kPolicyFeatures);
  logits_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    std::copy(batch.candidates[i].features.begin(), batch.candidates[i].features.end(),
              features_.begin() + static_cast<std::ptrdiff_t>(i * kPolicyFeatures));
  }
  if (precision_ == Precision::kInt8) {
    quantized_.Logits(features_, absl::MakeSpan(logits_));
  } else {
    LogitsFloat(model_, features_, absl::MakeSpan(logits_));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(logits_[i])) {
      return absl::InternalError("the network gave a non-finite logit");
    }
  }
  WeightsFromLogits(batch, logits_, model_.min_weight, weights);
  return absl::OkStatus();
}

std::string LearnedPolicy::Describe() const {
  return fmt::format("{} model {} ({})", precision_ == Precision::kInt8 ? "int8" : "float",
                     model_.name.empty() ? "(unnamed)" : model_.name, path_);
}

}  // namespace dar::learn
