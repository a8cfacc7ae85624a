// The Slurm hostlist grammar (docs/SLURM.md §4.2, and the inputs that broke other parsers),
// per-node counts, and what a launcher derives from SLURM_* variables.
#include "cohort/base/slurm.h"

#include <gtest/gtest.h>

namespace cohort::slurm {
namespace {

using Hosts = std::vector<std::string>;

TEST(Hostlist, RangesAndSinglesMixed) {
  EXPECT_EQ(expand_hostlist("tux[0-2,12,20-21]"),
            (Hosts{"tux0", "tux1", "tux2", "tux12", "tux20", "tux21"}));
}

TEST(Hostlist, ZeroPaddingIsKept) {
  auto h = expand_hostlist("linux[0000-1023]");
  ASSERT_EQ(h.size(), 1024u);
  EXPECT_EQ(h.front(), "linux0000");
  EXPECT_EQ(h[7], "linux0007");
  EXPECT_EQ(h.back(), "linux1023");
  EXPECT_EQ(expand_hostlist("n[9-10]"), (Hosts{"n9", "n10"}));
  EXPECT_EQ(expand_hostlist("n[09-10]"), (Hosts{"n09", "n10"}));
}

TEST(Hostlist, SeveralBracketGroupsAreACartesianProduct) {
  auto h = expand_hostlist("rack[0-63]_blade[0-41]");
  ASSERT_EQ(h.size(), 64u * 42u);
  EXPECT_EQ(h[0], "rack0_blade0");
  EXPECT_EQ(h[1], "rack0_blade1");
  EXPECT_EQ(h[42], "rack1_blade0");
  EXPECT_EQ(expand_hostlist("a[1-2]-b[3-4]"), (Hosts{"a1-b3", "a1-b4", "a2-b3", "a2-b4"}));
}

TEST(Hostlist, BracketsAfterSeparators) {
  // Broke MPICH Hydra (pmodels/mpich#2786) and Open OnDemand.
  EXPECT_EQ(expand_hostlist("host-[001-002]"), (Hosts{"host-001", "host-002"}));
  EXPECT_EQ(expand_hostlist("c457-[011-012]"), (Hosts{"c457-011", "c457-012"}));
}

TEST(Hostlist, NamesWithAndWithoutBrackets) {
  EXPECT_EQ(expand_hostlist("gpu[01-04,07],cpu3"),
            (Hosts{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3"}));
  // Megatron-Bridge PR 3807's case.
  EXPECT_EQ(expand_hostlist("nodeA,nodeB[001,003],nodeC"),
            (Hosts{"nodeA", "nodeB001", "nodeB003", "nodeC"}));
  EXPECT_EQ(expand_hostlist("host[001,003-004,006]"),
            (Hosts{"host001", "host003", "host004", "host006"}));
}

TEST(Hostlist, CommaInsideBracketsIsNotASeparator) {
  // Lightning-AI/pytorch-lightning#14896 turned "linux[1,2]" into "linux[1".
  EXPECT_EQ(expand_hostlist("linux[1,2]"), (Hosts{"linux1", "linux2"}));
}

TEST(Hostlist, PlainNamesAndWhitespace) {
  EXPECT_EQ(expand_hostlist("localhost"), (Hosts{"localhost"}));
  EXPECT_EQ(expand_hostlist("n1 n2,n3"), (Hosts{"n1", "n2", "n3"}));
  EXPECT_EQ(expand_hostlist("n[1-2,4]"), (Hosts{"n1", "n2", "n4"}));
  EXPECT_TRUE(expand_hostlist("").empty());
}

TEST(Hostlist, MalformedInputIsRejectedWithTheReason) {
  auto message = [](const std::string& text) {
    try {
      expand_hostlist(text);
    } catch (const cohort::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("n[1-").find("without ']'"), std::string::npos);
  EXPECT_NE(message("n1]").find("without '['"), std::string::npos);
  EXPECT_NE(message("n[3-1]").find("backwards"), std::string::npos);
  EXPECT_NE(message("n[a-b]").find("numbers"), std::string::npos);
  EXPECT_NE(message("n[]").find("numbers"), std::string::npos);
  EXPECT_NE(message("n[1-2").find("']'"), std::string::npos);
  // Slurm caps expansion rather than allocate without bound.
  EXPECT_NE(message("a[0-999999999].b[0-9]").find("too large"), std::string::npos);
  EXPECT_NE(message("a[0-9999]b[0-99]").find("more than"), std::string::npos);
}

TEST(Counts, RepetitionSyntax) {
  EXPECT_EQ(expand_counts("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_counts("72(x2),36"), (std::vector<int>{72, 72, 36}));
  EXPECT_EQ(expand_counts("4"), (std::vector<int>{4}));
  EXPECT_THROW(expand_counts("2(x"), cohort::UsageError);
}

// Found by fuzz_hostlist: both once allocated gigabytes before checking any bound.
TEST(Counts, TooManyNodesIsRejectedBeforeAllocating) {
  EXPECT_THROW(expand_counts("2(x999999994),1"), cohort::UsageError);
  EXPECT_EQ(expand_counts("1(x3)", 3).size(), 3u);
  EXPECT_THROW(expand_counts("1(x3),1", 3), cohort::UsageError);
}

TEST(Hostlist, ManyFullRangesInOneGroupAreRejectedBeforeAllocating) {
  std::string group;
  for (int i = 0; i < 520; ++i) group += i ? ",0-65535" : "0-65535";
  EXPECT_THROW(expand_hostlist("n[" + group + "]"), cohort::UsageError);
  EXPECT_EQ(expand_hostlist("n[1-3]", 3).size(), 3u);
  EXPECT_THROW(expand_hostlist("n[1-3,5]", 3), cohort::UsageError);
}

TEST(SlurmEnv, FromAStepOnTheSecondNode) {
  // As seen by rank 1 of `srun -N2 --ntasks-per-node=1` (docs/SLURM.md).
  std::map<std::string, std::string> env{{"SLURM_JOB_ID", "41"},
                                         {"SLURM_STEP_ID", "0"},
                                         {"SLURM_NODEID", "1"},
                                         {"SLURM_JOB_NODELIST", "n[1-2]"},
                                         {"SLURM_STEP_NODELIST", "n[1-2]"},
                                         {"SLURM_STEP_NUM_NODES", "2"},
                                         {"SLURM_JOB_NUM_NODES", "2"},
                                         {"SLURM_PROCID", "1"},
                                         {"SLURM_LOCALID", "0"},
                                         {"SLURM_NTASKS", "2"},
                                         {"SLURM_NTASKS_PER_NODE", "1"},
                                         {"SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"}};
  auto s = SlurmEnv::from_env(env);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->job_id, 41u);
  EXPECT_EQ(s->step_id, 0u);
  EXPECT_EQ(s->node_id, 1);
  EXPECT_EQ(s->num_nodes, 2);
  EXPECT_EQ(s->nodes, (Hosts{"n1", "n2"}));
  EXPECT_EQ(s->procid, 1);
  EXPECT_EQ(s->ntasks_per_node, 1);
  EXPECT_EQ(s->run_id(), "slurm-41-0");
  EXPECT_EQ(s->derived_port(), 20041);
  // "n1" resolves nowhere here: the launch node's address stands in.
  EXPECT_EQ(s->master_address(), "127.0.0.1");
}

TEST(SlurmEnv, BatchStepAndAbsence) {
  EXPECT_FALSE(SlurmEnv::from_env({}));
  auto s = SlurmEnv::from_env({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "localhost"}});
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->step_id);
  EXPECT_EQ(s->run_id(), "slurm-7-batch");
  EXPECT_EQ(s->master_address(), "127.0.0.1");  // localhost resolves
  EXPECT_THROW(SlurmEnv::from_env({{"SLURM_JOB_ID", "x7"}}), cohort::UsageError);
}

}  // namespace
}  // namespace cohort::slurm
