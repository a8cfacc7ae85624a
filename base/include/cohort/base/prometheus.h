// Prometheus' text exposition format (version 0.0.4), written by hand: the few rules it has are
// cheaper to follow than a client library is to carry. A metrics endpoint builds one Exposition
// per scrape from what its owner knows at that moment; nothing here keeps state between scrapes
// except Histogram, which its owner updates as events happen.
//
//   prom::Exposition out;
//   out.family("cohortd_connections", "gauge", "Open client connections");
//   out.sample("cohortd_connections", {{"dialect", "current"}}, 12);
//   std::string text = out.text();
//
// Reference: https://prometheus.io/docs/instrumenting/exposition_formats/
// Thread safety: none; each object belongs to one thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort::prom {

// The Content-Type of the text format.
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

// A label value with backslash, double quote and newline escaped.
std::string escape_label(std::string_view value);
// Whole numbers (bytes, counts, hertz) in full; others in the shortest text that reads back the
// same; NaN and infinities as the format spells them.
std::string number(double value);

using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

// A histogram with fixed upper bounds (ascending, in the unit of its name). observe() is a few
// comparisons and two additions: cheap enough for every request of a store.
class Histogram {
 public:
  explicit Histogram(std::span<const double> bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  // counts()[i]: observations <= bounds()[i] and > bounds()[i-1]; the last entry: above all.
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Exposition {
 public:
  // Starts a family: its HELP and TYPE lines ("counter", "gauge", "histogram"). Every sample
  // that follows, up to the next family, must belong to it.
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, Labels labels, double value);
  // A whole series of a histogram family: its cumulative _bucket lines, _sum and _count.
  void histogram(std::string_view name, Labels labels, const Histogram& h);
  // Text another writer produced (a family or several, each with its own HELP and TYPE).
  void append(std::string_view text) { out_.append(text); }

  const std::string& text() const { return out_; }

 private:
  void series(std::string_view name, std::string_view suffix, Labels labels,
              std::string_view extra_label, std::string_view extra_value, double value);
  std::string out_;
};

}  // namespace cohort::prom
