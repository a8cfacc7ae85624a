// Output of store_bench: a readable table, then one JSON line holding every figure and ratio
// (`store_bench | tail -1 | jq`). Pure formatting; thread-safe.
#pragma once

#include <cstdio>
#include <string>

#include "bench.h"

namespace cohort::bench {

// Writes the tables (ops/s, storm, notes) to `out`.
void print_tables(const BenchReport& report, std::FILE* out);

// The whole report as one line of JSON (no newline).
std::string report_json(const BenchReport& report);

}  // namespace cohort::bench
