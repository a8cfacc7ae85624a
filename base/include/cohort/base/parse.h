// Strict parsing of numbers from flags, environment variables and store records.
//
// "Strict": the whole text is the number (no leading or trailing spaces, no "12abc"), in range for
// the type; anything else is nullopt, so every caller can name the bad input in its own error.
// Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cohort {

// A decimal integer with an optional '-' or '+'.
std::optional<int64_t> parse_int64(std::string_view text);

// A decimal integer in [min, max].
std::optional<int> parse_int(std::string_view text, int min, int max);

// A finite decimal number (fractions and exponents allowed).
std::optional<double> parse_double(std::string_view text);

// Seconds as a finite number >= 0 (fractions allowed), rounded to milliseconds.
std::optional<std::chrono::milliseconds> parse_seconds(std::string_view text);

}  // namespace cohort
