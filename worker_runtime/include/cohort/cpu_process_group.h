// The CPU process group: collectives over host memory.
//
// Ranks on the same host (same host identity, published in the store) reduce through one POSIX
// shared-memory segment, each rank reducing its own slice, so large buffers move at memory
// bandwidth; ranks on different hosts use TCP (ring for large buffers, direct exchange for small
// ones); with several ranks on several hosts the two compose (see worker_runtime/cpu/topology.h).
// Segments are named per run, attempt and group, unlinked as soon as every local rank has mapped
// them, and removed on every failure path, so a crash leaves nothing in /dev/shm.
//
// Failures: every collective has the group's deadline (options.timeout). A dead peer (its process
// exited, its connection closed) or a silent one (deadline) makes the call throw CollectiveError
// naming that rank, on every surviving rank; the group is unusable afterwards (every later call
// throws at once). The same-host path notices a dead peer within about 50 ms.
//
// Heartbeats: every collective calls cohort::heartbeat() on entry and on completion.
//
// Thread safety: as ProcessGroup (one thread at a time). The group uses no threads of its own.
#pragma once

#include <memory>
#include <string>

#include "cohort/context.h"
#include "cohort/process_group.h"

namespace cohort {

// A CPU group of every rank of `context`. Collective call: every rank calls it, in the same order
// as its other group creations. `context` must outlive the group. Throws CollectiveError naming
// the rank that did not show up by options.timeout (COHORT_TIMEOUT_S overrides it).
std::unique_ptr<ProcessGroup> new_cpu_process_group(Context& context,
                                                    const ProcessGroupOptions& options = {});

// The same over an explicit store (for tests): ranks 0..size-1 rendezvous under the keys of
// `store`, which must be dedicated to this group (a PrefixStore) and outlive it. Ranks with equal
// `host_identity` share memory.
std::unique_ptr<ProcessGroup> new_cpu_process_group(Store& store, int rank, int size,
                                                    const ProcessGroupOptions& options,
                                                    const std::string& host_identity);

// This process's host identity: ranks share memory iff these are equal. Hostname, boot id and
// the network and mount namespaces (so two network namespaces on one machine count as two hosts).
std::string default_host_identity();

}  // namespace cohort
