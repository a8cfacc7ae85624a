// HangAnalysis: from every rank's answer to a hang probe (probe_answer.h), whether the job is
// hung and who is to blame.
//
// The rule (README, "Hung workers"): a process group in which some ranks have waited in one
// collective for the hang timeout while another rank has not entered it is hung; the ranks that
// have not entered it are the culprits. Per group, every rank's count of issued collectives
// (`seq`) is compared: the ranks at the highest count wait in that collective, the others never
// entered it. At equal counts, the Flight Recorder's entries (PyTorch 2.x) or the main threads'
// frames in torch/distributed/distributed_c10d.py (1.13) show a desynchronised call: members in
// different operations at the same sequence number. Also hung:
//   - every member has been inside the same collective for the timeout (it does not complete:
//     a network fault between them);
//   - a rank that beat and then stayed silent for the timeout, inside no collective, while other
//     ranks still beat (it stopped on its own: cohortrun's rule for workers that beat).
// Never hung: no rank inside a collective (an evaluation or a checkpoint phase, however long);
// a rank that is slow but still beats (the straggler check names it).
//
// A rank that waits in one group for a rank that waits in another is not a culprit: the chain is
// followed to the rank that waits for nobody (a cycle is named as a deadlock).
//
// Ages come from each answer's own clock (a Flight Recorder entry's creation against the time of
// the answer, both the worker's host's) or, without a Flight Recorder (PyTorch 1.13), from
// cohortrun's beat silence: no two hosts' clocks are ever compared.
//
// Pure: no I/O, no clock.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cohort/base/hang_probe.h"

namespace cohort::launch {

// One rank at a probe.
struct RankProbe {
  int rank = 0;
  int node_rank = 0;
  int local_rank = 0;
  std::string host;
  int pid = 0;
  // Seconds since its last beat, or since it said hello when it never beat (cohortrun's clock).
  double silent_s = 0;
  bool beaten = false;                            // it beat at least once
  bool beaten_by_hand = false;                    // its own code beat (heartbeat_line.h)
  std::optional<hang_probe::ProbeAnswer> answer;  // nullopt: it did not answer
  std::string no_answer;                          // why, in words ("no answer within 2 s")
  std::string gpu;                                // its GPU's notable condition ("" when none)
};

struct HangCulprit {
  int rank = 0;
  std::string reason;  // "hung: never entered all_reduce (seq 26 of group 0) that rank 0 ..."
  std::string stack;   // its threads, Python-traceback style ("" when it did not answer)
};

struct HangReport {
  enum class Verdict {
    kProgressing,  // nothing waits
    kQuiet,        // ranks are silent, but none is inside a collective (evaluation, checkpoint)
    kWaiting,      // a collective is waited on, for less than the timeout so far
    kHung,
  };
  Verdict verdict = Verdict::kProgressing;
  std::string summary;                // one line
  std::vector<HangCulprit> culprits;  // kHung: the root cause first
  std::vector<std::string> waiting;   // one line per rank waiting in a collective
  // kWaiting: seconds until the longest wait reaches the timeout (probe again then).
  std::optional<double> recheck_s;
  // kHung: how long the decisive wait (or silence) has lasted.
  double hung_for_s = 0;
  // The smallest timeout PyTorch gave a collective being waited on (0: unknown): past it,
  // PyTorch ends the rank itself.
  double group_timeout_s = 0;
};

std::string verdict_name(HangReport::Verdict v);  // "progressing", "quiet", "waiting", "hung"

// REQUIRES: hang_timeout_s > 0.
HangReport analyse_hang(const std::vector<RankProbe>& ranks, double hang_timeout_s);

// A rank's threads as the summary shows them: the main thread's frames, innermost last, with
// their source lines; every other thread in one line (its innermost frame).
std::string format_stacks(const hang_probe::ProbeAnswer& a);

}  // namespace cohort::launch
