// cohort::train::Gpt: the GPT of cohort-train-gpt (GPT-2 architecture, build-nanogpt conventions).
//
// Byte-level vocabulary, learned position embeddings, pre-LayerNorm blocks
// (x += attn(ln1(x)); x += mlp(ln2(x))), causal self-attention, GELU (tanh) MLP of 4C, a final
// LayerNorm and an output head tied to the token embedding; no dropout. Initialisation as
// build-nanogpt: normal(0, 0.02) for linear weights and embeddings, the two residual projections
// scaled by 1/sqrt(2 * n_layer), zero biases, LayerNorm weight 1 and bias 0.
//
// Parameters and gradients each live in one device buffer (layout()); backward accumulates into
// the gradients and zero_grad() clears them. Thread safety: none.
#pragma once

#include <cstdint>
#include <vector>

#include "cohort/train/device.h"
#include "cohort/train/param_layout.h"

namespace cohort::train {

struct GptConfig {
  int vocab_size = 256;
  int block_size = 128;  // longest sequence
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
};

class Gpt {
 public:
  // Allocates parameters, gradients and activations for up to `max_batch` sequences of up to
  // config.block_size tokens on `dev` (which must outlive the model). Throws cohort::UsageError
  // for an inconsistent config (n_embd not divisible by n_head, ...).
  Gpt(Device& dev, const GptConfig& config, int max_batch);
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  size_t num_params() const { return layout_.size(); }
  float* params() { return params_.get(); }
  // num_params() + 1 floats: the gradients, then one free slot that a trainer may fill to reduce a
  // scalar (the loss) in the same allreduce. zero_grad() clears it too.
  float* grads() { return grads_.get(); }
  int max_batch() const { return max_batch_; }
  // Model FLOPs of training on one token of a sequence of T (forward and backward), by the PaLM
  // paper's count (Chowdhery et al. 2022, appendix B; nanoGPT's estimate_mfu): 6 per weight that
  // multiplies (every parameter but the position embeddings, which are only added) plus 12 L C T
  // for the attention scores and their weighted sums. The basis of model FLOPs utilisation.
  double flops_per_token(int T) const;

  // build-nanogpt's initialisation, drawn from Rng(seed) in layout order.
  void init(uint64_t seed);

  // Runs the model on `tokens` (B, T) and, when `targets` (B, T) is not null, returns the mean
  // cross-entropy over the B*T positions (else 0). Both on the device. Keeps the activations for
  // backward(). REQUIRES: B <= max_batch, T <= block_size.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T);

  // The softmax probabilities (B, T, vocab) of the last forward, on the device.
  const float* probs() const { return probs_; }

  // grads += d(loss_scale * mean loss)/d(params) for the last forward (which had targets).
  void backward(float loss_scale = 1.0f);

  void zero_grad();

 private:
  struct LayerParams {  // offsets into the parameter / gradient buffers
    size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  };
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *res2, *ln2, *ln2_mean,
        *ln2_rstd, *fch, *fch_gelu, *fcproj, *res3;
  };

  Device& dev_;
  GptConfig cfg_;
  int max_batch_;
  int B_ = 0, T_ = 0;
  ParamLayout layout_;
  DeviceBuffer<float> params_, grads_;
  size_t wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<LayerParams> lp_;
  DeviceBuffer<float> acts_;
  float *encoded_, *lnf_, *lnf_mean_, *lnf_rstd_, *probs_, *losses_;
  std::vector<LayerActs> la_;
  // Gradient scratch, reused by every layer.
  float *dres_, *dln_, *dqkv_, *datty_, *dfch_, *datt_scratch_, *dlnf_;
  const int32_t* tokens_ = nullptr;
  const int32_t* targets_ = nullptr;
  std::vector<float> host_losses_;
  DeviceBuffer<int32_t> zero_targets_;
};

}  // namespace cohort::train
