// `cohortctl status` end to end: a real cohortd, records written with the launcher's own to_json
// functions (as cohortrun's agents write them), and the real cohortctl binary.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cohort/rdzv/prefix_store.h"
#include "cohort/rdzv/tcp_store.h"
#include "common/subprocess.h"
#include "failure/failure.h"
#include "observe/node_status.h"
#include "rdzv/round_ops.h"
#include "rdzv/round_types.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;
using cohort::testing::Subprocess;
using nlohmann::json;

struct Result {
  int code = -1;
  std::string out, err;
};

Result cohortctl(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv{COHORTCTL_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p(argv, env);
  Result r;
  r.out = p.read_all_stdout(20s);
  r.err = p.read_all_stderr(20s);
  auto st = p.wait(20s);
  if (st && WIFEXITED(*st)) r.code = WEXITSTATUS(*st);
  return r;
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

class CohortctlTest : public ::testing::Test {
 protected:
  void start(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{COHORTD_BIN, "--host", "127.0.0.1", "--port", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    cohortd_ = std::make_unique<Subprocess>(argv);
    auto line = cohortd_->read_line(10s);
    ASSERT_TRUE(line);
    endpoint_ = *line;
    port_ = std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1));
  }
  std::unique_ptr<TcpStore> client(const std::string& token = "") {
    TcpStoreOptions o;
    o.port = port_;
    o.connect_timeout = 5s;
    o.timeout = 5s;
    o.auth_token = token;
    return std::make_unique<TcpStore>(o);
  }

  // Job "train": 2 nodes x 2 workers; round 0 failed (rank 3 segfaulted first, rank 1 timed out
  // after it), round 1 runs, rank 2 straggles. Job "eval": 1 node, round 0 running, no status.
  void write_jobs(Store& s) {
    const double now = wall_clock_now();
    // Under the run's prefix, as the agents' StoreBridge writes.
    auto put = [&](const std::string& run, const std::string& key, const std::string& value) {
      PrefixStore(keys::run_prefix(run), s).set(key, value);
    };
    for (int r : {0, 1}) {
      for (int n : {0, 1}) {
        NodeInfo info;
        info.id = "n" + std::to_string(n) + ":100:x";
        info.node_rank = n;
        info.nproc = 2;
        info.host = "node" + std::to_string(n);
        info.pid = 100 + n;
        info.settings["--max-restarts"] = "3";
        put("train", keys::node(r, n), to_json(info));
      }
    }
    WorkerFailure segv = make_failure({1, 1, 3, "node1", 4243}, -11, "killed by SIGSEGV", now - 60);
    WorkerFailure late =
        make_failure({0, 1, 1, "node0", 4141}, 1, "collective timed out after 30 s", now - 30);
    put("train", keys::failures(0, 1), to_json(std::vector<WorkerFailure>{segv}));
    put("train", keys::failures(0, 0), to_json(std::vector<WorkerFailure>{late}));
    Outcome o;
    o.kind = Outcome::kFailed;
    o.node_rank = 1;
    o.restarts = 1;
    o.detail = segv.reason;
    o.first_failure = segv;
    put("train", keys::outcome(0), to_json(o));
    // Round 0's workers ran from 2 minutes ago; round 1's were running on both nodes 3 s after
    // the segfault ended round 0 (the later of the two nodes counts).
    auto running = [](double t) {
      char text[32];
      std::snprintf(text, sizeof text, "%.3f", t);
      return std::string(text);
    };
    for (int n : {0, 1}) put("train", keys::running(0, n), running(now - 120));
    put("train", keys::running(1, 0), running(now - 58));
    put("train", keys::running(1, 1), running(now - 57));
    for (int n : {0, 1}) {
      NodeStatus st;
      st.node_rank = n;
      st.host = "node" + std::to_string(n);
      st.round = 1;
      st.state = "running";
      st.restarts = 1;
      st.max_restarts = 3;
      st.nnodes = 2;
      st.updated = now - 1;
      for (int l : {0, 1}) {
        WorkerStatus w;
        w.rank = n * 2 + l;
        w.local_rank = l;
        w.pid = 5000 + w.rank;
        w.state = "running";
        w.heartbeat_age_s = 0.2;
        w.step = 1200 + w.rank;
        w.step_s = w.rank == 2 ? 0.125 : 0.050;
        w.items_per_s = w.rank == 2 ? 1024.0 : 2560.0;
        w.comm_share = 0.25;
        w.cpu_s = 42.5;
        w.rss_bytes = 300LL << 20;
        st.workers.push_back(w);
      }
      if (n == 0) st.stragglers.push_back({2, "node1", 2.5, "GPU 0: thermal slowdown"});
      put("train", keys::status(n), to_json(st));
    }
    NodeInfo e;
    e.id = "e:1:y";
    e.nproc = 1;
    e.host = "evalhost";
    put("eval", keys::node(0, 0), to_json(e));
  }
  // An elastic job between rounds: round 1 ran, the rendezvous forms round 2 (dynamic_protocol).
  void write_elastic_job(Store& s) {
    PrefixStore p(keys::run_prefix("grow"), s);
    NodeInfo n;
    n.id = "g:1:z";
    n.nproc = 4;
    n.host = "g0";
    p.set(keys::node(1, 0), to_json(n));
    p.compare_set(keys::current_round(), "", "2");
    p.set("rdzv/round/2/state", "opaque: not read");
  }

  std::unique_ptr<Subprocess> cohortd_;
  std::string endpoint_;
  int port_ = 0;
};

TEST_F(CohortctlTest, ListsTheJobsThenShowsOneInDetail) {
  start();
  auto s = client();
  write_jobs(*s);
  s->set("unrelated/key", "x");

  auto list = cohortctl({"status", "--store", endpoint_});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_TRUE(has(list.out, "RUN ID")) << list.out;
  EXPECT_TRUE(has(list.out, "train")) << list.out;
  EXPECT_TRUE(has(list.out, "eval")) << list.out;
  EXPECT_TRUE(has(list.out, "1/3")) << list.out;  // train's restarts
  EXPECT_FALSE(has(list.out, "unrelated")) << list.out;

  auto detail = cohortctl({"status", "--store", endpoint_, "--job", "train"});
  ASSERT_EQ(detail.code, 0) << detail.err;
  const std::string& d = detail.out;
  EXPECT_TRUE(has(d, "job train: running, round 1, 2 nodes, 4 workers, restarts 1/3")) << d;
  EXPECT_TRUE(has(d, "node 1 (node1): running")) << d;
  EXPECT_TRUE(has(d, "1203")) << d;      // rank 3's step
  EXPECT_TRUE(has(d, "125.0 ms")) << d;  // rank 2's step time
  EXPECT_TRUE(has(d, "300.0 MiB")) << d;
  EXPECT_TRUE(
      has(d,
          "rank 2 (node1): compute time per step 2.5x the median of the other ranks; its GPU: "
          "GPU 0: thermal slowdown"))
      << d;
  // The root cause is the earliest failure (the segfault), not the timeout that followed it.
  EXPECT_TRUE(has(d,
                  "root cause: rank 3 (local rank 1, node 1, node1, pid 4243): killed by "
                  "SIGSEGV (exit code -11)"))
      << d;
  EXPECT_TRUE(has(d, "also: rank 1 (node0): collective timed out after 30 s")) << d;
  // Each round, and how long the job took to heal into round 1.
  EXPECT_TRUE(has(d, "HEALED IN")) << d;
  EXPECT_TRUE(has(d, "failed, 60 s ago")) << d;
  EXPECT_TRUE(has(d, " 3.0 s\n")) << d;

  auto unknown = cohortctl({"status", "--store", endpoint_, "--job", "nope"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_TRUE(has(unknown.err, "no job 'nope'")) << unknown.err;
  EXPECT_TRUE(has(unknown.err, "eval, train")) << unknown.err;
}

TEST_F(CohortctlTest, JsonHasTheSameContent) {
  start();
  auto s = client();
  write_jobs(*s);

  auto list = cohortctl({"status", "--store", endpoint_, "--json"});
  ASSERT_EQ(list.code, 0) << list.err;
  json l = json::parse(list.out);
  ASSERT_EQ(l["jobs"].size(), 2u) << list.out;
  EXPECT_EQ(l["jobs"][0]["run_id"], "eval");
  EXPECT_EQ(l["jobs"][0]["state"], "running");
  EXPECT_EQ(l["jobs"][1]["run_id"], "train");
  EXPECT_EQ(l["jobs"][1]["workers"], 4);

  auto detail = cohortctl({"status", "--store", endpoint_, "--job", "train", "--json"});
  ASSERT_EQ(detail.code, 0) << detail.err;
  json d = json::parse(detail.out);
  EXPECT_EQ(d["round"], 1);
  EXPECT_EQ(d["restarts"], 1);
  EXPECT_EQ(d["max_restarts"], 3);
  ASSERT_EQ(d["nodes"].size(), 2u);
  EXPECT_EQ(d["nodes"][1]["workers"][1]["step"], 1203);
  EXPECT_DOUBLE_EQ(d["nodes"][1]["workers"][0]["step_s"].get<double>(), 0.125);
  ASSERT_EQ(d["stragglers"].size(), 1u);
  EXPECT_EQ(d["stragglers"][0]["rank"], 2);
  ASSERT_EQ(d["rounds"].size(), 2u);
  EXPECT_EQ(d["rounds"][0]["outcome"]["kind"], "failed");
  EXPECT_EQ(d["rounds"][0]["failures"].size(), 2u);
  EXPECT_EQ(d["rounds"][0]["root_cause"]["global_rank"], 3);
  EXPECT_TRUE(d["rounds"][0]["healed_in_s"].is_null());
  EXPECT_TRUE(d["rounds"][1]["outcome"].is_null());
  EXPECT_TRUE(d["rounds"][1]["ended_at"].is_null());
  EXPECT_NEAR(d["rounds"][1]["healed_in_s"].get<double>(), 3.0, 0.01);
}

// Agents publish only while their workers run: a finished job's last records still say
// "running", and the round's decided outcome is what the job is.
TEST_F(CohortctlTest, AFinishedJobShowsItsOutcomeNotItsLastRecord) {
  start();
  auto s = client();
  write_jobs(*s);
  Outcome done;
  done.kind = Outcome::kSucceeded;
  done.restarts = 1;
  PrefixStore(keys::run_prefix("train"), *s).set(keys::outcome(1), to_json(done));
  auto r = cohortctl({"status", "--store", endpoint_, "--job", "train", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["state"], "succeeded") << r.out;
}

TEST_F(CohortctlTest, AnElasticJobShowsTheRoundBeingFormed) {
  start();
  auto s = client();
  write_elastic_job(*s);
  auto r = cohortctl({"status", "--store", endpoint_, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json d = json::parse(r.out);  // the only job: its detail
  EXPECT_EQ(d["run_id"], "grow");
  EXPECT_EQ(d["round"], 2);
  EXPECT_EQ(d["state"], "rendezvous");
  EXPECT_TRUE(d["problems"].empty()) << r.out;
}

TEST_F(CohortctlTest, WatchEndsAtOnceOnSigintOrSigterm) {
  start();
  auto s = client();
  write_jobs(*s);
  for (int sig : {SIGINT, SIGTERM}) {
    Subprocess p({COHORTCTL_BIN, "status", "--store", endpoint_, "--job", "train", "--watch",
                  "--interval", "60"});
    auto first = p.read_line(10s);
    ASSERT_TRUE(first);
    EXPECT_TRUE(has(*first, "job train:")) << *first;
    p.signal(sig);
    auto st = p.wait(3s);  // not the 60 s interval
    ASSERT_TRUE(st) << "cohortctl --watch did not end at signal " << sig;
    EXPECT_TRUE(WIFEXITED(*st));
    EXPECT_EQ(WEXITSTATUS(*st), 0);
  }
}

TEST_F(CohortctlTest, WatchRedrawsUntilItsCount) {
  start();
  auto s = client();
  write_jobs(*s);
  auto r = cohortctl({"status", "--store", endpoint_, "--job", "eval", "--watch", "--interval",
                      "0.05", "--count", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  size_t views = 0;
  for (size_t at = r.out.find("job eval:"); at != std::string::npos;
       at = r.out.find("job eval:", at + 1))
    ++views;
  EXPECT_EQ(views, 3u) << r.out;
}

TEST_F(CohortctlTest, ATokenProtectedStoreNeedsTheToken) {
  char tmpl[] = "/tmp/cohortctl_test.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string token_file = std::string(tmpl) + "/token";
  std::ofstream(token_file) << "0123456789abcdef0123456789abcdef\n";
  ::chmod(token_file.c_str(), 0600);
  start({"--auth-token-file", token_file});
  auto s = client("0123456789abcdef0123456789abcdef");
  write_jobs(*s);

  auto without = cohortctl({"status", "--store", endpoint_, "--connect-timeout", "1"},
                           {"COHORT_STORE_TOKEN_FILE="});
  EXPECT_EQ(without.code, 1);
  EXPECT_TRUE(has(without.err, "--token-file")) << without.err;
  EXPECT_TRUE(has(without.err, "--auth-token-file")) << without.err;

  auto with = cohortctl({"status", "--store", endpoint_, "--token-file", token_file});
  ASSERT_EQ(with.code, 0) << with.err;
  EXPECT_TRUE(has(with.out, "train")) << with.out;

  auto from_env = cohortctl({"status", "--store", endpoint_, "--job", "train"},
                            {"COHORT_STORE_TOKEN_FILE=" + token_file});
  ASSERT_EQ(from_env.code, 0) << from_env.err;
  EXPECT_TRUE(has(from_env.out, "root cause: rank 3")) << from_env.out;
  std::remove(token_file.c_str());
  ::rmdir(tmpl);
}

TEST(Cohortctl, AnUnreachableStoreFailsWithinTheConnectTimeout) {
  auto start = std::chrono::steady_clock::now();
  auto r = cohortctl({"status", "--store", "127.0.0.1:1", "--connect-timeout", "0.5"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "127.0.0.1:1")) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Cohortctl, UsageErrorsExitWith2) {
  EXPECT_EQ(cohortctl({"status"}).code, 2);  // --store is required
  EXPECT_EQ(cohortctl({}).code, 2);
}

}  // namespace
}  // namespace cohort::launch
