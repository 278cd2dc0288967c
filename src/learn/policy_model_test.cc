// The learned policy's model file, its FP32 and INT8 inference (every kernel against the
// portable one, bit for bit) and LearnedPolicy. One file: the kernels' agreement tests share
// the models and batches the file tests make.
#include "learn/policy_model.h"

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "learn/policy_audit.h"

namespace dar::learn {
namespace {

using ::testing::HasSubstr;

// A model with random weights: `hidden` ReLU layers of `width`, then one logit.
PolicyModel RandomModel(uint64_t seed, int hidden = 2, int width = 32) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  PolicyModel m;
  m.name = "random";
  m.created_by = "policy_model_test";
  m.seed = seed;
  m.config = {{"hidden", hidden}, {"width", width}};
  for (int i = 0; i < kPolicyFeatures; ++i) {
    m.feature_mean.push_back(0.1f * normal(rng));
    m.feature_scale.push_back(0.5f + std::abs(normal(rng)));
  }
  int in = kPolicyFeatures;
  for (int l = 0; l <= hidden; ++l) {
    DenseLayer d;
    d.in = in;
    d.out = l == hidden ? 1 : width;
    const float s = 1.0f / std::sqrt(static_cast<float>(in));
    for (int i = 0; i < d.in * d.out; ++i) d.weight.push_back(s * normal(rng));
    for (int i = 0; i < d.out; ++i) d.bias.push_back(0.1f * normal(rng));
    m.layers.push_back(std::move(d));
    in = m.layers.back().out;
  }
  m.min_weight = 0.001;
  return m;
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (std::string("dar_policy_model_test_") + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
}

// The text of a saved RandomModel, as JSON to edit.
nlohmann::json SavedJson(const std::string& path) {
  EXPECT_TRUE(SavePolicyModel(RandomModel(1), path).ok());
  return nlohmann::json::parse(ReadAll(path));
}

TEST(PolicyModelTest, SaveLoadRoundTrip) {
  const std::string path = TempPath("round_trip.json");
  const PolicyModel m = RandomModel(7);
  ASSERT_TRUE(SavePolicyModel(m, path).ok());
  absl::StatusOr<PolicyModel> back = LoadPolicyModel(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->name, m.name);
  EXPECT_EQ(back->created_by, m.created_by);
  EXPECT_EQ(back->seed, m.seed);
  EXPECT_EQ(back->config, m.config);
  EXPECT_EQ(back->feature_mean, m.feature_mean);
  EXPECT_EQ(back->feature_scale, m.feature_scale);
  ASSERT_EQ(back->layers.size(), m.layers.size());
  for (size_t i = 0; i < m.layers.size(); ++i) {
    EXPECT_EQ(back->layers[i].weight, m.layers[i].weight);  // bit for bit
    EXPECT_EQ(back->layers[i].bias, m.layers[i].bias);
  }
  EXPECT_EQ(back->min_weight, m.min_weight);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(path);
}

TEST(PolicyModelTest, SaveRefusesAnInconsistentModel) {
  PolicyModel m = RandomModel(1);
  m.layers[1].bias.pop_back();
  absl::Status s = SavePolicyModel(m, TempPath("bad.json"));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("layers[1]"));
}

// Every refusal names the file and says what is wrong.
TEST(PolicyModelTest, LoadRefusesBadFilesAndSaysWhy) {
  const std::string path = TempPath("refuse.json");
  auto expect_refused = [&path](const std::string& what) {
    absl::StatusOr<PolicyModel> m = LoadPolicyModel(path);
    ASSERT_FALSE(m.ok()) << "accepted a file with " << what;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(path));
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(what));
  };
  std::filesystem::remove(path);
  expect_refused("cannot open");

  const nlohmann::json good = SavedJson(path);
  const std::string text = ReadAll(path);
  WriteAll(path, text.substr(0, text.size() / 2));
  expect_refused("bad JSON at line");
  WriteAll(path, "{\n\"format\": \"dar-policy\",\n\"format_version\": 1,\n oops }");
  expect_refused("bad JSON at line 4");

  auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    WriteAll(path, j.dump(1));
  };
  edited([](nlohmann::json& j) { j["format"] = "onnx"; });
  expect_refused("not a dar-policy file");
  edited([](nlohmann::json& j) { j["format_version"] = 2; });
  expect_refused("format_version 2: this build reads version 1");
  edited([](nlohmann::json& j) { j["features"][3] = "link_jitter"; });
  expect_refused("other features");
  edited([](nlohmann::json& j) { j["features"].erase(j["features"].size() - 1); });
  expect_refused("other features");
  edited([](nlohmann::json& j) { j["layers"][1]["in"] = 31; });
  expect_refused("layers[1]: in 31");
  edited([](nlohmann::json& j) { j["layers"][0]["weight"].erase(0); });
  expect_refused("layers[0]");
  edited([](nlohmann::json& j) { j["layers"].back()["out"] = 2; });
  expect_refused("layers[2]");
  edited([](nlohmann::json& j) { j["feature_scale"][2] = 0; });
  expect_refused("feature_scale[2]");
  // JSON has no NaN: nlohmann writes null for it, which is no number.
  edited([](nlohmann::json& j) { j["layers"][0]["bias"][5] = std::nan(""); });
  expect_refused("layers[0]: \"bias\"[5]: not a number");
  WriteAll(path, std::string(ReadAll(path)).replace(ReadAll(path).find("null"), 4, "1e999"));
  expect_refused("bad JSON");  // nlohmann refuses a number it cannot hold
  edited([](nlohmann::json& j) {
    j["layers"][0]["weight"][0] = j["layers"][0]["weight"][0].get<double>() + 0.5;
  });
  expect_refused("checksum");
  edited([](nlohmann::json& j) { j.erase("checksum"); });
  expect_refused("checksum");
  // The untouched file loads.
  edited([](nlohmann::json&) {});
  EXPECT_TRUE(LoadPolicyModel(path).ok());
  std::filesystem::remove(path);
}

// Random raw features in the ranges weight_policy.h gives them.
std::vector<float> RandomFeatures(std::mt19937_64& rng, size_t rows) {
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> x(rows * kPolicyFeatures);
  for (size_t r = 0; r < rows; ++r) {
    float* f = &x[r * kPolicyFeatures];
    f[kFeatAnalyticLogit] = std::log(std::max(0.001f, u(rng)));
    f[kFeatPathDelayRatio] = 2 * u(rng);
    f[kFeatLinkDelay] = 3 * u(rng);
    f[kFeatLinkQueue] = 10 * u(rng) * u(rng);
    f[kFeatLinkLoss] = 10 * u(rng) * u(rng) * u(rng);
    f[kFeatLinkUtilisation] = u(rng);
    f[kFeatLinkUtilisationNow] = u(rng);
    f[kFeatCapacityShare] = 0.1f + 0.9f * u(rng);
    f[kFeatDestinationLoad] = u(rng);
    f[kFeatPreviousWeight] = u(rng);
    f[kFeatInverseCount] = 1.0f / (2 + static_cast<int>(8 * u(rng)));
  }
  return x;
}

// A batch of `rows` decisions of 2..8 candidates with random features.
PolicyBatch RandomBatch(std::mt19937_64& rng, int rows) {
  PolicyBatch b;
  std::uniform_int_distribution<int> count(2, 8);
  for (int r = 0; r < rows; ++r) {
    PolicyDecision d;
    d.node = r;
    d.destination = 0;
    d.first = static_cast<uint32_t>(b.candidates.size());
    d.count = static_cast<uint32_t>(count(rng));
    const std::vector<float> x = RandomFeatures(rng, d.count);
    for (uint32_t i = 0; i < d.count; ++i) {
      PolicyCandidate c;
      c.link = static_cast<LinkId>(100 + i);
      std::copy(x.begin() + i * kPolicyFeatures, x.begin() + (i + 1) * kPolicyFeatures,
                c.features.begin());
      b.candidates.push_back(c);
    }
    b.decisions.push_back(d);
  }
  return b;
}

std::vector<float> FeaturesOf(const PolicyBatch& batch) {
  std::vector<float> x(batch.candidates.size() * kPolicyFeatures);
  for (size_t i = 0; i < batch.candidates.size(); ++i) {
    std::copy(batch.candidates[i].features.begin(), batch.candidates[i].features.end(),
              x.begin() + static_cast<std::ptrdiff_t>(i * kPolicyFeatures));
  }
  return x;
}

// How INT8 (the fastest kernel) agrees with FP32 on `batch`: the share of decisions with
// the same largest weight, and the largest and mean weight differences.
// INT8 against FP32 on `batch`: the agreement of their weights.
PolicyAgreement Compare(const PolicyModel& m, const PolicyBatch& batch) {
  const QuantizedPolicyModel q(m);
  const size_t n = batch.candidates.size();
  const std::vector<float> x = FeaturesOf(batch);
  std::vector<float> lf(n), lq(n);
  LogitsFloat(m, x, absl::MakeSpan(lf));
  q.Logits(x, absl::MakeSpan(lq));
  std::vector<double> wf(n), wq(n);
  WeightsFromLogits(batch, lf, m.min_weight, absl::MakeSpan(wf));
  WeightsFromLogits(batch, lq, m.min_weight, absl::MakeSpan(wq));
  return CompareWeights(batch, wq, wf);
}

// INT8 against FP32: the same choice in at least 99.2% of rows, weights close; for
// dar-train's default shape (2 hidden layers of 32), one hidden layer of 32 (both run by the
// 8- and 16-rows-at-once kernels) and a wider one (the general kernel). Every kernel gives the same
// logits (Int8KernelsAgreeBitForBit). With random weights their INT8 rounding dominates the choice;
// the weight error bounds are what 16-bit activations achieve (one hidden layer: 99.82%, max
// 0.0026, mean 0.00031; two of 32 and of 64: 99.54% / 99.26%, max 0.0015 / 0.0040, mean 0.00017 /
// 0.00033), and for two layers 8-bit ones exceed them (max 0.0037 / 0.0052, mean 0.00027 /
// 0.00039).
TEST(PolicyModelTest, Int8AgreesWithFloat) {
  const struct {
    int hidden, width;
    double max_error, mean_error;
  } shapes[] = {{1, 32, 0.0035, 0.00040}, {2, 32, 0.0025, 0.00022}, {2, 64, 0.0046, 0.00036}};
  for (const auto& [hidden, width, max_error, mean_error] : shapes) {
    SCOPED_TRACE(::testing::Message() << hidden << " hidden layers of " << width);
    std::mt19937_64 rng(42);
    const PolicyModel m = RandomModel(3, hidden, width);
    const PolicyBatch batch = RandomBatch(rng, 5000);
    // The fastest kernel this processor runs and the portable one agree bit for bit.
    const QuantizedPolicyModel q(m);
    const std::vector<float> x = FeaturesOf(batch);
    std::vector<float> lq(batch.candidates.size()), lp(batch.candidates.size());
    q.Logits(x, absl::MakeSpan(lq));
    q.Logits(x, absl::MakeSpan(lp), QuantizedPolicyModel::Kernel::kPortable);
    EXPECT_EQ(lq, lp);
    const PolicyAgreement a = Compare(m, batch);
    std::printf(
        "%d hidden layers of %d: int8 vs float: same choice in %.2f%% of %lld rows; weight error "
        "max %.4f, mean %.5f\n",
        hidden, width, 100 * a.same_argmax_share(), static_cast<long long>(a.rows),
        a.max_weight_error, a.mean_weight_error());
    EXPECT_EQ(a.rows, static_cast<int64_t>(batch.decisions.size()));
    EXPECT_GE(a.same_argmax_share(), 0.992);
    EXPECT_LT(a.max_weight_error, max_error);
    EXPECT_LT(a.mean_weight_error(), mean_error);
  }
}

// The same with every weight after the first layer already on its channel's INT8 grid
// (k * max |w| / 127), so that quantising the weights loses nothing and what is left is the
// activations' rounding alone. 16-bit activations keep the choice in every row here and the
// weights within 3.1e-5 (mean 2.9e-6); 8-bit ones ([0, 255]) keep it in 99.64% / 99.48%,
// weights within 0.0042 (mean 0.00037): these bounds catch a return to them.
TEST(PolicyModelTest, Int8ActivationsLoseLittleOnGridWeights) {
  for (int width : {32, 64}) {
    SCOPED_TRACE(::testing::Message() << "width " << width);
    std::mt19937_64 rng(43);
    PolicyModel m = RandomModel(4, 2, width);
    for (size_t li = 1; li < m.layers.size(); ++li) {
      DenseLayer& l = m.layers[li];
      for (int o = 0; o < l.out; ++o) {
        float* w = l.weight.data() + static_cast<size_t>(o) * l.in;
        float amax = 0;
        for (int i = 0; i < l.in; ++i) amax = std::max(amax, std::abs(w[i]));
        for (int i = 0; i < l.in; ++i) w[i] = std::nearbyint(w[i] * 127 / amax) * (amax / 127);
      }
    }
    const PolicyAgreement a = Compare(m, RandomBatch(rng, 5000));
    std::printf(
        "width %d, grid weights: int8 vs float: same choice in %.2f%% of rows; weight error max "
        "%.6f, mean %.7f\n",
        width, 100 * a.same_argmax_share(), a.max_weight_error, a.mean_weight_error());
    EXPECT_GE(a.same_argmax_share(), 0.999);
    EXPECT_LT(a.max_weight_error, 1e-4);
    EXPECT_LT(a.mean_weight_error(), 1e-5);
  }
}

using Kernel = QuantizedPolicyModel::Kernel;
constexpr Kernel kKernels[] = {Kernel::kAuto, Kernel::kAvx2, Kernel::kAvx2VnniVex,
                               Kernel::kAvx2VnniEvex, Kernel::kAvx512Vnni};

// A model whose first layer outputs 1 in each of its `width` channels whatever the features
// (zero weights, bias 1), so that every activation of the second layer quantises to 32767;
// then the layers of `outs` (each out, a ReLU but after the last), every weight `w`, bias
// `bias`.
PolicyModel SaturatedModel(int width, const std::vector<int>& outs, float w, float bias) {
  PolicyModel m = RandomModel(1, 0);
  DenseLayer first;
  first.in = kPolicyFeatures;
  first.out = width;
  first.weight.assign(static_cast<size_t>(kPolicyFeatures) * width, 0.0f);
  first.bias.assign(width, 1.0f);
  m.layers = {first};
  for (int out : outs) {
    DenseLayer l;
    l.in = m.layers.back().out;
    l.out = out;
    l.weight.assign(static_cast<size_t>(l.in) * out, w);
    l.bias.assign(out, bias);
    m.layers.push_back(std::move(l));
  }
  return m;
}

// The widest INT8 layer allowed, with every activation at 32767 and every weight at +127 or
// -127 (the largest sums there are), gives in every kernel the logit of the exact sum
// (computed here in int64): no int32 sum overflows. Through the last layer (one output) and
// through a hidden one (8 outputs at a time).
TEST(PolicyModelTest, Int8WidestLayerDoesNotOverflow) {
  std::mt19937_64 rng(10);
  const std::vector<float> x = RandomFeatures(rng, 19);
  std::vector<float> fp(19), portable(19), got(19);
  for (float sign : {1.0f, -1.0f}) {
    SCOPED_TRACE(::testing::Message() << "weights " << sign * 127);
    const PolicyModel m = SaturatedModel(kMaxInt8LayerInput, {1}, sign, 0.25f);
    ASSERT_TRUE(m.Validate().ok()) << m.Validate();
    const QuantizedPolicyModel q(m);
    const int64_t sum = int64_t{kMaxInt8LayerInput} * 32767 * 127 * static_cast<int64_t>(sign);
    ASSERT_LE(std::abs(sum), int64_t{INT32_MAX});
    // The kernels' rescaling: sum * weight scale (1 / 127), * activation scale (1 / 32767),
    // + bias.
    const float want = std::fma(static_cast<float>(sum) * (1.0f / 127), 1.0f / 32767, 0.25f);
    EXPECT_NEAR(want, sign * kMaxInt8LayerInput + 0.25f, 1e-3);
    for (Kernel k : {Kernel::kPortable, Kernel::kAvx2, Kernel::kAvx2VnniVex, Kernel::kAvx2VnniEvex,
                     Kernel::kAvx512Vnni}) {
      if (!QuantizedPolicyModel::Supports(k)) continue;
      q.Logits(x, absl::MakeSpan(got), k);
      EXPECT_THAT(got, ::testing::Each(want)) << "kernel " << static_cast<int>(k);
    }

    // A hidden layer of the widest input: each output is the same extreme sum.
    const PolicyModel deep = SaturatedModel(kMaxInt8LayerInput, {8, 1}, sign, 0.0f);
    const QuantizedPolicyModel qd(deep);
    LogitsFloat(deep, x, absl::MakeSpan(fp));
    qd.Logits(x, absl::MakeSpan(portable), Kernel::kPortable);
    const float expected = sign > 0 ? 8.0f * kMaxInt8LayerInput : 0.0f;  // ReLU'd if negative
    EXPECT_NEAR(fp[0], expected, 1e-2);
    EXPECT_THAT(portable, ::testing::Each(::testing::FloatNear(expected, 1e-2f)));
    for (Kernel k : kKernels) {
      if (!QuantizedPolicyModel::Supports(k)) continue;
      qd.Logits(x, absl::MakeSpan(got), k);
      EXPECT_EQ(got, portable) << "kernel " << static_cast<int>(k);
    }
  }
}

// One input more than kMaxInt8LayerInput in a layer after the first could overflow an int32
// sum: such a model is refused (Validate, Save, Load, naming the layer and the limit).
TEST(PolicyModelTest, RefusesALayerTooWideForInt8) {
  PolicyModel m = SaturatedModel(kMaxInt8LayerInput + 1, {1}, 1.0f, 0.0f);
  absl::Status s = m.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("layers[1]: in 517 is wider than INT8 "
                                                  "inference takes (516"));
  const std::string path = TempPath("too_wide.json");
  s = SavePolicyModel(m, path);
  EXPECT_THAT(std::string(s.message()), HasSubstr("layers[1]: in 517"));
  EXPECT_FALSE(std::filesystem::exists(path));

  // The widest allowed model saves and loads; the same file one input wider is refused.
  ASSERT_TRUE(SavePolicyModel(SaturatedModel(kMaxInt8LayerInput, {1}, 1.0f, 0.0f), path).ok());
  ASSERT_TRUE(LoadPolicyModel(path).ok());
  nlohmann::json j = nlohmann::json::parse(ReadAll(path));
  j["layers"][0]["out"] = kMaxInt8LayerInput + 1;
  j["layers"][0]["bias"].push_back(1.0);
  for (int i = 0; i < kPolicyFeatures; ++i) j["layers"][0]["weight"].push_back(0.0);
  j["layers"][1]["in"] = kMaxInt8LayerInput + 1;
  j["layers"][1]["weight"].push_back(1.0);
  WriteAll(path, j.dump(1));
  absl::StatusOr<PolicyModel> loaded = LoadPolicyModel(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("layers[1]: in 517 is wider"));
  std::filesystem::remove(path);
}

// A batch whose candidates share links the way a cycle's do: every row's candidates are
// links 0..count-1 with those links' features, so the link half is computed once per link.
PolicyBatch SharedLinkBatch(std::mt19937_64& rng, int rows) {
  PolicyBatch b = RandomBatch(rng, rows);
  const std::vector<float> links = RandomFeatures(rng, 8);
  for (const PolicyDecision& d : b.decisions) {
    for (uint32_t i = 0; i < d.count; ++i) {
      PolicyCandidate& c = b.candidates[d.first + i];
      c.link = static_cast<LinkId>(i);
      for (int j = kFeatLinkDelay; j <= kFeatLinkUtilisationNow; ++j) {
        c.features[j] = links[i * kPolicyFeatures + j];
      }
    }
  }
  return b;
}

// Every INT8 kernel this processor runs gives the portable kernel's logits bit for bit, row
// by row (Logits) and batched with the first layer's link half shared (BatchLogits), over
// the shapes the kernels treat apart: no hidden layer, hidden layers of 32 or less (the
// 8-rows-at-once kernel), wider ones (the general one); row counts that leave a partial
// block.
TEST(PolicyModelTest, Int8KernelsAgreeBitForBit) {
  std::mt19937_64 rng(7);
  const struct {
    int hidden, width;
  } shapes[] = {{0, 1}, {1, 32}, {2, 32}, {3, 20}, {1, 48}, {2, 64}};
  for (const auto& shape : shapes) {
    SCOPED_TRACE(::testing::Message() << shape.hidden << " hidden layers of " << shape.width);
    const QuantizedPolicyModel q(RandomModel(11, shape.hidden, shape.width));
    for (int rows : {1, 3, 203}) {
      const PolicyBatch batch = SharedLinkBatch(rng, rows);
      const std::vector<float> x = FeaturesOf(batch);
      const size_t n = batch.candidates.size();
      std::vector<float> portable(n), got(n);
      q.Logits(x, absl::MakeSpan(portable), Kernel::kPortable);
      QuantizedPolicyModel::Workspace ws;
      q.BatchLogits(batch, absl::MakeSpan(got), ws, Kernel::kPortable);
      EXPECT_EQ(got, portable) << "portable, batched";
      for (Kernel k : kKernels) {
        if (!QuantizedPolicyModel::Supports(k)) continue;
        SCOPED_TRACE(::testing::Message() << "kernel " << static_cast<int>(k));
        std::fill(got.begin(), got.end(), 0.0f);
        q.Logits(x, absl::MakeSpan(got), k);
        EXPECT_EQ(got, portable) << "row by row";
        std::fill(got.begin(), got.end(), 0.0f);
        q.BatchLogits(batch, absl::MakeSpan(got), ws, k);
        EXPECT_EQ(got, portable) << "batched";
      }
    }
  }
}

// A link's half of the first layer is shared only between candidates whose link features
// are the same bit for bit, within one call: a link seen with other features in the same
// batch, or in an earlier call with the same workspace, is computed again.
TEST(PolicyModelTest, BatchLogitsSharesALinkOnlyForTheSameFeatures) {
  std::mt19937_64 rng(8);
  const QuantizedPolicyModel q(RandomModel(12));
  QuantizedPolicyModel::Workspace ws;
  for (int call = 0; call < 3; ++call) {
    // RandomBatch: link 100 + i in every row, with other features each time.
    const PolicyBatch batch = RandomBatch(rng, 50);
    std::vector<float> want(batch.candidates.size()), got(batch.candidates.size());
    q.Logits(FeaturesOf(batch), absl::MakeSpan(want));
    q.BatchLogits(batch, absl::MakeSpan(got), ws);
    EXPECT_EQ(got, want) << "call " << call;
  }
  // Candidates without a link are computed each on its own.
  PolicyBatch batch = RandomBatch(rng, 10);
  for (PolicyCandidate& c : batch.candidates) c.link = kNoLink;
  std::vector<float> want(batch.candidates.size()), got(batch.candidates.size());
  q.Logits(FeaturesOf(batch), absl::MakeSpan(want));
  q.BatchLogits(batch, absl::MakeSpan(got), ws);
  EXPECT_EQ(got, want);
}

// A batch that gives its links' features (PolicyBatch::link_features, as
// PolicyFeatureBuilder's do) is run with each link's half computed once, from link_features
// by link id: the logits of the candidates' features with their links' substituted, bit for
// bit, also over a range, for every kernel; a candidate without a link or with one past the
// list counts its own.
TEST(PolicyModelTest, BatchLogitsTakesTheBatchsLinkFeatures) {
  std::mt19937_64 rng(13);
  for (int hidden : {1, 2}) {
    const QuantizedPolicyModel q(RandomModel(14, hidden));
    PolicyBatch batch = SharedLinkBatch(rng, 400);  // links 0..7, the same features by link
    batch.link_features.resize(8);
    for (const PolicyCandidate& c : batch.candidates) {
      std::copy(c.features.begin() + kFeatLinkDelay,
                c.features.begin() + kFeatLinkDelay + kPolicyLinkFeatures,
                batch.link_features[c.link].begin());
    }
    // Link 3's list entry differs from its candidates': the list is what counts.
    batch.link_features[3][kFeatLinkQueue - kFeatLinkDelay] += 0.5f;
    batch.candidates[5].link = kNoLink;
    batch.candidates[6].link = 8;  // past link_features: its own features count
    batch.candidates[6].features[kFeatLinkQueue] += 1;
    PolicyBatch substituted = batch;
    for (PolicyCandidate& c : substituted.candidates) {
      if (c.link < 0 || c.link >= 8) continue;
      std::copy(batch.link_features[c.link].begin(), batch.link_features[c.link].end(),
                c.features.begin() + kFeatLinkDelay);
    }
    std::vector<float> want(batch.candidates.size()), own(batch.candidates.size());
    q.Logits(FeaturesOf(substituted), absl::MakeSpan(want));
    q.Logits(FeaturesOf(batch), absl::MakeSpan(own));
    ASSERT_NE(want, own);  // the test can tell which features were used
    for (Kernel k : kKernels) {
      if (!QuantizedPolicyModel::Supports(k)) continue;
      QuantizedPolicyModel::Workspace ws;
      std::vector<float> got(batch.candidates.size()), part(301);
      q.BatchLogits(batch, absl::MakeSpan(got), ws, k);
      EXPECT_EQ(got, want) << "hidden " << hidden << ", kernel " << static_cast<int>(k);
      q.BatchLogits(batch, 3, absl::MakeSpan(part), ws, k);
      EXPECT_TRUE(std::equal(part.begin(), part.end(), want.begin() + 3));
    }
  }
}

// A layer whose inputs are all 0 (every ReLU off) quantises to 0 with scale 0: the logit is
// then the last bias alone, in every kernel, as in FP32.
TEST(PolicyModelTest, Int8HandlesAllZeroActivations) {
  PolicyModel m = RandomModel(13, 1);
  std::fill(m.layers[0].weight.begin(), m.layers[0].weight.end(), 0.0f);
  std::fill(m.layers[0].bias.begin(), m.layers[0].bias.end(), -1.0f);
  const QuantizedPolicyModel q(m);
  std::mt19937_64 rng(9);
  const std::vector<float> x = RandomFeatures(rng, 37);
  std::vector<float> want(37), got(37);
  LogitsFloat(m, x, absl::MakeSpan(want));
  for (Kernel k : {Kernel::kPortable, Kernel::kAvx2, Kernel::kAvx2VnniVex, Kernel::kAvx2VnniEvex,
                   Kernel::kAvx512Vnni}) {
    if (!QuantizedPolicyModel::Supports(k)) continue;
    q.Logits(x, absl::MakeSpan(got), k);
    EXPECT_EQ(got, want) << "kernel " << static_cast<int>(k);
  }
}

// Rows whose hidden layers are all 0 next to rows whose are not, in the same block of rows
// (the 16-rows-at-once kernel quantises each lane with its own scale: a zero row must get
// scale 0 without touching its neighbours), over a row count that leaves a partial block:
// every kernel gives the portable kernel's logits, and a zero row's logit is the last bias.
TEST(PolicyModelTest, Int8MixesZeroAndLiveRowsInABlock) {
  PolicyModel m = RandomModel(14, 2);
  std::fill(m.feature_mean.begin(), m.feature_mean.end(), 0.0f);
  std::fill(m.feature_scale.begin(), m.feature_scale.end(), 1.0f);
  // The first layer: previous_weight - 0.5 in every channel, so ReLU is off for every channel
  // of a row with previous_weight < 0.5; the second: negative biases, so it is off there too.
  DenseLayer& first = m.layers[0];
  std::fill(first.weight.begin(), first.weight.end(), 0.0f);
  for (int o = 0; o < first.out; ++o) {
    first.weight[static_cast<size_t>(o) * kPolicyFeatures + kFeatPreviousWeight] =
        1.0f + 0.01f * static_cast<float>(o);
  }
  std::fill(first.bias.begin(), first.bias.end(), -0.5f);
  std::fill(m.layers[1].bias.begin(), m.layers[1].bias.end(), -0.05f);
  ASSERT_TRUE(m.Validate().ok());
  const QuantizedPolicyModel q(m);
  std::mt19937_64 rng(15);
  const int rows = 37;
  std::vector<float> x = RandomFeatures(rng, rows);
  for (int r = 0; r < rows; ++r) {
    // Zero rows at 0, 2, 3, 5, 6, 8, ...: mixed in every block.
    x[r * kPolicyFeatures + kFeatPreviousWeight] = r % 3 == 1 ? 0.9f + 0.001f * r : 0.1f;
  }
  std::vector<float> fp(rows), portable(rows), got(rows);
  LogitsFloat(m, x, absl::MakeSpan(fp));
  q.Logits(x, absl::MakeSpan(portable), Kernel::kPortable);
  int live = 0;
  for (int r = 0; r < rows; ++r) {
    if (r % 3 != 1) {
      EXPECT_EQ(portable[r], m.layers[2].bias[0]) << "row " << r;
      EXPECT_EQ(fp[r], m.layers[2].bias[0]) << "row " << r;
    } else {
      live += portable[r] != m.layers[2].bias[0];
    }
  }
  EXPECT_GT(live, 0) << "no row has a live hidden layer: the test tests nothing";
  for (Kernel k : kKernels) {
    if (!QuantizedPolicyModel::Supports(k)) continue;
    std::fill(got.begin(), got.end(), 0.0f);
    q.Logits(x, absl::MakeSpan(got), k);
    EXPECT_EQ(got, portable) << "kernel " << static_cast<int>(k);
  }
}

TEST(PolicyModelTest, WeightsAreMaskedNormalisedAndFloored) {
  PolicyBatch b;
  b.decisions.push_back(PolicyDecision{0, 1, 0, 0, 3});
  b.decisions.push_back(PolicyDecision{2, 1, 0, 3, 2});
  b.candidates.resize(5);
  const std::vector<float> logits = {0, 1, -40, 5, 5};
  std::vector<double> w(5, -1);
  WeightsFromLogits(b, logits, 0.01, absl::MakeSpan(w));
  EXPECT_NEAR(w[0] + w[1] + w[2], 1, 1e-12);
  EXPECT_NEAR(w[3] + w[4], 1, 1e-12);
  EXPECT_GT(w[1], w[0]);
  EXPECT_NEAR(w[2], 0.01 / 1.01, 1e-9);  // floored, then renormalised
  EXPECT_DOUBLE_EQ(w[3], 0.5);
  // min_weight 0: still > 0, which the forwarders' validator requires.
  WeightsFromLogits(b, std::vector<float>{0, 0, -1000, 0, 0}, 0, absl::MakeSpan(w));
  EXPECT_GT(w[2], 0);
}

TEST(PolicyModelTest, LearnedPolicyWeighsOnlyTheBatchsCandidates) {
  const std::string path = TempPath("learned.json");
  ASSERT_TRUE(SavePolicyModel(RandomModel(5), path).ok());
  for (auto precision : {LearnedPolicy::Precision::kInt8, LearnedPolicy::Precision::kFloat}) {
    absl::StatusOr<std::unique_ptr<LearnedPolicy>> p = LearnedPolicy::Load(path, precision);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_THAT((*p)->Describe(), HasSubstr(path));
    std::mt19937_64 rng(9);
    const PolicyBatch batch = RandomBatch(rng, 200);
    std::vector<double> w(batch.candidates.size(), -1);
    ASSERT_TRUE((*p)->Weigh(batch, absl::MakeSpan(w), InlineExecutorInstance()).ok());
    for (const PolicyDecision& d : batch.decisions) {
      double sum = 0;
      for (uint32_t i = d.first; i < d.first + d.count; ++i) {
        EXPECT_GE(w[i], 0.001 / (1 + 0.001 * d.count));
        sum += w[i];
      }
      EXPECT_NEAR(sum, 1, 1e-9);
    }
    std::vector<double> wrong(3);
    EXPECT_FALSE((*p)->Weigh(batch, absl::MakeSpan(wrong), InlineExecutorInstance()).ok());
  }
  EXPECT_FALSE(LearnedPolicy::Load(path + ".missing", LearnedPolicy::Precision::kInt8).ok());
  std::filesystem::remove(path);
}

// Two threads weigh a batch's two halves side by side: the same weights bit for bit as one
// thread, for batches split in two (large, tiled), and for those that are not (small, or
// decisions not in candidate order); BatchLogits over a range is that range of the whole.
TEST(PolicyModelTest, TwoThreadsWeighAsOneDoes) {
  const PolicyModel model = RandomModel(6);
  LearnedPolicy one(model, "one", LearnedPolicy::Precision::kInt8);
  LearnedPolicy two(model, "two", LearnedPolicy::Precision::kInt8);
  ThreadPool pool(2);
  std::mt19937_64 rng(21);
  PolicyBatch shuffled = SharedLinkBatch(rng, 300);
  std::swap(shuffled.decisions[0], shuffled.decisions[299]);  // no longer in order
  // As PolicyFeatureBuilder's batches are: large, tiled, with their links' features.
  PolicyBatch built = SharedLinkBatch(rng, 3000);
  ASSERT_GE(built.candidates.size(), 4096u);  // large enough to be split
  built.link_features.resize(8);
  for (const PolicyCandidate& c : built.candidates) {
    std::copy(c.features.begin() + kFeatLinkDelay,
              c.features.begin() + kFeatLinkDelay + kPolicyLinkFeatures,
              built.link_features[c.link].begin());
  }
  for (const PolicyBatch& batch : {built, SharedLinkBatch(rng, 3000), RandomBatch(rng, 1500),
                                   RandomBatch(rng, 10), shuffled}) {
    std::vector<double> w1(batch.candidates.size(), -1), w2(batch.candidates.size(), -2);
    for (int round = 0; round < 2; ++round) {  // the second with the workspaces used
      ASSERT_TRUE(one.Weigh(batch, absl::MakeSpan(w1), InlineExecutorInstance()).ok());
      ASSERT_TRUE(two.Weigh(batch, absl::MakeSpan(w2), pool).ok());
      for (size_t i = 0; i < w1.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint64_t>(w1[i]), std::bit_cast<uint64_t>(w2[i]))
            << "candidate " << i << " of " << w1.size();
      }
    }
  }
  const QuantizedPolicyModel q(model);
  const PolicyBatch batch = SharedLinkBatch(rng, 500);
  std::vector<float> whole(batch.candidates.size()), part(777);
  QuantizedPolicyModel::Workspace ws, ws_part;
  q.BatchLogits(batch, absl::MakeSpan(whole), ws);
  q.BatchLogits(batch, 1001, absl::MakeSpan(part), ws_part);
  for (size_t i = 0; i < part.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(part[i]), std::bit_cast<uint32_t>(whole[1001 + i])) << i;
  }
}

// A model whose logit is the analytic logit reproduces the engine's weights (softmax of
// ln w is w), in both precisions.
TEST(PolicyModelTest, AnalyticLogitModelReproducesTheAnalyticWeights) {
  std::array<float, kPolicyFeatures> weights{};
  weights[kFeatAnalyticLogit] = 1;
  const PolicyModel m = LinearPolicyModel("analytic", weights);
  PolicyBatch b;
  b.decisions.push_back(PolicyDecision{0, 1, 0, 0, 3});
  const double analytic[] = {0.7, 0.25, 0.05};
  for (double a : analytic) {
    PolicyCandidate c;
    c.features[kFeatAnalyticLogit] = static_cast<float>(std::log(a));
    b.candidates.push_back(c);
  }
  for (auto precision : {LearnedPolicy::Precision::kInt8, LearnedPolicy::Precision::kFloat}) {
    LearnedPolicy p(m, "mem", precision);
    std::vector<double> w(3);
    ASSERT_TRUE(p.Weigh(b, absl::MakeSpan(w), InlineExecutorInstance()).ok());
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(w[i], analytic[i], 0.01);
  }
}

}  // namespace
}  // namespace dar::learn
