// ThreadGroup: a cohort::ProcessGroup whose ranks are threads of one test process, so
// data-parallel trainers can be tested without a launcher. Collectives meet at a barrier, read
// each other's buffers and meet again; sums run in rank order, so results are deterministic.
#pragma once

#include <barrier>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cohort/process_group.h"

namespace cohort::train::testing {

class ThreadGroupState {
 public:
  explicit ThreadGroupState(int size) : size_(size), sync_(size), slots_(size) {}
  int size() const { return size_; }
  void arrive() { sync_.arrive_and_wait(); }
  const void*& slot(int rank) { return slots_[rank]; }

 private:
  int size_;
  std::barrier<> sync_;
  std::vector<const void*> slots_;
};

class ThreadGroup final : public cohort::ProcessGroup {
 public:
  ThreadGroup(std::shared_ptr<ThreadGroupState> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return state_->size(); }

  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override {
    state_->slot(rank_) = data;
    state_->arrive();
    std::vector<char> result(count * dtype_size(dtype));
    switch (dtype) {
      case DataType::kFloat32:
        reduce<float>(result.data(), count, op);
        break;
      case DataType::kFloat64:
        reduce<double>(result.data(), count, op);
        break;
      case DataType::kInt32:
        reduce<int32_t>(result.data(), count, op);
        break;
      case DataType::kInt64:
        reduce<int64_t>(result.data(), count, op);
        break;
      default:
        throw std::invalid_argument("ThreadGroup: unsupported dtype");
    }
    state_->arrive();  // everyone has read every buffer
    std::memcpy(data, result.data(), result.size());
    state_->arrive();
  }

  void broadcast(void* data, size_t count, DataType dtype, int root) override {
    state_->slot(rank_) = data;
    state_->arrive();
    if (rank_ != root) std::memcpy(data, state_->slot(root), count * dtype_size(dtype));
    state_->arrive();
  }

  void allgather(const void* in, void* out, size_t count, DataType dtype) override {
    state_->slot(rank_) = in;
    state_->arrive();
    const size_t bytes = count * dtype_size(dtype);
    for (int r = 0; r < size(); ++r) {
      std::memcpy(static_cast<char*>(out) + r * bytes, state_->slot(r), bytes);
    }
    state_->arrive();
  }

  void reduce_scatter(const void*, void*, size_t, DataType, ReduceOp) override {
    throw std::logic_error("ThreadGroup::reduce_scatter is not needed by the trainers");
  }

  void barrier() override { state_->arrive(); }

  std::unique_ptr<cohort::ProcessGroup> new_group(std::vector<int>) override {
    throw std::logic_error("ThreadGroup::new_group is not needed by the trainers");
  }

 private:
  template <typename T>
  void reduce(char* out, size_t count, ReduceOp op) {
    T* r = reinterpret_cast<T*>(out);
    std::memcpy(r, state_->slot(0), count * sizeof(T));
    for (int k = 1; k < size(); ++k) {
      const T* x = static_cast<const T*>(state_->slot(k));
      for (size_t i = 0; i < count; ++i) {
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg:
            r[i] += x[i];
            break;
          case ReduceOp::kMin:
            r[i] = x[i] < r[i] ? x[i] : r[i];
            break;
          case ReduceOp::kMax:
            r[i] = x[i] > r[i] ? x[i] : r[i];
            break;
        }
      }
    }
    if (op == ReduceOp::kAvg) {
      for (size_t i = 0; i < count; ++i) r[i] /= static_cast<T>(size());
    }
  }

  std::shared_ptr<ThreadGroupState> state_;
  int rank_;
};

// Runs fn(rank, group) on `world` threads and rethrows the first exception any of them threw.
inline void run_ranks(int world, const std::function<void(int, cohort::ProcessGroup&)>& fn) {
  auto state = std::make_shared<ThreadGroupState>(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      ThreadGroup pg(state, r);
      try {
        fn(r, pg);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace cohort::train::testing
