#include "cohort/train/comm.h"

#include <zlib.h>

#include <cstring>

namespace cohort::train {

Comm::Comm(cohort::ProcessGroup& pg, Device& dev, bool pg_uses_device_memory)
    : pg_(&pg),
      dev_(&dev),
      direct_(pg_uses_device_memory || dev.kind() == DeviceKind::kCpu),
      host_via_device_(pg_uses_device_memory && dev.kind() != DeviceKind::kCpu) {}

const char* Comm::describe() const {
  if (!pg_) return "one process";
  if (!direct_) return "CPU group, staged through host memory";
  return dev_->kind() == DeviceKind::kCpu ? "CPU group" : "NCCL";
}

void Comm::host_allreduce(void* host, size_t count, DataType dtype, ReduceOp op) {
  if (!host_via_device_) {
    pg_->allreduce(host, count, dtype, op);
    return;
  }
  // A group over device memory (NCCL) cannot read host buffers: go through the device.
  const size_t bytes = count * dtype_size(dtype);
  DeviceBuffer<uint8_t> tmp(*dev_, bytes);
  dev_->upload(tmp.get(), host, bytes);
  pg_->allreduce(tmp.get(), count, dtype, op);
  dev_->download(host, tmp.get(), bytes);
}

void Comm::host_broadcast(void* host, size_t count, DataType dtype, int root) {
  if (!host_via_device_) {
    pg_->broadcast(host, count, dtype, root);
    return;
  }
  const size_t bytes = count * dtype_size(dtype);
  DeviceBuffer<uint8_t> tmp(*dev_, bytes);
  dev_->upload(tmp.get(), host, bytes);
  pg_->broadcast(tmp.get(), count, dtype, root);
  dev_->download(host, tmp.get(), bytes);
}

void Comm::allreduce_sum(float* dev_buf, size_t n) {
  if (!pg_ || pg_->size() == 1 || n == 0) return;
  if (direct_) {
    pg_->allreduce(dev_buf, n, DataType::kFloat32, ReduceOp::kSum);
    return;
  }
  staging_.resize(n);
  dev_->download(staging_.data(), dev_buf, n * sizeof(float));
  pg_->allreduce(staging_.data(), n, DataType::kFloat32, ReduceOp::kSum);
  dev_->upload(dev_buf, staging_.data(), n * sizeof(float));
}

void Comm::allreduce_sum(double* host, size_t n) {
  if (!pg_ || pg_->size() == 1 || n == 0) return;
  host_allreduce(host, n, DataType::kFloat64, ReduceOp::kSum);
}

void Comm::broadcast(float* dev_buf, size_t n, int root) {
  if (!pg_ || pg_->size() == 1 || n == 0) return;
  if (direct_) {
    pg_->broadcast(dev_buf, n, DataType::kFloat32, root);
    return;
  }
  staging_.resize(n);
  dev_->download(staging_.data(), dev_buf, n * sizeof(float));
  pg_->broadcast(staging_.data(), n, DataType::kFloat32, root);
  dev_->upload(dev_buf, staging_.data(), n * sizeof(float));
}

void Comm::broadcast(std::string& s, int root) {
  if (!pg_ || pg_->size() == 1) return;
  int64_t len = static_cast<int64_t>(s.size());
  host_broadcast(&len, 1, DataType::kInt64, root);
  // Bytes travel as int64 words (the group has no byte type).
  std::vector<int64_t> words((static_cast<size_t>(len) + 7) / 8, 0);
  if (pg_->rank() == root && !s.empty()) std::memcpy(words.data(), s.data(), s.size());
  if (!words.empty()) host_broadcast(words.data(), words.size(), DataType::kInt64, root);
  s.assign(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(len));
}

void Comm::check_same(uint64_t value, const std::string& what) {
  if (!pg_ || pg_->size() == 1) return;
  int64_t v0 = static_cast<int64_t>(value);
  host_broadcast(&v0, 1, DataType::kInt64, 0);
  int64_t differs = static_cast<uint64_t>(v0) != value ? 1 : 0;
  host_allreduce(&differs, 1, DataType::kInt64, ReduceOp::kSum);
  if (differs != 0) {
    throw cohort::Error(what + " differs between ranks: " + std::to_string(differs) + " of " +
                        std::to_string(pg_->size()) +
                        " ranks disagree with rank 0 (same seed and code on every rank?)");
  }
}

void Comm::barrier() {
  if (pg_ && pg_->size() > 1) pg_->barrier();
}

uint32_t device_checksum(Device& dev, const float* buf, size_t n) {
  std::vector<float> host(n);
  dev.download(host.data(), buf, n * sizeof(float));
  return static_cast<uint32_t>(crc32_z(
      crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(host.data()), n * sizeof(float)));
}

}  // namespace cohort::train
