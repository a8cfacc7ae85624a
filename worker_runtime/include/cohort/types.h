// Element types and reduction operators of libcohort's collectives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cohort {

enum class DataType : uint8_t { kFloat32, kFloat64, kBFloat16, kInt32, kInt64 };

enum class ReduceOp : uint8_t { kSum, kAvg, kMin, kMax };

// Bytes per element.
constexpr size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
  }
  return 0;
}

std::string_view dtype_name(DataType t);
std::string_view reduce_op_name(ReduceOp op);

// bfloat16 as stored: the top 16 bits of an IEEE float32. Conversions round to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  static BFloat16 from_float(float f);
  float to_float() const;
};

// Maps C++ element types to DataType, for the typed helpers in process_group.h.
template <typename T>
struct DataTypeOf;
template <>
struct DataTypeOf<float> {
  static constexpr DataType value = DataType::kFloat32;
};
template <>
struct DataTypeOf<double> {
  static constexpr DataType value = DataType::kFloat64;
};
template <>
struct DataTypeOf<BFloat16> {
  static constexpr DataType value = DataType::kBFloat16;
};
template <>
struct DataTypeOf<int32_t> {
  static constexpr DataType value = DataType::kInt32;
};
template <>
struct DataTypeOf<int64_t> {
  static constexpr DataType value = DataType::kInt64;
};

}  // namespace cohort
