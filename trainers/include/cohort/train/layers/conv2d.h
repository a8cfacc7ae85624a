// 2-D convolution, stride 1, square kernel, zero padding, by im2col + GEMM over many images at
// once.
//
// Layout: activations NHWC (B, H, W, C); weight (OC, K, K, C), so one im2col row is K*K runs of C
// contiguous floats. (PyTorch stores the weight (OC, C, K, K) and activations NCHW; the maths is
// the same up to that permutation, see cnn.h.) Conventions as in linear.h: the products round
// their operands (the input, the weight, the output gradient) to `p`; the bias gradient, col2im's
// sums and everything else are fp32.
#pragma once

#include <cstddef>

#include "cohort/train/precision.h"

namespace cohort::train {

struct Conv2dShape {
  int B = 0, H = 0, W = 0, C = 0;  // input (B, H, W, C)
  int OC = 0;                      // output channels
  int K = 3;                       // kernel size
  int pad = 1;                     // zero padding on each side
  int OH() const { return H + 2 * pad - K + 1; }
  int OW() const { return W + 2 * pad - K + 1; }
  // Rows and columns of the im2col matrix: (B*OH*OW, K*K*C).
  long col_rows() const { return static_cast<long>(B) * OH() * OW(); }
  long col_cols() const { return static_cast<long>(K) * K * C; }
};

// Floats of im2col scratch the CPU functions below need: the col rows of conv2d_chunk_images(s)
// images. The batch is processed in chunks whose col matrix stays within about 1 MiB, so each
// chunk's im2col, GEMMs and col2im run out of the core's L2 cache (measured ~25% faster GEMMs for
// Fashion-MNIST's conv2 than one GEMM over the whole batch's 14 MB col matrix).
size_t conv2d_scratch_floats(const Conv2dShape& s);
int conv2d_chunk_images(const Conv2dShape& s);

// out (B, OH, OW, OC) = im2col(inp) @ weight^T + bias; bias may be null. col is scratch
// (conv2d_scratch_floats(s) floats).
void conv2d_forward(float* out, float* col, const float* inp, const float* weight,
                    const float* bias, const Conv2dShape& s, Precision p = Precision::kFp32);

// dweight (OC, K*K*C) += dout^T @ im2col(inp); dbias (OC) += sums of dout; then, when dinp is not
// null, dinp (B, H, W, C) = col2im(dout @ weight) (overwritten). `inp` is forward's input (im2col
// is recomputed chunk by chunk); col is scratch as for forward.
void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     float* col, const float* weight, const Conv2dShape& s,
                     Precision p = Precision::kFp32);

// The im2col and col2im halves on their own (CUDA twins and tests use them).
void im2col(float* col, const float* inp, const Conv2dShape& s);
// dinp (B, H, W, C) = sum over the positions each input feeds of dcol (overwritten).
void col2im(float* dinp, const float* dcol, const Conv2dShape& s);

}  // namespace cohort::train
