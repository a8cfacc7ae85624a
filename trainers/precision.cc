#include "cohort/train/precision.h"

#include <bit>

#include "cohort/error.h"
#include "rounding.h"

namespace cohort::train {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    if (name == precision_name(p)) return p;
  }
  throw UsageError("unknown precision '" + name + "' (fp32, tf32, bf16 or fp16)");
}

double unit_roundoff(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return 0x1p-24;
    case Precision::kTf32:
    case Precision::kFp16:
      return 0x1p-11;
    case Precision::kBf16:
      return 0x1p-8;
  }
  return 0;
}

uint16_t bf16_bits(float x) {
  return rounding::bf16_from_bits(std::bit_cast<uint32_t>(x));
}
uint16_t fp16_bits(float x) {
  return rounding::fp16_from_bits(std::bit_cast<uint32_t>(x));
}
float from_bf16_bits(uint16_t b) {
  return std::bit_cast<float>(rounding::bits_from_bf16(b));
}
float from_fp16_bits(uint16_t b) {
  return std::bit_cast<float>(rounding::bits_from_fp16(b));
}

float round_to(Precision p, float x) {
  switch (p) {
    case Precision::kFp32:
      return x;
    case Precision::kTf32:
      return std::bit_cast<float>(rounding::tf32_rounded_bits(std::bit_cast<uint32_t>(x)));
    case Precision::kBf16:
      return from_bf16_bits(bf16_bits(x));
    case Precision::kFp16:
      return from_fp16_bits(fp16_bits(x));
  }
  return x;
}

void round_array(Precision p, float* dst, const float* src, size_t n) {
  switch (p) {
    case Precision::kFp32:
      if (dst != src) {
        for (size_t i = 0; i < n; ++i) dst[i] = src[i];
      }
      return;
    case Precision::kTf32:
      for (size_t i = 0; i < n; ++i) {
        dst[i] = std::bit_cast<float>(rounding::tf32_rounded_bits(std::bit_cast<uint32_t>(src[i])));
      }
      return;
    case Precision::kBf16:
      for (size_t i = 0; i < n; ++i) {
        dst[i] = std::bit_cast<float>(
            rounding::bits_from_bf16(rounding::bf16_from_bits(std::bit_cast<uint32_t>(src[i]))));
      }
      return;
    case Precision::kFp16:
      for (size_t i = 0; i < n; ++i) {
        dst[i] = std::bit_cast<float>(
            rounding::bits_from_fp16(rounding::fp16_from_bits(std::bit_cast<uint32_t>(src[i]))));
      }
      return;
  }
}

}  // namespace cohort::train
