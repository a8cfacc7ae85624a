#include "cohort/types.h"

#include <bit>
#include <cmath>

namespace cohort {

std::string_view dtype_name(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
  }
  return "unknown";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
}

BFloat16 BFloat16::from_float(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x0040)};  // quiet NaN
  // Round to nearest even on the 16 bits dropped (as PyTorch's c10::BFloat16 does).
  u += 0x7FFF + ((u >> 16) & 1);
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

float BFloat16::to_float() const {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

}  // namespace cohort
