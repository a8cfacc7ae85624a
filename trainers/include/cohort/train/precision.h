// The arithmetic of the trainers' matrix products (--precision).
//
// Every GEMM of a layer (linear, conv2d, attention) multiplies its two operands rounded to the
// chosen format, round to nearest, ties to even, and sums the exact products in fp32; everything
// else (activations, LayerNorm, softmax, GELU, the loss, gradients between layers, optimiser state
// and the master weights) stays fp32. This is automatic mixed precision as torch.autocast applies
// it to matmuls, with fp32 outputs:
//   fp32  no rounding (plain fp32 GEMMs)
//   tf32  10-bit mantissa, fp32's range: NVIDIA's TensorFloat-32 (torch.backends.cuda.matmul.
//         allow_tf32)
//   bf16  bfloat16: 7-bit mantissa, fp32's range (torch.autocast(dtype=torch.bfloat16))
//   fp16  IEEE binary16: 10-bit mantissa, at most 65504, subnormals below 2^-14; gradients need
//         loss scaling (loss_scaler.h) to stay above the underflow.
// The products of two such operands are exact in fp32 (at most 22 significant bits), so a GPU's
// tensor cores and the CPU reference, which rounds the operands in software (round_to()) and
// multiplies them with OpenBLAS's fp32 GEMMs, differ only in the order of the fp32 sums.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace cohort::train {

enum class Precision { kFp32, kTf32, kBf16, kFp16 };

// "fp32", "tf32", "bf16", "fp16".
const char* precision_name(Precision p);
// The format of a name above; throws cohort::UsageError naming the choices otherwise.
Precision parse_precision(const std::string& name);

// Unit roundoff of the format: 2^-24 (fp32), 2^-11 (tf32, fp16), 2^-8 (bf16).
double unit_roundoff(Precision p);

// Round to nearest, ties to even, of x to the format, as the fp32 value that represents it
// exactly. NaN stays NaN (quiet), infinities stay; values beyond the format's range become
// infinities (fp16: |x| >= 65520), and fp16 has subnormals down to 2^-24, below which values
// become signed zeros.
float round_to(Precision p, float x);

// The 16-bit encodings (bfloat16, IEEE binary16) of round_to(kBf16 / kFp16, x), as a GPU stores
// them, and back.
uint16_t bf16_bits(float x);
uint16_t fp16_bits(float x);
float from_bf16_bits(uint16_t b);
float from_fp16_bits(uint16_t b);

// dst[i] = round_to(p, src[i]) for n floats (dst may be src).
void round_array(Precision p, float* dst, const float* src, size_t n);

}  // namespace cohort::train
