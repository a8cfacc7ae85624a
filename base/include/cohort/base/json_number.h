// Whole numbers read from JSON that came from outside: a worker's answer or request, another
// node's record in the store (which any client of the store can write).
//
// nlohmann's get<int>() (and value("key", 0), which calls it) converts a fraction or a number
// past the type's range with static_cast: undefined behaviour for a double out of range, a wrapped
// value for a 64-bit integer. These read a number only when it is a whole number that fits:
//
//   const int rank = cohort::json_number::required<int>(j, "rank");        // ProtocolError if not
//   const int pid = cohort::json_number::field<int>(j, "pid", 0);          // 0 when absent
//   std::optional<int64_t> seq = cohort::json_number::whole<int64_t>(j["seq"]);  // nullopt if not
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>

#include "cohort/error.h"

namespace cohort::json_number {

// `v` as T when it is a whole number within T's range; nullopt for anything else (a fraction, a
// string, a number past the range).
template <typename T>
std::optional<T> whole(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if constexpr (std::is_signed_v<T>) {
      if (i < std::numeric_limits<T>::min() || i > std::numeric_limits<T>::max())
        return std::nullopt;
    } else {
      if (i < 0 || static_cast<uint64_t>(i) > std::numeric_limits<T>::max()) return std::nullopt;
    }
    return static_cast<T>(i);
  }
  return std::nullopt;
}

// j[key] as T; `fallback` when j has no such key (or it is null). Throws ProtocolError naming the
// key and its value when it is there and not a whole T.
template <typename T>
T field(const nlohmann::json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (auto n = whole<T>(*it)) return *n;
  throw ProtocolError(std::string("'") + key + "' is " + it->dump() + ", not a whole number in " +
                      std::to_string(std::numeric_limits<T>::min()) + ".." +
                      std::to_string(std::numeric_limits<T>::max()));
}

// j[key] as T. Throws ProtocolError when it is absent or not a whole T.
template <typename T>
T required(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key))
    throw ProtocolError(std::string("'") + key + "' is missing");
  return field<T>(j, key, T{});
}

}  // namespace cohort::json_number
