// The judgement of a hang from every rank's probe answer (failure/hang_analysis.h): the rank that
// never entered the collective the others wait in, a desynchronised call, a collective nobody
// finishes, a rank that stopped on its own, and what is never a hang (an evaluation phase, a wait
// shorter than the timeout). Answers are built as PyTorch 2.x (Flight Recorder), PyTorch 1.13
// (sequence numbers and stacks) and libcohort write them.
#include "failure/hang_analysis.h"

#include <gtest/gtest.h>

namespace cohort::launch {
namespace {

using hang_probe::CollectiveEntry;
using hang_probe::ProbeAnswer;

constexpr double kNow = 1764790000.0;

// A rank's answer at kNow, its main thread in `function` at `file`:`line`.
ProbeAnswer answer(int pid, const std::string& file, int line, const std::string& function,
                   const std::string& source = "") {
  ProbeAnswer a;
  a.pid = pid;
  a.time = kNow;
  a.threads = {{"MainThread",
                true,
                {{"train.py", 40, "<module>", "train()"}, {file, line, function, source}}},
               {"pin_memory", false, {{"queue.py", 180, "get", ""}}}};
  a.torch = "2.15.0";
  return a;
}

// PyTorch 2.x: group "0" of `world` ranks, `issued` collectives, the last one pending since
// `waiting_s` ago (0: none pending).
void on_fr(ProbeAnswer* a, int world, int64_t issued, double waiting_s,
           const std::string& op = "gloo:all_reduce", const std::string& in = "[[520]]") {
  a->flight_recorder = true;
  hang_probe::GroupProgress g{"0", "gloo", {}, issued};
  for (int r = 0; r < world; ++r) g.ranks.push_back(r);
  a->groups.push_back(g);
  CollectiveEntry done;
  done.group = "0";
  done.seq = waiting_s > 0 ? issued - 1 : issued;
  done.op = "all_reduce";
  done.done = true;
  done.since = kNow - 100;
  a->collectives.push_back(done);
  if (waiting_s > 0) {
    CollectiveEntry e;
    e.group = "0";
    e.seq = issued;
    e.op = op.substr(op.find(':') + 1);
    e.in_sizes = in;
    e.dtypes = "[\"Float\"]";
    e.since = kNow - waiting_s;
    e.timeout_s = 1800;
    a->collectives.push_back(e);
  }
}

RankProbe rank(int r, std::optional<ProbeAnswer> a, double silent_s, bool beaten = true) {
  RankProbe p;
  p.rank = r;
  p.node_rank = r / 2;
  p.local_rank = r % 2;
  p.host = "n" + std::to_string(r / 2);
  p.pid = 100 + r;
  p.silent_s = silent_s;
  p.beaten = beaten;
  p.answer = std::move(a);
  if (!p.answer) p.no_answer = "no answer in time";
  return p;
}

constexpr const char* kC10d = "/torch/distributed/distributed_c10d.py";

TEST(HangAnalysis, TheRankThatNeverEnteredTheCollectiveIsTheCulprit) {
  std::vector<RankProbe> ranks;
  for (int r : {0, 2, 3}) {
    ProbeAnswer a = answer(100 + r, "/torch/autograd/graph.py", 1113, "_engine_run_backward");
    on_fr(&a, 4, 26, 12.0);
    ranks.push_back(rank(r, a, 12.5));
  }
  ProbeAnswer late = answer(101, "loader.py", 9, "stuck_in_data_loading", "time.sleep(600)");
  on_fr(&late, 4, 25, 0);
  ranks.insert(ranks.begin() + 1, rank(1, late, 12.6));

  HangReport r = analyse_hang(ranks, 10);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung) << r.summary;
  ASSERT_EQ(r.culprits.size(), 1u);
  EXPECT_EQ(r.culprits[0].rank, 1);
  EXPECT_EQ(r.culprits[0].reason,
            "hung: never entered all_reduce ([520] Float), collective 26 of the default group, "
            "that ranks 0, 2, 3 have waited in for 12.0 s; its last was collective 25 "
            "(all_reduce)");
  EXPECT_NE(r.culprits[0].stack.find("File \"loader.py\", line 9, in stuck_in_data_loading\n"
                                     "    time.sleep(600)\n"),
            std::string::npos)
      << r.culprits[0].stack;
  EXPECT_NE(r.culprits[0].stack.find("Thread pin_memory: queue.py:180 in get"), std::string::npos);
  EXPECT_EQ(r.summary.rfind("rank 1 (n0, pid 101) never entered all_reduce", 0), 0u) << r.summary;
  ASSERT_EQ(r.waiting.size(), 3u);
  EXPECT_EQ(r.waiting[0],
            "rank 0 (n0, pid 100): waits in all_reduce ([520] Float), collective 26 of the default "
            "group, for 12.0 s");
  EXPECT_DOUBLE_EQ(r.hung_for_s, 12.0);
  EXPECT_DOUBLE_EQ(r.group_timeout_s, 1800);
}

TEST(HangAnalysis, AWaitShorterThanTheTimeoutIsNotYetAHangAndSaysWhenToLookAgain) {
  ProbeAnswer a0 = answer(100, kC10d, 4181, "all_reduce", "work.wait()");
  on_fr(&a0, 2, 5, 3.0);
  ProbeAnswer a1 = answer(101, "train.py", 9, "slow_step");
  on_fr(&a1, 2, 4, 0);
  HangReport r = analyse_hang({rank(0, a0, 3.5), rank(1, a1, 3.6)}, 10);
  EXPECT_EQ(r.verdict, HangReport::Verdict::kWaiting);
  ASSERT_TRUE(r.recheck_s.has_value());
  EXPECT_DOUBLE_EQ(*r.recheck_s, 7.0);
  EXPECT_TRUE(r.culprits.empty());
  EXPECT_EQ(r.waiting.size(), 1u);
}

TEST(HangAnalysis, NoRankInsideACollectiveIsNeverAHangHoweverLong) {
  // An evaluation phase: every rank silent for minutes, none in a collective.
  std::vector<RankProbe> ranks;
  for (int r = 0; r < 4; ++r) {
    ProbeAnswer a = answer(100 + r, "eval.py", 30, "evaluate");
    on_fr(&a, 4, 90, 0);
    ranks.push_back(rank(r, a, 300));
  }
  HangReport r = analyse_hang(ranks, 5);
  EXPECT_EQ(r.verdict, HangReport::Verdict::kQuiet);
  EXPECT_NE(r.summary.find("no rank is inside a collective"), std::string::npos) << r.summary;
  EXPECT_TRUE(r.culprits.empty());
}

TEST(HangAnalysis, ADesynchronisedCallIsNamedAsSuch) {
  ProbeAnswer a0 = answer(100, kC10d, 4181, "all_reduce");
  on_fr(&a0, 2, 13, 8.0, "gloo:all_reduce", "[[4]]");
  ProbeAnswer a1 = answer(101, kC10d, 5315, "all_gather");
  on_fr(&a1, 2, 13, 8.0, "gloo:all_gather", "[[4]]");
  HangReport r = analyse_hang({rank(0, a0, 8.5), rank(1, a1, 8.5)}, 5);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung);
  ASSERT_EQ(r.culprits.size(), 1u);
  EXPECT_EQ(r.culprits[0].rank, 1);  // one against one: the set without rank 0
  EXPECT_EQ(r.culprits[0].reason,
            "hung: desynchronised collective: called all_gather ([4] Float) as collective 13 of "
            "the default group, where rank 0 called all_reduce ([4] Float)");
}

TEST(HangAnalysis, ADesyncWithoutFlightRecorderIsSeenInTheStacks) {
  // PyTorch 1.13: sequence numbers from a random base, and the frames in distributed_c10d.py.
  ProbeAnswer a0 = answer(100, kC10d, 1541, "all_reduce", "work.wait()");
  ProbeAnswer a1 = answer(101, kC10d, 2089, "all_gather", "work.wait()");
  ProbeAnswer a2 = answer(102, kC10d, 1541, "all_reduce", "work.wait()");
  for (ProbeAnswer* a : {&a0, &a1, &a2}) {
    a->torch = "1.13.0";
    a->groups.push_back({"0", "gloo", {0, 1, 2}, 1804289400});
  }
  HangReport r = analyse_hang({rank(0, a0, 9), rank(1, a1, 9), rank(2, a2, 9)}, 5);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung) << r.summary;
  EXPECT_EQ(r.culprits[0].rank, 1);
  EXPECT_EQ(r.culprits[0].reason,
            "hung: desynchronised collective: called all_gather as the same collective of the "
            "default group, where ranks 0, 2 called all_reduce");
}

TEST(HangAnalysis, PyTorch113NamesTheCulpritFromSequenceNumbersAlone) {
  ProbeAnswer a0 = answer(100, "/torch/autograd/__init__.py", 197, "backward");
  a0.groups.push_back({"0", "gloo", {0, 1}, 1804289410});
  ProbeAnswer a1 = answer(101, "train.py", 9, "stuck_in_data_loading");
  a1.groups.push_back({"0", "gloo", {0, 1}, 1804289409});
  HangReport r = analyse_hang({rank(0, a0, 6), rank(1, a1, 6.2)}, 5);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung);
  EXPECT_EQ(r.culprits[0].rank, 1);
  // No seq numbers shown: 1.13's start at a random value.
  EXPECT_EQ(r.culprits[0].reason,
            "hung: never entered the gradient allreduce in backward() on the default group, that "
            "rank 0 has waited in for 6.0 s; it has issued 1 collective fewer");
}

TEST(HangAnalysis, PyTorch113RanksAtTheSameCountOutsideCollectivesWaitForNobody) {
  // Without a Flight Recorder, being at the group's count says nothing: only a rank behind, or a
  // main thread inside a collective call, makes a rank a waiter.
  ProbeAnswer a0 = answer(100, "train.py", 12, "step");
  ProbeAnswer a1 = answer(101, "train.py", 22, "stuck_waiting_for_data");
  for (ProbeAnswer* a : {&a0, &a1}) a->groups.push_back({"0", "gloo", {0, 1}, 1804289384});
  HangReport r = analyse_hang({rank(0, a0, 0.2), rank(1, a1, 4)}, 3);
  EXPECT_TRUE(r.waiting.empty());
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung);  // the stall rule, not a wait
  EXPECT_EQ(r.culprits[0].rank, 1);
  EXPECT_NE(r.culprits[0].reason.find("inside no collective"), std::string::npos);
}

TEST(HangAnalysis, ARankThatDoesNotAnswerWhileTheOthersWaitIsTheSuspect) {
  ProbeAnswer a0 = answer(100, kC10d, 4181, "all_reduce");
  on_fr(&a0, 2, 21, 6.0);
  HangReport r = analyse_hang({rank(0, a0, 6.1), rank(1, std::nullopt, 6.1)}, 5);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung);
  EXPECT_EQ(r.culprits[0].rank, 1);
  EXPECT_EQ(r.culprits[0].reason,
            "hung: no answer in time, while rank 0 waited in all_reduce ([520] Float), collective "
            "21 of the default group for 6.0 s");
  EXPECT_EQ(r.culprits[0].stack, "");
}

TEST(HangAnalysis, ACollectiveEveryRankIsInsideThatNeverCompletesIsAHang) {
  std::vector<RankProbe> ranks;
  for (int r = 0; r < 2; ++r) {
    ProbeAnswer a = answer(100 + r, kC10d, 4181, "all_reduce");
    on_fr(&a, 2, 40, 20.0 + r);
    ranks.push_back(rank(r, a, 21));
  }
  HangReport r = analyse_hang(ranks, 10);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung);
  EXPECT_EQ(r.culprits[0].rank, 0);
  EXPECT_NE(r.culprits[0].reason.find("every rank of the default group (ranks 0, 1) has been "
                                      "inside all_reduce ([520] Float), collective 40, for 20.0 s"),
            std::string::npos)
      << r.culprits[0].reason;
  // Not yet for a shorter wait.
  EXPECT_EQ(analyse_hang(ranks, 30).verdict, HangReport::Verdict::kWaiting);
}

TEST(HangAnalysis, ARankThatStoppedWhileTheOthersBeatIsHungAndOneThatNeverBeatIsNot) {
  ProbeAnswer a0 = answer(100, "train.py", 12, "step");
  ProbeAnswer a1 = answer(101, "train.py", 22, "stuck_waiting_for_data");
  HangReport r = analyse_hang({rank(0, a0, 0.1), rank(1, a1, 4)}, 3);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung);
  EXPECT_EQ(r.culprits[0].reason,
            "hung: no heartbeat for 4.0 s while rank 0 still beat, and inside no collective");
  EXPECT_DOUBLE_EQ(r.hung_for_s, 4);
  // A rank that never beat (no optimizer: another role) is not judged by beats.
  EXPECT_EQ(analyse_hang({rank(0, a0, 0.1), rank(1, a1, 4, false)}, 3).verdict,
            HangReport::Verdict::kQuiet);
}

TEST(HangAnalysis, RanksThatFellSilentTogetherAreQuietWhenAProbeFindsOnlyOnePastTheTimeout) {
  // An evaluation after a step in lockstep: rank 1's last beat came 20 ms before rank 0's, and the
  // probe came at 2.00 s of rank 1's silence (the CI run that found it: "no heartbeat for 2.0 s
  // while rank 0 still beat"). Nobody is inside a collective: quiet, at this probe and later ones.
  ProbeAnswer a0 = answer(100, "train.py", 60, "evaluate");
  ProbeAnswer a1 = answer(101, "train.py", 60, "evaluate");
  EXPECT_EQ(analyse_hang({rank(0, a0, 1.98), rank(1, a1, 2.0)}, 2).verdict,
            HangReport::Verdict::kQuiet);
  EXPECT_EQ(analyse_hang({rank(0, a0, 5.98), rank(1, a1, 6.0)}, 2).verdict,
            HangReport::Verdict::kQuiet);
  // Rank 0 beat a whole second after rank 1 went silent (half the timeout): it still beats.
  HangReport r = analyse_hang({rank(0, a0, 1.0), rank(1, a1, 2.0)}, 2);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung);
  EXPECT_EQ(r.culprits[0].rank, 1);
}

TEST(HangAnalysis, AScriptWithoutTorchIsJudgedByItsBeatsAloneAsBefore) {
  // One rank, no PyTorch imported, no groups: silent for the timeout after beating is a hang, as
  // it was before hang probes. The same rank with PyTorch and no collective under way is quiet (an
  // evaluation).
  ProbeAnswer plain = answer(100, "job.py", 7, "wait_for_file");
  plain.torch.reset();
  HangReport r = analyse_hang({rank(0, plain, 4)}, 3);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung) << r.summary;
  EXPECT_EQ(r.culprits[0].reason,
            "hung: no heartbeat for 4.0 s, and it uses no collective that could tell a quiet "
            "phase from a hang");
  EXPECT_EQ(analyse_hang({rank(0, answer(100, "train.py", 7, "evaluate"), 4)}, 3).verdict,
            HangReport::Verdict::kQuiet);
  // Never beaten: never judged by beats.
  EXPECT_EQ(analyse_hang({rank(0, plain, 4, false)}, 3).verdict, HangReport::Verdict::kQuiet);
}

TEST(HangAnalysis, APyTorchRankInNoGroupThatBeatsByHandIsJudgedByItsBeats) {
  // One rank with PyTorch and no process group (a single-GPU script): the worker module's own
  // beats come only from optimizer steps, so its silence is quiet (an evaluation); beats by hand
  // promise to go on in every phase, so the same silence after them is a hang.
  RankProbe module_beats = rank(0, answer(100, "train.py", 7, "evaluate"), 4);
  EXPECT_EQ(analyse_hang({module_beats}, 3).verdict, HangReport::Verdict::kQuiet);
  RankProbe hand_beats = module_beats;
  hand_beats.beaten_by_hand = true;
  HangReport r = analyse_hang({hand_beats}, 3);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung) << r.summary;
  EXPECT_EQ(r.culprits[0].rank, 0);
  EXPECT_EQ(r.culprits[0].reason,
            "hung: no heartbeat for 4.0 s, and it uses no collective that could tell a quiet "
            "phase from a hang");
  EXPECT_NE(r.culprits[0].stack.find("evaluate"), std::string::npos) << r.culprits[0].stack;
  // Short of the timeout: not yet.
  hand_beats.silent_s = 2.5;
  EXPECT_NE(analyse_hang({hand_beats}, 3).verdict, HangReport::Verdict::kHung);
  // Beating by hand, but in a group: the group's collectives judge it, not its silence.
  ProbeAnswer in_group = answer(100, "train.py", 7, "evaluate");
  on_fr(&in_group, 1, 26, 0);
  RankProbe grouped = rank(0, in_group, 4);
  grouped.beaten_by_hand = true;
  EXPECT_EQ(analyse_hang({grouped}, 3).verdict, HangReport::Verdict::kQuiet);
  // No answer (its main thread holds the GIL in native code): its beats by hand judge it.
  RankProbe silent = rank(0, std::nullopt, 4);
  EXPECT_EQ(analyse_hang({silent}, 3).verdict, HangReport::Verdict::kQuiet);
  silent.beaten_by_hand = true;
  r = analyse_hang({silent}, 3);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung) << r.summary;
  EXPECT_EQ(r.culprits[0].reason,
            "hung: no heartbeat for 4.0 s after beating by hand (no answer in time)");
}

TEST(HangAnalysis, AWaitForARankThatWaitsItselfLeadsToTheRankThatWaitsForNobody) {
  // Group "a" = {0, 1}: rank 0 waits in collective 5, rank 1 issued 4. Rank 1 waits in group
  // "b" = {1, 2} for rank 2, which never entered it: rank 2 is the culprit, not rank 1.
  auto group = [](ProbeAnswer* a, const std::string& name, std::vector<int> members, int64_t issued,
                  double waiting_s) {
    a->flight_recorder = true;
    a->groups.push_back({name, "gloo", std::move(members), issued});
    if (waiting_s > 0) {
      CollectiveEntry e;
      e.group = name;
      e.seq = issued;
      e.op = "broadcast";
      e.since = kNow - waiting_s;
      a->collectives.push_back(e);
    }
  };
  ProbeAnswer a0 = answer(100, kC10d, 1, "broadcast"), a1 = answer(101, kC10d, 1, "broadcast"),
              a2 = answer(102, "train.py", 5, "compute");
  group(&a0, "a", {0, 1}, 5, 9);
  group(&a1, "a", {0, 1}, 4, 0);
  group(&a1, "b", {1, 2}, 3, 8);
  group(&a2, "b", {1, 2}, 2, 0);
  HangReport r = analyse_hang({rank(0, a0, 9), rank(1, a1, 9), rank(2, a2, 9)}, 5);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung);
  ASSERT_EQ(r.culprits.size(), 1u);
  EXPECT_EQ(r.culprits[0].rank, 2);
  EXPECT_NE(r.culprits[0].reason.find("collective 3 of group b"), std::string::npos)
      << r.culprits[0].reason;
  EXPECT_EQ(r.waiting.size(), 2u);
}

TEST(HangAnalysis, LibcohortGroupsAreNamedAndNumbered) {
  auto lib = [](int pid, int64_t issued, double waiting_s) {
    ProbeAnswer a;
    a.pid = pid;
    a.time = kNow;
    a.groups.push_back({"cohort/0", "cohort-cpu", {0, 1}, issued});
    if (waiting_s > 0) {
      CollectiveEntry e;
      e.group = "cohort/0";
      e.seq = issued;
      e.op = "allreduce";
      e.in_sizes = "[[1024]]";
      e.dtypes = "[\"float32\"]";
      e.since = kNow - waiting_s;
      a.collectives.push_back(e);
    }
    return a;
  };
  HangReport r = analyse_hang({rank(0, lib(100, 7, 6), 6), rank(1, lib(101, 6, 0), 6)}, 5);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung);
  EXPECT_EQ(r.culprits[0].rank, 1);
  EXPECT_EQ(r.culprits[0].reason,
            "hung: never entered allreduce ([1024] float32), collective 7 of libcohort's group 0, "
            "that rank 0 has waited in for 6.0 s; its last was collective 6");
}

TEST(HangAnalysis, ARankOthersBeganToWaitForIsNamedByTheCollectiveNotByItsSilence) {
  // libcohort beats as it enters a collective: rank 1 stopped 2.5 s ago between collectives 6 and
  // 7, rank 0 entered collective 7 (and beat) 1.5 s ago. Rank 1 is not "silent while rank 0
  // beats": the wait names it, once it reaches the 2 s timeout.
  auto lib = [](int pid, int64_t issued, double waiting_s) {
    ProbeAnswer a;
    a.pid = pid;
    a.time = kNow;
    a.groups.push_back({"cohort/0", "cohort-cpu", {0, 1}, issued});
    if (waiting_s > 0) {
      CollectiveEntry e;
      e.group = "cohort/0";
      e.seq = issued;
      e.op = "allreduce";
      e.since = kNow - waiting_s;
      a.collectives.push_back(e);
    }
    return a;
  };
  HangReport r = analyse_hang({rank(0, lib(100, 7, 1.5), 1.5), rank(1, lib(101, 6, 0), 2.5)}, 2);
  EXPECT_EQ(r.verdict, HangReport::Verdict::kWaiting) << r.summary;
  ASSERT_TRUE(r.recheck_s.has_value());
  EXPECT_NEAR(*r.recheck_s, 0.5, 1e-9);
  r = analyse_hang({rank(0, lib(100, 7, 2.1), 2.1), rank(1, lib(101, 6, 0), 3.1)}, 2);
  ASSERT_EQ(r.verdict, HangReport::Verdict::kHung);
  EXPECT_EQ(r.culprits[0].rank, 1);
  EXPECT_NE(r.culprits[0].reason.find("hung: never entered allreduce"), std::string::npos)
      << r.culprits[0].reason;
}

}  // namespace
}  // namespace cohort::launch
