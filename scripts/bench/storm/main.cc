// storm_bench: the rendezvous storm at scale, direct and through per-node relays
// (docs/RELAY.md §5). Entry point: ../storm_bench.
#include <cstdio>
#include <exception>

#include "options.h"
#include "storm_bench.h"

int main(int argc, char** argv) {
  cohort::bench::StormBenchOptions options;
  if (int rc = cohort::bench::parse_storm_options(argc, argv, &options); rc >= 0) return rc;
  try {
    const auto report = cohort::bench::run_storm_bench(options);
    cohort::bench::print_storm_report(options, report);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "storm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
