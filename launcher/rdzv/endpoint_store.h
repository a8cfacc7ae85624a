// EndpointStore: the store of a c10d endpoint that no daemon serves, run as a cohortd process of
// its own rather than inside the agent that found the port free.
//
// Several jobs may meet at one endpoint (torchrun's c10d lets them, each under its run id). Were
// the store inside the first job's agent, every other job would lose its rendezvous when that job
// ends or its agent dies. So the first agent starts `cohortd --exit-when-idle` beside itself (the
// cohortd next to the cohortrun executable), in a session of its own so that a Ctrl-C or a
// signal to that job's process group spares it; it serves every job meeting there and exits once
// no client has been connected for the linger time. Its log goes to a file named at start; it gets
// none of the job's environment.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "rdzv/store_host.h"

namespace cohort::launch {

class EndpointStore {
 public:
  // Starts cohortd listening on `listen_host`:`port`. Returns nullptr when cohortd could not bind
  // because something already serves that port (another agent's store, a standalone cohortd):
  // the caller joins it as a client. Throws IoError when there is no cohortd next to this
  // executable, or it fails for another reason (its words in the message).
  static std::unique_ptr<EndpointStore> start(const std::string& listen_host, int port,
                                              const StoreSecurity& security,
                                              std::chrono::milliseconds linger);

  // Leaves the process running (it outlives this agent by design); reaps it if it has exited.
  ~EndpointStore();
  EndpointStore(const EndpointStore&) = delete;
  EndpointStore& operator=(const EndpointStore&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }  // as cohortd printed it
  const std::string& log_path() const { return log_path_; }

  // The cohortd that start() runs: the one in this executable's directory.
  static std::string cohortd_path();

 private:
  EndpointStore(pid_t pid, std::string address, std::string log_path)
      : pid_(pid), address_(std::move(address)), log_path_(std::move(log_path)) {}

  pid_t pid_;
  std::string address_;
  std::string log_path_;
};

}  // namespace cohort::launch
