// store_bench: TCPStore load generator. See bench.h; run through scripts/bench/store_bench.
#include <csignal>
#include <cstdio>
#include <exception>

#include "bench.h"
#include "options.h"
#include "report.h"

int main(int argc, char** argv) {
  cohort::bench::BenchOptions options;
  int rc = cohort::bench::parse_options(argc, argv, &options);
  if (rc >= 0) return rc;
  std::signal(SIGPIPE, SIG_IGN);
  try {
    cohort::bench::BenchReport report = cohort::bench::run_bench(options);
    cohort::bench::print_tables(report, stdout);
    std::printf("%s\n", cohort::bench::report_json(report).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_bench: %s\n", e.what());
    return 1;
  }
}
