#include "learn/policy_model.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <utility>

#include "base/files.h"
#include "base/fnv.h"
#include "base/status_macros.h"
#include "fmt/format.h"

namespace dar::learn {
namespace {

constexpr char kFormat[] = "dar-policy";

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
  return 1 + static_cast<size_t>(std::count(
                 text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
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

}  // namespace dar::learn
