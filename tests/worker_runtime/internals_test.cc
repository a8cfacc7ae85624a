// Tests of libcohort's internals: reduction kernels, topology, segment sweep, error-file JSON.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cohort/error_file.h"
#include "cpu/algorithms.h"
#include "cpu/reduce_kernels.h"
#include "cpu/shm_segment.h"
#include "cpu/shm_sync.h"
#include "cpu/topology.h"

namespace cohort::detail {
namespace {

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(BFloat16::from_float(1.0f).bits, 0x3F80);
  EXPECT_EQ(BFloat16::from_float(1.0f + 1.0f / 256).bits, 0x3F80);  // tie, even stays
  EXPECT_EQ(BFloat16::from_float(1.0f + 3.0f / 256).bits, 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(BFloat16::from_float(-2.5f).to_float(), -2.5f);
  EXPECT_TRUE(std::isnan(BFloat16::from_float(NAN).to_float()));
  EXPECT_EQ(dtype_name(DataType::kBFloat16), "bfloat16");
  EXPECT_EQ(reduce_op_name(ReduceOp::kAvg), "avg");
}

TEST(ReduceKernels, FoldsManySourcesInEveryType) {
  for (int nsrc = 1; nsrc <= 5; ++nsrc) {
    std::vector<std::vector<int64_t>> src(nsrc, std::vector<int64_t>(5000));
    std::vector<const void*> ptrs;
    for (int k = 0; k < nsrc; ++k) {
      for (size_t i = 0; i < 5000; ++i)
        src[k][i] = static_cast<int64_t>((i * 31 + k * 7) % 23) - 11;
      ptrs.push_back(src[k].data());
    }
    std::vector<int64_t> sum(5000), mn(5000), mx(5000);
    reduce(sum.data(), ptrs.data(), nsrc, 5000, DataType::kInt64, Op::kSum);
    reduce(mn.data(), ptrs.data(), nsrc, 5000, DataType::kInt64, Op::kMin);
    reduce(mx.data(), ptrs.data(), nsrc, 5000, DataType::kInt64, Op::kMax);
    for (size_t i = 0; i < 5000; ++i) {
      int64_t s = 0, lo = src[0][i], hi = src[0][i];
      for (int k = 0; k < nsrc; ++k) {
        s += src[k][i];
        lo = std::min(lo, src[k][i]);
        hi = std::max(hi, src[k][i]);
      }
      ASSERT_EQ(sum[i], s);
      ASSERT_EQ(mn[i], lo);
      ASSERT_EQ(mx[i], hi);
    }
  }
}

TEST(ReduceKernels, BFloat16AccumulatesInFloatAndRoundsOnce) {
  // 256 + 1 + 1 is 258 exactly in float but 256 when rounded after every step.
  std::vector<uint16_t> a(3, BFloat16::from_float(256).bits), b(3, BFloat16::from_float(1).bits);
  const void* srcs[3] = {a.data(), b.data(), b.data()};
  std::vector<uint16_t> out(3);
  reduce(out.data(), srcs, 3, 3, DataType::kBFloat16, Op::kSum);
  EXPECT_EQ(BFloat16{out[0]}.to_float(), 258.0f);
}

TEST(ReduceKernels, BitOrAndDivide) {
  std::vector<float> a{1.5f, 0, 0}, b{0, -2.0f, 0};
  std::vector<float> out(3);
  const void* srcs[2] = {a.data(), b.data()};
  reduce(out.data(), srcs, 2, 3, DataType::kFloat32, Op::kBitOr);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f, 0}));
  std::vector<int32_t> v{7, -7, 8};
  divide(v.data(), 3, DataType::kInt32, 2);
  EXPECT_EQ(v, (std::vector<int32_t>{3, -3, 4}));
}

TEST(Topology, ModesAndColumns) {
  auto t = Topology::build(2, {"a", "a", "b", "b"}, true);
  EXPECT_EQ(t.mode, Topology::Mode::kHierarchical);
  EXPECT_EQ(t.host, 1);
  EXPECT_EQ(t.local, 0);
  EXPECT_EQ(t.columns, 2);
  EXPECT_EQ(t.column(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(Topology::build(0, {"a", "a"}, true).mode, Topology::Mode::kShm);
  EXPECT_EQ(Topology::build(0, {"a", "a"}, false).mode, Topology::Mode::kTcp);
  EXPECT_EQ(Topology::build(0, {"a"}, true).mode, Topology::Mode::kSingle);
  auto u = Topology::build(1, {"a", "b", "a"}, true);
  EXPECT_EQ(u.hosts, (std::vector<std::vector<int>>{{0, 2}, {1}}));
  EXPECT_EQ(u.columns, 1);
}

TEST(Split, AlignedPartsCoverTheRange) {
  for (size_t count : {0, 1, 15, 16, 17, 1000, 4099}) {
    for (int parts = 1; parts <= 5; ++parts) {
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const Range r = split(count, parts, i, 4);
        EXPECT_EQ(r.begin, next);
        if (i + 1 < parts && r.size() > 0) {
          EXPECT_EQ(r.begin % 16, 0u);
        }
        next = r.end;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(ShmSegment, SweepRemovesSegmentsOfDeadCreatorsOnly) {
  // A segment whose recorded creator is a reaped child (certainly dead) and one of ours.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::string dead = "/cohort-sweeptest-dead-" + std::to_string(::getpid());
  const std::string live = "/cohort-sweeptest-live-" + std::to_string(::getpid());
  {
    ShmSegment d = ShmSegment::create(dead, 8192);
    static_cast<ShmHeader*>(d.data())->magic = kShmMagic;
    static_cast<ShmHeader*>(d.data())->creator_pid = child;
    ShmSegment l = ShmSegment::create(live, 8192);
    static_cast<ShmHeader*>(l.data())->magic = kShmMagic;
    static_cast<ShmHeader*>(l.data())->creator_pid = ::getpid();
    EXPECT_GE(sweep_stale_segments(), 1);
    EXPECT_NE(::access(("/dev/shm" + live).c_str(), F_OK), -1);
    EXPECT_EQ(::access(("/dev/shm" + dead).c_str(), F_OK), -1);
  }
  EXPECT_EQ(::access(("/dev/shm" + live).c_str(), F_OK), -1);  // the creator's handle unlinked it
}

TEST(ErrorFileJson, HasTorchrunsShape) {
  const auto j = nlohmann::json::parse(error_file_json("ValueError: \"x\"\n", "a\nb", 1700000000));
  EXPECT_EQ(j["message"]["message"], "ValueError: \"x\"\n");
  EXPECT_EQ(j["message"]["extraInfo"]["py_callstack"], "a\nb");
  EXPECT_EQ(j["message"]["extraInfo"]["timestamp"], "1700000000");
  EXPECT_NE(current_stack_trace().find("#0"), std::string::npos);
}

}  // namespace
}  // namespace cohort::detail
