#include "cohort/train/gpt.h"
#include "cohort/error.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "cohort/train/rng.h"

namespace cohort::train {

Gpt::Gpt(Device& dev, const GptConfig& config, int max_batch)
    : dev_(dev), cfg_(config), max_batch_(max_batch) {
  const int V = cfg_.vocab_size, C = cfg_.n_embd, L = cfg_.n_layer, maxT = cfg_.block_size;
  if (V <= 0 || C <= 0 || L <= 0 || maxT <= 0 || cfg_.n_head <= 0 || max_batch <= 0 ||
      C % cfg_.n_head != 0) {
    throw UsageError("invalid GPT config: vocab " + std::to_string(V) + ", n_embd " +
                     std::to_string(C) + ", n_head " + std::to_string(cfg_.n_head) +
                     " (n_embd must be a multiple of n_head), n_layer " + std::to_string(L) +
                     ", block " + std::to_string(maxT));
  }
  wte_ = layout_.add("wte", {V, C}, true);
  wpe_ = layout_.add("wpe", {maxT, C}, true);
  for (int l = 0; l < L; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    LayerParams q{};
    q.ln1_w = layout_.add(p + "ln_1.weight", {C}, false);
    q.ln1_b = layout_.add(p + "ln_1.bias", {C}, false);
    q.qkv_w = layout_.add(p + "attn.c_attn.weight", {3 * C, C}, true);
    q.qkv_b = layout_.add(p + "attn.c_attn.bias", {3 * C}, false);
    q.proj_w = layout_.add(p + "attn.c_proj.weight", {C, C}, true);
    q.proj_b = layout_.add(p + "attn.c_proj.bias", {C}, false);
    q.ln2_w = layout_.add(p + "ln_2.weight", {C}, false);
    q.ln2_b = layout_.add(p + "ln_2.bias", {C}, false);
    q.fc_w = layout_.add(p + "mlp.c_fc.weight", {4 * C, C}, true);
    q.fc_b = layout_.add(p + "mlp.c_fc.bias", {4 * C}, false);
    q.fcproj_w = layout_.add(p + "mlp.c_proj.weight", {C, 4 * C}, true);
    q.fcproj_b = layout_.add(p + "mlp.c_proj.bias", {C}, false);
    lp_.push_back(q);
  }
  lnf_w_ = layout_.add("ln_f.weight", {C}, false);
  lnf_b_ = layout_.add("ln_f.bias", {C}, false);
  params_ = DeviceBuffer<float>(dev, layout_.size());
  grads_ = DeviceBuffer<float>(dev, layout_.size() + 1);
  dev.zero(params_.get(), layout_.size() * sizeof(float));
  dev.zero(grads_.get(), (layout_.size() + 1) * sizeof(float));

  // Activations: one allocation, pieces rounded to 16 floats.
  const size_t BT = static_cast<size_t>(max_batch) * maxT;
  const size_t NH = cfg_.n_head;
  const size_t att = static_cast<size_t>(max_batch) * NH * maxT * maxT;
  std::vector<std::pair<float**, size_t>> pieces;
  la_.resize(L);
  pieces.push_back({&encoded_, BT * C});
  for (int l = 0; l < L; ++l) {
    LayerActs& a = la_[l];
    pieces.push_back({&a.ln1, BT * C});
    pieces.push_back({&a.ln1_mean, BT});
    pieces.push_back({&a.ln1_rstd, BT});
    pieces.push_back({&a.qkv, BT * 3 * C});
    pieces.push_back({&a.atty, BT * C});
    pieces.push_back({&a.att, att});
    pieces.push_back({&a.attproj, BT * C});
    pieces.push_back({&a.res2, BT * C});
    pieces.push_back({&a.ln2, BT * C});
    pieces.push_back({&a.ln2_mean, BT});
    pieces.push_back({&a.ln2_rstd, BT});
    pieces.push_back({&a.fch, BT * 4 * C});
    pieces.push_back({&a.fch_gelu, BT * 4 * C});
    pieces.push_back({&a.fcproj, BT * C});
    pieces.push_back({&a.res3, BT * C});
  }
  pieces.push_back({&lnf_, BT * C});
  pieces.push_back({&lnf_mean_, BT});
  pieces.push_back({&lnf_rstd_, BT});
  pieces.push_back({&probs_, BT * V});
  pieces.push_back({&losses_, BT});
  pieces.push_back({&dres_, BT * C});
  pieces.push_back({&dln_, BT * C});
  pieces.push_back({&dqkv_, BT * 3 * C});
  pieces.push_back({&datty_, BT * C});
  pieces.push_back({&dfch_, BT * 4 * C});
  pieces.push_back({&datt_scratch_, dev.attention_scratch_floats(max_batch, maxT, cfg_.n_head)});
  pieces.push_back({&dlnf_, BT * C});
  size_t total = 0;
  for (auto& [slot, n] : pieces) total += (n + 15) / 16 * 16;
  acts_ = DeviceBuffer<float>(dev, total);
  float* p = acts_.get();
  for (auto& [slot, n] : pieces) {
    *slot = p;
    p += (n + 15) / 16 * 16;
  }
  host_losses_.resize(BT);
  zero_targets_ = DeviceBuffer<int32_t>(dev, BT);
  dev.zero(zero_targets_.get(), BT * sizeof(int32_t));
}

void Gpt::init(uint64_t seed) {
  Rng rng(seed);
  std::vector<float> host(layout_.size(), 0.0f);
  const float proj_std = 0.02f / std::sqrt(2.0f * cfg_.n_layer);
  for (const ParamTensor& t : layout_.tensors()) {
    float* p = host.data() + t.offset;
    const bool is_ln_weight =
        t.name.find("ln_") != std::string::npos && t.name.find("weight") != std::string::npos;
    if (is_ln_weight) {
      for (size_t i = 0; i < t.numel; ++i) p[i] = 1.0f;
    } else if (t.shape.size() == 2) {
      const bool is_proj = t.name.find("c_proj.weight") != std::string::npos;
      const float std = is_proj ? proj_std : 0.02f;
      for (size_t i = 0; i < t.numel; ++i) p[i] = rng.normal(0.0f, std);
    }  // biases stay 0
  }
  dev_.upload(params_.get(), host.data(), host.size() * sizeof(float));
}

float Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  if (B > max_batch_ || T > cfg_.block_size || B <= 0 || T <= 0) {
    throw UsageError("Gpt::forward: batch " + std::to_string(B) + "x" + std::to_string(T) +
                     " exceeds " + std::to_string(max_batch_) + "x" +
                     std::to_string(cfg_.block_size));
  }
  B_ = B;
  T_ = T;
  tokens_ = tokens;
  targets_ = targets;
  const int C = cfg_.n_embd, V = cfg_.vocab_size, NH = cfg_.n_head;
  const int N = B * T;
  const size_t NC = static_cast<size_t>(N) * C;
  const float* w = params_.get();
  dev_.embedding_forward(encoded_, tokens, w + wte_, w + wpe_, B, T, C);
  const float* residual = encoded_;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerParams& q = lp_[l];
    LayerActs& a = la_[l];
    dev_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, w + q.ln1_w, w + q.ln1_b, N, C);
    dev_.linear_forward(a.qkv, a.ln1, w + q.qkv_w, w + q.qkv_b, N, C, 3 * C);
    dev_.attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    dev_.linear_forward(a.attproj, a.atty, w + q.proj_w, w + q.proj_b, N, C, C);
    dev_.residual_forward(a.res2, residual, a.attproj, NC);
    dev_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w + q.ln2_w, w + q.ln2_b, N, C);
    dev_.linear_forward(a.fch, a.ln2, w + q.fc_w, w + q.fc_b, N, C, 4 * C);
    dev_.gelu_forward(a.fch_gelu, a.fch, NC * 4);
    dev_.linear_forward(a.fcproj, a.fch_gelu, w + q.fcproj_w, w + q.fcproj_b, N, 4 * C, C);
    dev_.residual_forward(a.res3, a.res2, a.fcproj, NC);
    residual = a.res3;
  }
  dev_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, residual, w + lnf_w_, w + lnf_b_, N, C);
  // Tied head: logits (N, V) = lnf @ wte^T, turned into probabilities in place.
  dev_.linear_forward(probs_, lnf_, w + wte_, nullptr, N, C, V);
  if (!targets) {
    // No loss wanted: softmax only, against dummy targets (token 0 is always valid).
    dev_.softmax_xent_forward(losses_, probs_, probs_, zero_targets_.get(), N, V);
    return 0.0f;
  }
  dev_.softmax_xent_forward(losses_, probs_, probs_, targets, N, V);
  dev_.download(host_losses_.data(), losses_, sizeof(float) * N);
  double sum = 0.0;
  for (int i = 0; i < N; ++i) sum += host_losses_[i];
  return static_cast<float>(sum / N);
}

void Gpt::backward(float loss_scale) {
  const int B = B_, T = T_, C = cfg_.n_embd, V = cfg_.vocab_size, NH = cfg_.n_head;
  const int N = B * T;
  const size_t NC = static_cast<size_t>(N) * C;
  const float* w = params_.get();
  float* g = grads_.get();
  // dlogits, written over the probabilities (forward must run again before the next backward).
  float* dlogits = probs_;
  dev_.softmax_xent_backward(dlogits, probs_, targets_, loss_scale / N, N, V);
  dev_.linear_backward(dlnf_, g + wte_, nullptr, dlogits, lnf_, w + wte_, N, C, V);
  dev_.zero(dres_, NC * sizeof(float));
  const float* last = cfg_.n_layer > 0 ? la_.back().res3 : encoded_;
  dev_.layernorm_backward(dres_, g + lnf_w_, g + lnf_b_, dlnf_, last, w + lnf_w_, lnf_mean_,
                          lnf_rstd_, N, C);
  // dres_ holds the gradient of the residual stream; each block adds its branches into it.
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const LayerParams& q = lp_[l];
    const LayerActs& a = la_[l];
    const float* residual = l == 0 ? encoded_ : la_[l - 1].res3;
    // res3 = res2 + fcproj(gelu(fc(ln2(res2))))
    dev_.linear_backward(dfch_, g + q.fcproj_w, g + q.fcproj_b, dres_, a.fch_gelu, w + q.fcproj_w,
                         N, 4 * C, C);
    dev_.gelu_backward(dfch_, a.fch, dfch_, NC * 4);
    dev_.linear_backward(dln_, g + q.fc_w, g + q.fc_b, dfch_, a.ln2, w + q.fc_w, N, C, 4 * C);
    dev_.layernorm_backward(dres_, g + q.ln2_w, g + q.ln2_b, dln_, a.res2, w + q.ln2_w, a.ln2_mean,
                            a.ln2_rstd, N, C);
    // res2 = residual + proj(attn(qkv(ln1(residual))))
    dev_.linear_backward(datty_, g + q.proj_w, g + q.proj_b, dres_, a.atty, w + q.proj_w, N, C, C);
    dev_.attention_backward(dqkv_, datt_scratch_, datty_, a.qkv, a.att, B, T, C, NH);
    dev_.linear_backward(dln_, g + q.qkv_w, g + q.qkv_b, dqkv_, a.ln1, w + q.qkv_w, N, C, 3 * C);
    dev_.layernorm_backward(dres_, g + q.ln1_w, g + q.ln1_b, dln_, residual, w + q.ln1_w,
                            a.ln1_mean, a.ln1_rstd, N, C);
  }
  dev_.embedding_backward(g + wte_, g + wpe_, dres_, tokens_, B, T, C, V);
}

double Gpt::flops_per_token(int T) const {
  const double weights = static_cast<double>(num_params()) -
                         static_cast<double>(cfg_.block_size) * static_cast<double>(cfg_.n_embd);
  return 6.0 * weights + 12.0 * cfg_.n_layer * static_cast<double>(cfg_.n_embd) * T;
}

void Gpt::zero_grad() {
  dev_.zero(grads_.get(), (layout_.size() + 1) * sizeof(float));
}

}  // namespace cohort::train
