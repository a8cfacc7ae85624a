// The NCCL process group with one rank on this machine's GPU (label gpu; skips without a device,
// fails instead under COHORT_REQUIRE_GPU=1; two ranks cannot share one GPU in one NCCL
// communicator). Every collective, dtype and op against
// the host reference, plus a subgroup and the error path for a bad root.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "../common/require_gpu.h"
#include "cohort/context.h"
#include "cohort/nccl_process_group.h"
#include "cohort/rdzv/memory_store.h"

namespace cohort {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n;
  explicit DeviceBuffer(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
    if (n > 0) cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    if (n > 0) cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

std::unique_ptr<ProcessGroup> one_rank_group(MemoryStore& store) {
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);
  return new_nccl_process_group(store, 0, 1, 0, o, "nccl_uid/test/0/0");
}

TEST(NcclGroup, OneRankCollectivesMatchTheHost) {
  COHORT_SKIP_UNLESS_GPU(have_gpu());
  MemoryStore store;
  auto pg = one_rank_group(store);
  ASSERT_EQ(pg->size(), 1);
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>(i % 13) - 6;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax}) {
      DeviceBuffer<float> d(h);
      pg->allreduce(d.p, n, DataType::kFloat32, op);
      EXPECT_EQ(d.get(), h) << reduce_op_name(op) << " " << n;  // one rank: the identity
    }
    DeviceBuffer<float> b(h);
    pg->broadcast(b.p, n, DataType::kFloat32, 0);
    EXPECT_EQ(b.get(), h);
    DeviceBuffer<float> in(h), out(std::vector<float>(n, 0));
    pg->allgather(in.p, out.p, n, DataType::kFloat32);
    EXPECT_EQ(out.get(), h);
    DeviceBuffer<float> rs(std::vector<float>(n, 0));
    pg->reduce_scatter(in.p, rs.p, n, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(rs.get(), h);
  }
  // Other dtypes go through the same path.
  DeviceBuffer<int64_t> i64(std::vector<int64_t>{1, -2, 3});
  pg->allreduce(i64.p, 3, DataType::kInt64, ReduceOp::kMax);
  EXPECT_EQ(i64.get(), (std::vector<int64_t>{1, -2, 3}));
  DeviceBuffer<double> f64(std::vector<double>{0.5, 1.5});
  pg->allreduce(f64.p, 2, DataType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(f64.get(), (std::vector<double>{0.5, 1.5}));
  DeviceBuffer<int32_t> i32(std::vector<int32_t>{7});
  pg->allreduce(i32.p, 1, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(i32.get(), std::vector<int32_t>{7});
  DeviceBuffer<uint16_t> bf(std::vector<uint16_t>{BFloat16::from_float(2.5f).bits});
  pg->allreduce(bf.p, 1, DataType::kBFloat16, ReduceOp::kSum);
  EXPECT_EQ(BFloat16{bf.get()[0]}.to_float(), 2.5f);
  pg->barrier();
  auto sub = pg->new_group({0});
  ASSERT_NE(sub, nullptr);
  sub->barrier();
  EXPECT_THROW(pg->broadcast(f64.p, 1, DataType::kFloat64, 1), Error);
}

TEST(NcclGroup, UniqueIdGoesThroughTheStore) {
  COHORT_SKIP_UNLESS_GPU(have_gpu());
  MemoryStore store;
  auto pg = one_rank_group(store);
  EXPECT_EQ(store.get("nccl_uid/test/0/0").size(), 128u);  // NCCL_UNIQUE_ID_BYTES
}

// From a Context, on the device the caller names (a trainer passes its model's): the group leaves
// that device current, and refuses one that is not visible.
TEST(NcclGroup, FromAContextOnTheGivenDevice) {
  COHORT_SKIP_UNLESS_GPU(have_gpu());
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  WorkerIdentity id;
  id.run_id = "nccl_test";
  id.timeout = std::chrono::seconds(60);
  Context ctx = Context::from_store(id, std::make_shared<MemoryStore>());
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);
  const int device = count - 1;
  auto pg = new_nccl_process_group(ctx, device, o);
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, device);
  pg->barrier();
  EXPECT_THROW(new_nccl_process_group(ctx, count, o), CudaError);
}

}  // namespace
}  // namespace cohort
