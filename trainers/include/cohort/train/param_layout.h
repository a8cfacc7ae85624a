// cohort::train::ParamLayout: named tensors carved out of one contiguous float buffer.
//
// A model's parameters live in one allocation and its gradients in another with the same layout,
// so a data-parallel step averages all gradients with one fused allreduce and a checkpoint is one
// block of floats (llm.c's malloc_and_point_parameters). The layout records each tensor's name,
// shape, offset and whether AdamW decays it (weight matrices and embeddings, as build-nanogpt).
//
// Thread safety: immutable after construction; safe to share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort::train {

struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in floats, from the start of the buffer
  size_t numel = 0;
  bool decay = false;  // AdamW weight decay applies
};

class ParamLayout {
 public:
  // Appends a tensor and returns its offset. Offsets are aligned to 16 floats (64 bytes) so each
  // tensor starts on a cache line, both in host memory and in device memory.
  size_t add(std::string name, std::vector<int64_t> shape, bool decay);

  // Total floats of the buffer, padding included.
  size_t size() const { return size_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // The tensor called `name`; throws std::out_of_range when there is none.
  const ParamTensor& at(const std::string& name) const;
  // Number of parameters (padding excluded).
  size_t num_parameters() const;
  // A fingerprint of names, shapes and offsets, stored in checkpoints to refuse a mismatch.
  std::string signature() const;

 private:
  std::vector<ParamTensor> tensors_;
  size_t size_ = 0;
};

}  // namespace cohort::train
