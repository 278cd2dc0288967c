#include "train/policy_net.h"

#include <cassert>

namespace dar::train {
namespace {

std::vector<torch::nn::Linear> MakeMlp(torch::nn::Module& m, const std::string& prefix, int in,
                                       const std::vector<int>& hidden) {
  std::vector<torch::nn::Linear> layers;
  int width = in;
  for (size_t i = 0; i <= hidden.size(); ++i) {
    const int out = i < hidden.size() ? hidden[i] : 1;
    layers.push_back(m.register_module(prefix + std::to_string(i), torch::nn::Linear(width, out)));
    width = out;
  }
  return layers;
}

torch::Tensor RunMlp(std::vector<torch::nn::Linear>& layers, torch::Tensor x) {
  for (size_t i = 0; i < layers.size(); ++i) {
    x = layers[i]->forward(x);
    if (i + 1 < layers.size()) x = torch::relu(x);
  }
  return x.squeeze(-1);
}

}  // namespace

PolicyNetImpl::PolicyNetImpl(const std::vector<int>& hidden) : hidden_(hidden) {
  policy_ = MakeMlp(*this, "policy", kPolicyFeatures, hidden);
  value_ = MakeMlp(*this, "value", 2 * kPolicyFeatures, hidden);
  mean_ = register_buffer("feature_mean", torch::zeros({kPolicyFeatures}));
  scale_ = register_buffer("feature_scale", torch::ones({kPolicyFeatures}));
}

void PolicyNetImpl::SetNormalisation(const std::vector<float>& mean,
                                     const std::vector<float>& scale) {
  assert(mean.size() == kPolicyFeatures && scale.size() == kPolicyFeatures);
  torch::NoGradGuard no_grad;
  mean_.copy_(torch::tensor(mean));
  scale_.copy_(torch::tensor(scale));
}

void PolicyNetImpl::InitFromAnalytic() {
  torch::NoGradGuard no_grad;
  // The first layer sees the normalised feature x0' = (x0 - m) / s; the output multiplies by
  // s again, so the logit is x0 - m plus the other units' small contribution (a constant
  // offset does not change a softmax).
  const float s = scale_[kFeatAnalyticLogit].item<float>();
  for (size_t i = 0; i + 1 < policy_.size(); ++i) {
    torch::Tensor w = policy_[i]->weight;
    w.index_put_({torch::indexing::Slice(0, 2)}, 0.0);
    policy_[i]->bias.index_put_({torch::indexing::Slice(0, 2)}, 0.0);
    // Units 0 and 1 of every hidden layer are relu(x0') and relu(-x0').
    const int64_t src = i == 0 ? kFeatAnalyticLogit : 0;
    w.index_put_({0, src}, 1.0);
    w.index_put_({1, i == 0 ? src : 1}, i == 0 ? -1.0 : 1.0);
    // Nothing else feeds the next layer from units 0 and 1 except their own copies.
    if (i + 1 < policy_.size() - 1) {
      policy_[i + 1]->weight.index_put_(
          {torch::indexing::Slice(2, torch::indexing::None), torch::indexing::Slice(0, 2)}, 0.0);
    }
  }
  torch::Tensor out = policy_.back()->weight;  // [1, last hidden]
  out.mul_(0.01);
  out.index_put_({0, 0}, s);
  out.index_put_({0, 1}, -s);
  policy_.back()->bias.zero_();
}

void PolicyNetImpl::SetValueBias(float value) {
  torch::NoGradGuard no_grad;
  value_.back()->bias.fill_(value);
}

torch::Tensor PolicyNetImpl::Normalise(const torch::Tensor& x) const {
  return (x - mean_) / scale_;
}

NetOutput PolicyNetImpl::Forward(const torch::Tensor& features, const torch::Tensor& mask) {
  const torch::Tensor x = Normalise(features);
  torch::Tensor logits = RunMlp(policy_, x).masked_fill(~mask, -1e9);
  NetOutput out;
  out.log_probs = torch::log_softmax(logits, 1).masked_fill(~mask, 0.0);
  const torch::Tensor m = mask.unsqueeze(-1).to(torch::kFloat);
  const torch::Tensor mean = (x * m).sum(1) / m.sum(1).clamp_min(1.0);
  const torch::Tensor max = std::get<0>(x.masked_fill(~mask.unsqueeze(-1), -1e9).max(1));
  out.values = RunMlp(value_, torch::cat({mean, max}, 1));
  return out;
}

learn::PolicyModel PolicyNetImpl::Export() const {
  learn::PolicyModel model;
  auto to_vector = [](const torch::Tensor& t) {
    const torch::Tensor c = t.detach().contiguous().to(torch::kFloat);
    return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  };
  model.feature_mean = to_vector(mean_);
  model.feature_scale = to_vector(scale_);
  for (const torch::nn::Linear& l : policy_) {
    learn::DenseLayer d;
    d.in = static_cast<int>(l->weight.size(1));
    d.out = static_cast<int>(l->weight.size(0));
    d.weight = to_vector(l->weight);  // [out, in], row-major by output, as the file wants
    d.bias = to_vector(l->bias);
    model.layers.push_back(std::move(d));
  }
  return model;
}

PolicyNet ClonePolicyNet(const PolicyNet& net) {
  PolicyNet copy(net->hidden());
  torch::NoGradGuard no_grad;
  auto params = copy->named_parameters();
  for (const auto& p : net->named_parameters()) params[p.key()].copy_(p.value());
  auto buffers = copy->named_buffers();
  for (const auto& b : net->named_buffers()) buffers[b.key()].copy_(b.value());
  return copy;
}

}  // namespace dar::train
