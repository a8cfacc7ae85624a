// Softmax cross-entropy (torch.nn.functional.cross_entropy per row). Conventions as in linear.h.
#pragma once

#include <cstdint>

namespace cohort::train {

// losses (N) = logsumexp(logits[n]) - logits[n, targets[n]]; probs (N, V) = softmax(logits).
// probs may equal logits (computed in place).
void softmax_xent_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                          int N, int V);

// dlogits (N, V) = (probs - onehot(targets)) * dloss, where dloss is d(total loss)/d(each row's
// loss), e.g. 1/N for a mean (overwritten; may equal probs).
void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                           int N, int V);

}  // namespace cohort::train
