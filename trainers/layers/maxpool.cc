#include "cohort/train/layers/maxpool.h"

#include <cstddef>
#include <cstring>

#include "vec_math.h"

namespace cohort::train {
namespace {

// One 2x2 window per channel, C channels: the four inputs x0..x3 (top-left, top-right,
// bottom-left, bottom-right). Separate functions with restrict pointers let GCC vectorise.
inline void pool_window(float* __restrict out, uint8_t* __restrict arg, const float* __restrict x0,
                        const float* __restrict x1, const float* __restrict x2,
                        const float* __restrict x3, int C) {
  for (int c = 0; c < C; ++c) {
    // Strict '>' keeps the first maximum, as PyTorch does (NaN aside).
    float m = x0[c];
    unsigned k = 0;
    if (x1[c] > m) m = x1[c], k = 1;
    if (x2[c] > m) m = x2[c], k = 2;
    if (x3[c] > m) m = x3[c], k = 3;
    out[c] = m;
    arg[c] = static_cast<uint8_t>(k);
  }
}

inline void unpool_window(float* __restrict x0, float* __restrict x1, float* __restrict x2,
                          float* __restrict x3, const float* __restrict d,
                          const uint8_t* __restrict arg, int C) {
  for (int c = 0; c < C; ++c) {
    const float g = d[c];
    const unsigned k = arg[c];
    x0[c] = k == 0 ? g : 0.0f;
    x1[c] = k == 1 ? g : 0.0f;
    x2[c] = k == 2 ? g : 0.0f;
    x3[c] = k == 3 ? g : 0.0f;
  }
}

}  // namespace

COHORT_TRAIN_CLONES
void maxpool2x2_forward(float* out, uint8_t* argmax, const float* inp, int B, int H, int W, int C) {
  const int OH = H / 2, OW = W / 2;
  for (int b = 0; b < B; ++b) {
    for (int oh = 0; oh < OH; ++oh) {
      const float* r0 = inp + ((static_cast<size_t>(b) * H + 2 * oh) * W) * C;
      const float* r1 = r0 + static_cast<size_t>(W) * C;
      const size_t o = ((static_cast<size_t>(b) * OH + oh) * OW) * C;
      for (int ow = 0; ow < OW; ++ow) {
        const size_t in = static_cast<size_t>(2 * ow) * C;
        pool_window(out + o + static_cast<size_t>(ow) * C, argmax + o + static_cast<size_t>(ow) * C,
                    r0 + in, r0 + in + C, r1 + in, r1 + in + C, C);
      }
    }
  }
}

COHORT_TRAIN_CLONES
void maxpool2x2_backward(float* dinp, const float* dout, const uint8_t* argmax, int B, int H, int W,
                         int C) {
  const int OH = H / 2, OW = W / 2;
  // Floor mode leaves the last row / column of an odd size out of every window.
  if ((H & 1) || (W & 1)) std::memset(dinp, 0, sizeof(float) * B * H * W * C);
  for (int b = 0; b < B; ++b) {
    for (int oh = 0; oh < OH; ++oh) {
      float* r0 = dinp + ((static_cast<size_t>(b) * H + 2 * oh) * W) * C;
      float* r1 = r0 + static_cast<size_t>(W) * C;
      const size_t o = ((static_cast<size_t>(b) * OH + oh) * OW) * C;
      for (int ow = 0; ow < OW; ++ow) {
        const size_t in = static_cast<size_t>(2 * ow) * C;
        unpool_window(r0 + in, r0 + in + C, r1 + in, r1 + in + C,
                      dout + o + static_cast<size_t>(ow) * C,
                      argmax + o + static_cast<size_t>(ow) * C, C);
      }
    }
  }
}

}  // namespace cohort::train
