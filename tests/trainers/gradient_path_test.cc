// The NCCL-or-CPU-group decision (gradient_path.h) on made-up GPU lists: the rule, the exchange
// through a real store (MemoryStore, ranks as threads), and the cases the old per-node rule got
// wrong. And the Worker that uses it, with CPU ranks as threads over one store. The same decision
// on this machine's real GPU is in cuda_test.cc (label gpu).
#include "cohort/train/gradient_path.h"
#include "cohort/error.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cohort/rdzv/memory_store.h"
#include "cohort/train/device.h"

#include "cohort/train/worker.h"

#ifdef COHORT_TRAIN_HAVE_RUNTIME
#include "cohort/context.h"
#endif

namespace cohort::train {
namespace {

// Every rank's decision when rank r publishes ids[r], ranks as threads over one store.
std::vector<GradientPath> agree(const std::vector<std::string>& ids) {
  MemoryStore store;
  const int world = static_cast<int>(ids.size());
  std::vector<GradientPath> out(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        out[r] =
            agree_gradient_path(store, "train/gpu/", r, world, ids[r], std::chrono::seconds(30));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

// Checks that every rank chose `nccl` and returns rank 0's reason.
std::string expect_all(const std::vector<GradientPath>& paths, bool nccl) {
  for (size_t r = 0; r < paths.size(); ++r) {
    EXPECT_EQ(paths[r].nccl, nccl) << "rank " << r << ": " << paths[r].reason;
    EXPECT_EQ(paths[r].reason, paths[0].reason) << "rank " << r;
  }
  return paths.empty() ? "" : paths[0].reason;
}

TEST(GradientPath, OneGpuPerRankUnderPerRankVisibleDevicesIsNccl) {
  // Slurm's usual binding: each rank sees one GPU (its index 0), local world size 4 > 1 visible
  // GPU. The old rule (local_world_size <= visible GPUs) chose the CPU group here.
  const auto paths = agree(
      {"nodeA/0000:1b:00.0", "nodeA/0000:3b:00.0", "nodeA/0000:5d:00.0", "nodeA/0000:db:00.0"});
  EXPECT_EQ(expect_all(paths, true), "NCCL: 4 ranks, each on a GPU of its own");
}

TEST(GradientPath, TheSameBusIdOnTwoMachinesIsTwoGpus) {
  const auto paths = agree({"nodeA/0000:3b:00.0", "nodeB/0000:3b:00.0"});
  expect_all(paths, true);
}

TEST(GradientPath, NodesWithDifferentGpuCountsChooseTheSame) {
  // Node A gives each of its two ranks a GPU; node B runs two ranks on one GPU. The old per-node
  // rule had A choose NCCL and B the CPU group: every rank then waited in another collective
  // until the timeout. Now every rank chooses the CPU group and says why.
  const auto paths = agree(
      {"nodeA/0000:1b:00.0", "nodeA/0000:3b:00.0", "nodeB/0000:3b:00.0", "nodeB/0000:3b:00.0"});
  const std::string why = expect_all(paths, false);
  EXPECT_NE(why.find("ranks 2 and 3 share GPU nodeB/0000:3b:00.0"), std::string::npos) << why;
  EXPECT_NE(why.find("staged through host memory"), std::string::npos) << why;
}

TEST(GradientPath, TwoRanksOnOneGpuUseTheCpuGroup) {
  // --device cuda:0 with two local ranks, or two ranks on a one-GPU machine.
  const auto paths = agree({"m/0000:3b:00.0", "m/0000:3b:00.0"});
  const std::string why = expect_all(paths, false);
  EXPECT_NE(why.find("ranks 0 and 1 share"), std::string::npos) << why;
}

TEST(GradientPath, ARankWithoutAGpuMakesItTheCpuGroup) {
  const auto paths = agree({"m/0000:3b:00.0", "", "m/0000:5d:00.0"});
  const std::string why = expect_all(paths, false);
  EXPECT_NE(why.find("rank 1 has no GPU"), std::string::npos) << why;
}

TEST(GradientPath, OneRankOnAGpuIsNccl) {
  expect_all(agree({"m/0000:3b:00.0"}), true);
}

TEST(GradientPath, AMissingRankTimesOut) {
  MemoryStore store;
  EXPECT_THROW(agree_gradient_path(store, "train/gpu/", 0, 2, "m/0000:3b:00.0",
                                   std::chrono::milliseconds(200)),
               StoreTimeoutError);
}

TEST(GradientPath, ACpuDeviceHasNoGpuIdentity) {
  auto cpu = make_cpu_device(1);
  EXPECT_EQ(gpu_identity(*cpu), "");
  EXPECT_EQ(cpu->cuda_index(), -1);
  EXPECT_FALSE(machine_id().empty());
  EXPECT_EQ(machine_id(), machine_id());
}

TEST(GradientPath, AWorkerRejectsAnUnknownDevice) {
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:0x"}) {
    WorkerOptions o;
    o.device = bad;
    try {
      Worker::start(o);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

#ifdef COHORT_TRAIN_HAVE_RUNTIME
// The Worker over a Context built from a store: CPU ranks take the CPU group, whatever the build.
TEST(GradientPath, WorkersOnTheCpuAgreeOnTheCpuGroup) {
  auto store = std::make_shared<MemoryStore>(std::chrono::seconds(30));
  const int world = 2;
  std::vector<std::string> paths(world), comm(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        WorkerIdentity id;
        id.rank = id.local_rank = r;
        id.world_size = id.local_world_size = world;
        id.run_id = "gradient_path_test_" + std::to_string(::getpid());
        id.timeout = std::chrono::seconds(30);
        WorkerOptions o;
        o.device = "cpu";
        o.threads = 1;
        auto w = Worker::start(o, Context::from_store(id, store));
        paths[r] = w->gradient_path();
        comm[r] = w->comm().describe();
        double x = r + 1;
        w->comm().allreduce_sum(&x, 1);
        EXPECT_EQ(x, 3.0);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(paths[r], "CPU group");
    EXPECT_EQ(comm[r], "CPU group");
  }
}
#endif

}  // namespace
}  // namespace cohort::train
