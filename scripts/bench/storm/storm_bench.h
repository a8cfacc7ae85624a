// Runs storm_bench's cells (servers x paths x rank counts) and reports them.
#pragma once

#include <string>
#include <vector>

#include "options.h"
#include "storm_run.h"

namespace cohort::bench {

struct StormCell {
  std::string server, path;
  int ranks = 0;
  std::string skipped;                 // why the cell was not run ("" when it was)
  std::vector<StormOutcome> runs;      // one per repetition
  const StormOutcome* median() const;  // the run of median total (nullptr when none ok)
};

struct StormReport {
  std::string namespace_note;
  int somaxconn = 0;
  long fd_limit = 0;
  double loadavg_before = 0, loadavg_after = 0;
  std::vector<StormCell> cells;
};

StormReport run_storm_bench(const StormBenchOptions& o);

// The table (stdout), then the JSON line.
void print_storm_report(const StormBenchOptions& o, const StormReport& r);

}  // namespace cohort::bench
