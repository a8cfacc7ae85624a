// The store server against a relay link that breaks the link's rules (relay_wire.h, docs/RELAY.md
// §3): whoever speaks the link's hello is believed to be a node's relay, so a buggy or hostile one
// must cost only its own link. Each wrong frame closes that link, naming what was wrong in the log,
// while a direct client and a well-behaved link go on being served; frames for a channel that was
// never opened, or has closed, are dropped as a socket drops bytes for a closed connection.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../hex.h"
#include "../raw_client.h"
#include "cohort/base/logging.h"
#include "cohort/rdzv/relay_wire.h"
#include "cohort/rdzv/server.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort::rdzv {
namespace {

using cohort::testing::RawClient;
using cohort::testing::unhex;
using namespace std::chrono_literals;

// The 1.13 client's ADD init/ 1, and the server's answer to it (the counter's new value, 1).
const std::string kAddInit = unhex("03 0500000000000000 696e69742f 0100000000000000");
const std::string kOne = unhex("0100000000000000");

StoreServerOptions local() {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  return o;
}

// A relay link spoken by hand: the hello, then frames.
class HandLink {
 public:
  explicit HandLink(int port) : socket_(port) {
    socket_.send(link::hello());
    welcomed_ = socket_.read(link::kWelcomeBytes).has_value();
  }
  bool welcomed() const { return welcomed_; }
  void frame(link::FrameKind kind, uint32_t channel) {
    std::string out;
    link::put_frame(&out, kind, channel);
    socket_.send(out);
  }
  void data(uint32_t channel, const std::string& bytes) {
    std::string out;
    link::put_data(&out, channel, bytes);
    socket_.send(out);
  }
  void ack(uint32_t channel, uint64_t bytes) {
    std::string out;
    link::put_ack(&out, channel, bytes);
    socket_.send(out);
  }
  void raw(const std::string& bytes) { socket_.send(bytes); }
  // The next frame the server sends; nullopt when the link closed or nothing came in 5 s.
  std::optional<std::pair<link::Frame, std::string>> next() {
    auto header = socket_.read(link::kFrameHeaderBytes);
    if (!header) return std::nullopt;
    const uint32_t length = static_cast<uint8_t>((*header)[5]) |
                            static_cast<uint8_t>((*header)[6]) << 8 |
                            static_cast<uint8_t>((*header)[7]) << 16 |
                            static_cast<uint32_t>(static_cast<uint8_t>((*header)[8])) << 24;
    std::string bytes = *header;
    if (length > 0) {
      auto payload = socket_.read(length);
      if (!payload) return std::nullopt;
      bytes += *payload;
    }
    link::Frame f;
    const DecodeResult r = link::decode_frame(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), &f);
    if (r.status != DecodeStatus::kComplete) return std::nullopt;
    return std::make_pair(link::Frame{f.kind, f.channel, {}}, std::string(f.payload));
  }
  // Opens `channel`, sends ADD init/ 1 on it, and returns what came back on it.
  std::string add_on(uint32_t channel) {
    frame(link::FrameKind::kOpen, channel);
    data(channel, kAddInit);
    std::string got;
    while (got.size() < kOne.size()) {
      auto f = next();
      if (!f) return got + "<link closed>";
      if (f->first.kind == link::FrameKind::kData && f->first.channel == channel) got += f->second;
    }
    return got;
  }
  bool closed_by_server() { return socket_.closed_by_peer(); }

 private:
  RawClient socket_;
  bool welcomed_ = false;
};

// What the server logs while it lives, read through a sink added to its logger. Made before the
// server and destroyed after it: the logger's sinks change only while no server thread logs.
class StoreLog {
 public:
  StoreLog()
      : logger_(component_logger("store")),
        sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    logger_->sinks().push_back(sink_);
  }
  ~StoreLog() { std::erase(logger_->sinks(), sink_); }
  std::string text() {
    sink_->flush();
    return text_.str();
  }

 private:
  std::shared_ptr<spdlog::logger> logger_;
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

// The server still serves: a direct client's request is answered.
void expect_serving(const StoreServerThread& server) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = server.port();
  o.timeout = 5s;
  TcpStore direct(o);
  direct.set("still", "here");
  EXPECT_EQ(direct.get("still"), "here");
}

TEST(HostileLink, AWellBehavedLinkCarriesAChannelsRequests) {
  StoreServerThread server(local());
  HandLink link(server.port());
  ASSERT_TRUE(link.welcomed());
  EXPECT_EQ(link.add_on(1), kOne);
  // A channel that closed, and one never opened: their frames go nowhere, the link stays up.
  link.frame(link::FrameKind::kClose, 1);
  link.data(1, kAddInit);
  link.data(77, kAddInit);
  link.ack(78, 5);
  link.frame(link::FrameKind::kClose, 79);
  std::string second = link.add_on(2);
  EXPECT_EQ(second, unhex("0200000000000000"));  // init/ counted once more, on channel 2 only
}

TEST(HostileLink, EachBrokenRuleClosesOnlyThatLinkAndSaysWhy) {
  StoreLog log;
  StoreServerThread server(local());
  HandLink good(server.port());
  ASSERT_TRUE(good.welcomed());
  ASSERT_EQ(good.add_on(1), kOne);

  struct Case {
    const char* what;
    const char* logged;  // the reason in the server's log
    std::function<void(HandLink&)> send;
  };
  const std::vector<Case> cases = {
      {"a channel opened twice", "OPEN of channel 5, which is open",
       [](HandLink& l) {
         l.frame(link::FrameKind::kOpen, 5);
         l.frame(link::FrameKind::kOpen, 5);
       }},
      {"PAUSE from the relay", "PAUSE from a relay (only cohortd sends it)",
       [](HandLink& l) { l.frame(link::FrameKind::kPause, 1); }},
      {"RESUME from the relay", "RESUME from a relay (only cohortd sends it)",
       [](HandLink& l) { l.frame(link::FrameKind::kResume, 1); }},
      {"an ACK of bytes never sent", "ACK of more bytes than channel 3 was sent",
       [](HandLink& l) {
         l.frame(link::FrameKind::kOpen, 3);
         l.ack(3, 1);
       }},
      {"an unknown frame kind", "unknown relay frame kind 9",
       [](HandLink& l) { l.raw(unhex("09 01000000 00000000")); }},
      {"a payload on OPEN", "OPEN frame with a payload",
       [](HandLink& l) { l.raw(unhex("01 01000000 01000000 ff")); }},
      {"an ACK whose payload is not 8 bytes", "ACK frame of 2 bytes, not 8",
       [](HandLink& l) { l.raw(unhex("06 01000000 02000000 ffff")); }},
      {"a DATA frame past the largest payload", "relay frame of 1048577 bytes exceeds 1048576",
       [](HandLink& l) { l.raw(unhex("02 01000000 01001000")); }},  // 1 MiB + 1
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    HandLink bad(server.port());
    ASSERT_TRUE(bad.welcomed());
    c.send(bad);
    EXPECT_TRUE(bad.closed_by_server());
    EXPECT_NE(log.text().find(c.logged), std::string::npos) << log.text();
    expect_serving(server);
  }
  // A hello of another version is no link: closed before any welcome.
  RawClient wrong(server.port());
  std::string hello = link::hello();
  hello[5] = static_cast<char>(0x7f);  // version 0x007f... (little-endian u16 after the magic)
  wrong.send(hello);
  EXPECT_TRUE(wrong.closed_by_peer());
  EXPECT_NE(log.text().find("not a relay link this cohortd knows (wrong magic or version)"),
            std::string::npos)
      << log.text();

  // The well-behaved link beside them never noticed.
  EXPECT_EQ(good.add_on(2), unhex("0200000000000000"));
  expect_serving(server);
}

}  // namespace
}  // namespace cohort::rdzv
