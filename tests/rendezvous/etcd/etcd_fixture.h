// Test helper: a real single-member etcd (Debian's etcd-server) on 127.0.0.1 and free ports,
// data in a temporary directory; stopped and removed with the fixture.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "../../common/free_port.h"
#include "../../common/subprocess.h"

namespace cohort::testing {

class EtcdServer {
 public:
  EtcdServer() {
    if (::access("/usr/bin/etcd", X_OK) != 0) return;
    char templ[] = "/tmp/cohort_etcd_XXXXXX";
    dir_ = ::mkdtemp(templ);
    client_port_ = free_port();
    int peer = free_port();
    std::string c = "http://127.0.0.1:" + std::to_string(client_port_);
    std::string p = "http://127.0.0.1:" + std::to_string(peer);
    proc_ = std::make_unique<Subprocess>(std::vector<std::string>{"/usr/bin/etcd",
                                                                  "--name",
                                                                  "t",
                                                                  "--data-dir",
                                                                  dir_ + "/data",
                                                                  "--listen-client-urls",
                                                                  c,
                                                                  "--advertise-client-urls",
                                                                  c,
                                                                  "--listen-peer-urls",
                                                                  p,
                                                                  "--initial-advertise-peer-urls",
                                                                  p,
                                                                  "--initial-cluster",
                                                                  "t=" + p,
                                                                  "--initial-cluster-state",
                                                                  "new",
                                                                  "--heartbeat-interval",
                                                                  "10",
                                                                  "--election-timeout",
                                                                  "100",
                                                                  "--logger",
                                                                  "zap",
                                                                  "--log-outputs",
                                                                  "stderr"});
  }
  ~EtcdServer() {
    proc_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  bool available() const { return proc_ != nullptr; }
  int port() const { return client_port_; }

 private:
  std::string dir_;
  int client_port_ = 0;
  std::unique_ptr<Subprocess> proc_;
};

}  // namespace cohort::testing
