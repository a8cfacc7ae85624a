#include "cohort/base/prometheus.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace cohort::prom {

std::string escape_label(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {  // 2^53
    std::snprintf(buf, sizeof buf, "%.0f", value);
    return buf;
  }
  auto r = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, r.ptr);
}

Histogram::Histogram(std::span<const double> bounds)
    : bounds_(bounds.begin(), bounds.end()), counts_(bounds.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                       bounds_.begin());
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Exposition::family(std::string_view name, std::string_view type, std::string_view help) {
  out_.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void Exposition::series(std::string_view name, std::string_view suffix, Labels labels,
                        std::string_view extra_label, std::string_view extra_value, double value) {
  out_.append(name).append(suffix);
  if (labels.size() > 0 || !extra_label.empty()) {
    out_.push_back('{');
    bool first = true;
    auto put = [&](std::string_view k, std::string_view v) {
      if (!first) out_.push_back(',');
      first = false;
      out_.append(k).append("=\"").append(escape_label(v)).append("\"");
    };
    for (const auto& [k, v] : labels) put(k, v);
    if (!extra_label.empty()) put(extra_label, extra_value);
    out_.push_back('}');
  }
  out_.append(" ").append(number(value)).append("\n");
}

void Exposition::sample(std::string_view name, Labels labels, double value) {
  series(name, "", labels, {}, {}, value);
}

void Exposition::histogram(std::string_view name, Labels labels, const Histogram& h) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    series(name, "_bucket", labels, "le", number(h.bounds()[i]), static_cast<double>(cumulative));
  }
  series(name, "_bucket", labels, "le", "+Inf", static_cast<double>(h.count()));
  series(name, "_sum", labels, {}, {}, h.sum());
  series(name, "_count", labels, {}, {}, static_cast<double>(h.count()));
}

}  // namespace cohort::prom
