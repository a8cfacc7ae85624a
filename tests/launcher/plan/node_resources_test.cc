// --nproc-per-node resolved against the CPUs and GPUs of this node.
#include "plan/node_resources.h"

#include <gtest/gtest.h>

#include "cohort/error.h"

namespace cohort::launch {
namespace {

TEST(NodeResources, NprocPerNode) {
  std::map<std::string, std::string> no_gpu{{"CUDA_VISIBLE_DEVICES", ""}};
  EXPECT_EQ(resolve_nproc_per_node("4", no_gpu), 4);
  EXPECT_EQ(resolve_nproc_per_node("cpu", no_gpu), cpu_count());
  EXPECT_EQ(resolve_nproc_per_node("auto", no_gpu), cpu_count());
  EXPECT_THROW(resolve_nproc_per_node("gpu", no_gpu), UsageError);
  EXPECT_THROW(resolve_nproc_per_node("0", no_gpu), UsageError);
  EXPECT_THROW(resolve_nproc_per_node("two", no_gpu), UsageError);
  std::map<std::string, std::string> two{{"CUDA_VISIBLE_DEVICES", "0,3"}};
  EXPECT_EQ(resolve_nproc_per_node("gpu", two), 2);
  EXPECT_EQ(resolve_nproc_per_node("auto", two), 2);
}

}  // namespace
}  // namespace cohort::launch
