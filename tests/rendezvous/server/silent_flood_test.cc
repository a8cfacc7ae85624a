// cohortd under floods of connections that never speak: thousands of silent connections, and
// with a token, thousands that stop halfway through the handshake. While they hold every slot, a
// newcomer that needs no token is refused, and one that must authenticate takes the place of the
// oldest that has not (issue 27); at --first-request-timeout (--handshake-timeout with a token)
// they are closed (not before), and a client arriving then is served within 100 ms (issue 14).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "../../common/sanitizer.h"
#include "../../common/subprocess.h"
#include "../raw_client.h"
#include "cohort/rdzv/auth.h"
#include "cohort/rdzv/cohortd.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort::rdzv {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using cohort::testing::RawClient;
using cohort::testing::Subprocess;

constexpr int kFlood = 4000;  // connections, all from 127.0.0.1; cohortd holds as many
constexpr auto kDeadline = 1000ms;

int port_of(const std::string& address_line) {
  return std::stoi(address_line.substr(address_line.rfind(':') + 1));
}

struct FloodResult {
  std::string log;                // cohortd's stderr
  Clock::duration first_close{};  // from the first connection to its close
  Clock::duration all_closed{};   // from the last connection to the close of every one
  Clock::duration served{};       // a newcomer's connection and set+get afterwards
};

// Starts cohortd with --max-connections kFlood, fills it with `silent` connections that send
// nothing and kFlood - `silent` that send HELLO and never the proof, and measures as above.
FloodResult flood(int silent, const std::string& token_file, const std::string& token) {
  FloodResult r;
  raise_fd_limit();
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < kFlood + 200) {
    ADD_FAILURE() << "descriptor limit " << rl.rlim_cur;
    return r;
  }
  std::vector<std::string> argv = {
      COHORTD_BIN, "--host", "127.0.0.1", "--port", "0", "--max-connections",
      std::to_string(kFlood), "--max-connections-per-address", "0", "--handshake-timeout",
      std::to_string(kDeadline.count() / 1000.0), "--first-request-timeout",
      std::to_string(kDeadline.count() / 1000.0),
      // One accept queue: the flood is accepted in the order it came
      // (several queues are accepted in no particular order), so the
      // newcomer below finds cohortd full.
      "--accept-queues", "1"};
  if (!token_file.empty()) {
    argv.push_back("--auth-token-file");
    argv.push_back(token_file);
  }
  Subprocess cohortd(argv);
  auto address = cohortd.read_line(10s);
  if (!address) {
    ADD_FAILURE() << "cohortd did not start";
    return r;
  }
  const int port = port_of(*address);

  std::vector<RawClient> flood;
  flood.reserve(kFlood);
  const auto first = Clock::now();
  for (int i = 0; i < silent; ++i) flood.emplace_back(port);
  for (int i = silent; i < kFlood; ++i) {
    flood.emplace_back(port);
    flood.back().send(std::string(1, static_cast<char>(auth::kHello)));
  }
  // Every half-handshake has its challenge: cohortd holds them all (and the silent ones, accepted
  // before them).
  for (int i = silent; i < kFlood; ++i)
    EXPECT_TRUE(flood[i].read(auth::kChallengeBytes)) << "half-handshake " << i;
  const auto last = Clock::now();
  RawClient newcomer(port);
  size_t first_kept = 0;
  if (token.empty()) {
    // Full: a newcomer is turned away while the flood holds every slot.
    EXPECT_TRUE(newcomer.closed_by_peer(kDeadline)) << "the flood did not fill cohortd";
  } else {
    // Full: a newcomer that must authenticate (all must here) takes the place of the oldest that
    // has not: the first silent connection, closed at once.
    newcomer.send(std::string(1, static_cast<char>(auth::kHello)));
    EXPECT_TRUE(newcomer.read(auth::kChallengeBytes)) << "the newcomer was turned away";
    EXPECT_TRUE(flood[0].closed_by_peer(kDeadline / 2)) << "the oldest did not give way";
    first_kept = 1;
  }

  EXPECT_TRUE(flood[first_kept].closed_by_peer(10s)) << "a silent connection was kept";
  r.first_close = Clock::now() - first;
  for (size_t i = first_kept + 1; i < kFlood; ++i) {
    if (!flood[i].closed_by_peer(10s)) {
      ADD_FAILURE() << "connection " << i << " of the flood was kept";
      break;
    }
  }
  r.all_closed = Clock::now() - last;

  const auto t0 = Clock::now();
  TcpStoreOptions opts;
  opts.port = port;
  opts.timeout = 10s;
  opts.connect_timeout = 10s;
  opts.auth_token = token;
  {
    TcpStore s(opts);
    s.set("after-the-flood", "served");
    EXPECT_EQ(s.get("after-the-flood"), "served");
  }
  r.served = Clock::now() - t0;

  cohortd.signal(SIGTERM);
  EXPECT_TRUE(cohortd.wait(10s));
  r.log = cohortd.read_all_stderr(2s);
  auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::microseconds>(d).count() / 1000.0;
  };
  std::printf(
      "%d silent + %d half-handshakes: first closed after %.0f ms, all within %.0f ms of the "
      "last; a newcomer then served (connect, set, get) in %.1f ms\n",
      silent, kFlood - silent, ms(r.first_close), ms(r.all_closed), ms(r.served));
  return r;
}

// The target for a newcomer after the flood is 100 ms, printed above. The bound only tells one
// served at once from one that was refused and retried toward its 10 s timeout; wall-clock time on
// a shared machine gates nothing tighter.
constexpr auto kServedWithin = cohort::testing::kSanitized ? 5000ms : 2000ms;
constexpr auto kClosedWithin = kDeadline + (cohort::testing::kSanitized ? 8000ms : 3000ms);

TEST(SilentFlood, ConnectionsThatNeverSpeakAreClosedAtTheDeadlineAndNobodyIsLockedOut) {
  FloodResult r = flood(kFlood, "", "");
  EXPECT_GE(r.first_close, kDeadline) << "closed before --first-request-timeout";
  EXPECT_LT(r.all_closed, kClosedWithin);
  EXPECT_LT(r.served, kServedWithin);
  EXPECT_NE(r.log.find("no request completed within --first-request-timeout (1000 ms)"),
            std::string::npos)
      << r.log;
  EXPECT_NE(r.log.find(std::to_string(kFlood) + " closed for never speaking"), std::string::npos)
      << r.log;
}

TEST(SilentFlood, WithATokenHalfHandshakesAndSilenceAreClosedAndATokenHolderIsServed) {
  char dir_templ[] = "/tmp/cohort_flood_XXXXXX";
  ASSERT_NE(::mkdtemp(dir_templ), nullptr);
  const std::string dir = dir_templ;
  const std::string token = "flood-test-token-of-32-characters";
  const std::string token_file = dir + "/token";
  std::ofstream(token_file) << token << "\n";
  ::chmod(token_file.c_str(), 0600);
  FloodResult r = flood(kFlood / 2, token_file, token);
  std::remove(token_file.c_str());
  ::rmdir(dir.c_str());
  EXPECT_GE(r.first_close, kDeadline) << "closed before --handshake-timeout";
  EXPECT_LT(r.all_closed, kClosedWithin);
  EXPECT_LT(r.served, kServedWithin);
  EXPECT_NE(r.log.find("token handshake not completed within --handshake-timeout (1000 ms)"),
            std::string::npos)
      << r.log;
}

}  // namespace
}  // namespace cohort::rdzv
