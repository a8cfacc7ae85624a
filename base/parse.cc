#include "cohort/base/parse.h"

#include <charconv>
#include <cmath>
#include <string>

namespace cohort {
namespace {

// One optional '+' (from_chars takes '-' itself): "+-1" and "++1" are not numbers.
bool strip_plus(std::string_view* text) {
  if (text->empty() || text->front() != '+') return true;
  text->remove_prefix(1);
  return !text->empty() && text->front() != '-' && text->front() != '+';
}

}  // namespace

std::optional<int64_t> parse_int64(std::string_view text) {
  if (!strip_plus(&text) || text.empty()) return std::nullopt;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<int> parse_int(std::string_view text, int min, int max) {
  auto v = parse_int64(text);
  if (!v || *v < min || *v > max) return std::nullopt;
  return static_cast<int>(*v);
}

std::optional<double> parse_double(std::string_view text) {
  if (!strip_plus(&text) || text.empty()) return std::nullopt;
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v))
    return std::nullopt;
  return v;
}

std::optional<std::chrono::milliseconds> parse_seconds(std::string_view text) {
  auto v = parse_double(text);
  if (!v || *v < 0 || *v > 1e12) return std::nullopt;
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(*v * 1000.0)));
}

}  // namespace cohort
