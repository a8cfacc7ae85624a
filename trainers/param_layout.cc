#include "cohort/train/param_layout.h"

#include <stdexcept>

namespace cohort::train {

size_t ParamLayout::add(std::string name, std::vector<int64_t> shape, bool decay) {
  size_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<size_t>(d);
  const size_t offset = (size_ + 15) / 16 * 16;
  tensors_.push_back(ParamTensor{std::move(name), std::move(shape), offset, numel, decay});
  size_ = offset + numel;
  return offset;
}

const ParamTensor& ParamLayout::at(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return t;
  }
  throw std::out_of_range("no parameter tensor named '" + name + "'");
}

size_t ParamLayout::num_parameters() const {
  size_t n = 0;
  for (const auto& t : tensors_) n += t.numel;
  return n;
}

std::string ParamLayout::signature() const {
  std::string s;
  for (const auto& t : tensors_) {
    s += t.name + "(";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) s += ",";
      s += std::to_string(t.shape[i]);
    }
    s += ")@" + std::to_string(t.offset) + ";";
  }
  return s;
}

}  // namespace cohort::train
