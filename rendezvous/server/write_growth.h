// What a write would add to the store, for --max-memory (StoreServerOptions::max_memory): the
// bytes of keys, values and queued items it would create, judged before it runs so that a refused
// write changes nothing.
//
// Pure: reads the state, changes nothing. Thread safety: as StoreState's (the loop thread).
#pragma once

#include <cstdint>

#include "cohort/rdzv/codec.h"
#include "server/store_state.h"

namespace cohort::rdzv {

// The bytes `req` would add to state.key_value_bytes() + state.queued_bytes() if it ran now; 0
// for requests that add nothing (reads, DELETE_KEY, a SET no longer than the value it replaces, a
// COMPARE_SET that would not write). An upper bound where the exact figure would take running it:
// an ADD or BARRIER counts the longest counter (20 digits), a MULTI_SET that names a key twice
// counts it twice.
uint64_t write_growth(const StoreState& state, const Request& req);

}  // namespace cohort::rdzv
