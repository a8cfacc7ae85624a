// systemd's readiness protocol (sd_notify(3)), spoken without libsystemd: under a Type=notify
// unit (packaging/cohortd.service.in), systemd names a datagram socket in $NOTIFY_SOCKET and
// counts the service as started only once "READY=1" arrives there, so that units ordered after
// cohortd.service start when clients can connect, not merely when the process exists.
#pragma once

#include <string>

namespace cohort::rdzv {

// Sends `state` (newline-separated KEY=VALUE assignments, e.g. "READY=1\nSTATUS=listening") as
// one datagram to the socket named by $NOTIFY_SOCKET: a file system path, or an abstract socket
// when it starts with '@'. Returns "" when it was sent, or when NOTIFY_SOCKET is unset or empty
// (not started by systemd's notify protocol); otherwise what went wrong, for a warning: a service
// manager that cannot be told is no reason to stop serving. Never blocks.
std::string notify_service_manager(const std::string& state);

}  // namespace cohort::rdzv
