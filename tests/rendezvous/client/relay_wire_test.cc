// The relay link's wire format (relay_wire.h): bytes pinned, every truncated prefix incomplete,
// malformed frames refused.
#include "cohort/rdzv/relay_wire.h"

#include <gtest/gtest.h>

#include <string>

namespace cohort::rdzv::link {
namespace {

std::span<const uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(RelayWire, HelloAndWelcomeBytesArePinned) {
  EXPECT_EQ(hello(), std::string("\x4c\x63\x6c\x6e\x6b\x01\x00", 7));
  EXPECT_EQ(welcome(0x0102030405060708ull),
            std::string("\x4c\x01\x00\x08\x07\x06\x05\x04\x03\x02\x01", 11));
}

TEST(RelayWire, HelloIsCheckedWholeAndEveryPrefixNeedsMore) {
  const std::string h = hello();
  EXPECT_EQ(check_hello(bytes(h)), HelloStatus::kComplete);
  for (size_t n = 0; n < h.size(); ++n)
    EXPECT_EQ(check_hello(bytes(h.substr(0, n))), HelloStatus::kNeedMore) << n;
  std::string wrong_magic = h;
  wrong_magic[2] ^= 1;
  EXPECT_EQ(check_hello(bytes(wrong_magic)), HelloStatus::kBad);
  std::string wrong_version = h;
  wrong_version[5] = 2;
  EXPECT_EQ(check_hello(bytes(wrong_version)), HelloStatus::kBad);
  EXPECT_EQ(check_hello(bytes(std::string("\x00\xce\xf7\x85\x3c", 5))), HelloStatus::kBad);
}

TEST(RelayWire, WelcomeCarriesTheUnsentBound) {
  const std::string w = welcome(64ull << 20);
  uint64_t bound = 0;
  EXPECT_EQ(parse_welcome(bytes(w), &bound), HelloStatus::kComplete);
  EXPECT_EQ(bound, 64ull << 20);
  for (size_t n = 0; n < w.size(); ++n)
    EXPECT_EQ(parse_welcome(bytes(w.substr(0, n)), &bound), HelloStatus::kNeedMore) << n;
  std::string other = w;
  other[1] = 9;
  EXPECT_EQ(parse_welcome(bytes(other), &bound), HelloStatus::kBad);
}

TEST(RelayWire, FramesRoundTripAndEveryPrefixNeedsMore) {
  std::string out;
  put_frame(&out, FrameKind::kOpen, 7);
  put_data(&out, 7, std::string("a\0b", 3));
  put_frame(&out, FrameKind::kPause, 7);
  EXPECT_EQ(out.substr(0, 9), std::string("\x01\x07\x00\x00\x00\x00\x00\x00\x00", 9));
  EXPECT_EQ(out.substr(9, 12), std::string("\x02\x07\x00\x00\x00\x03\x00\x00\x00"
                                           "a\0b",
                                           12));
  Frame f;
  auto in = bytes(out);
  DecodeResult r = decode_frame(in, &f);
  ASSERT_EQ(r.status, DecodeStatus::kComplete);
  EXPECT_EQ(f.kind, FrameKind::kOpen);
  EXPECT_EQ(f.channel, 7u);
  in = in.subspan(r.consumed);
  r = decode_frame(in, &f);
  ASSERT_EQ(r.status, DecodeStatus::kComplete);
  EXPECT_EQ(f.kind, FrameKind::kData);
  EXPECT_EQ(f.payload, std::string_view("a\0b", 3));
  const std::string data = out.substr(9, 12);
  for (size_t n = 0; n < data.size(); ++n)
    EXPECT_EQ(decode_frame(bytes(data.substr(0, n)), &f).status, DecodeStatus::kNeedMore) << n;
}

TEST(RelayWire, LongDataIsSplitIntoFramesOfTheLargestPayload) {
  std::string out;
  put_data(&out, 1, std::string(kMaxFramePayload + 5, 'x'));
  Frame f;
  DecodeResult r = decode_frame(bytes(out), &f);
  ASSERT_EQ(r.status, DecodeStatus::kComplete);
  EXPECT_EQ(f.payload.size(), kMaxFramePayload);
  r = decode_frame(bytes(out.substr(r.consumed)), &f);
  ASSERT_EQ(r.status, DecodeStatus::kComplete);
  EXPECT_EQ(f.payload.size(), 5u);
}

TEST(RelayWire, MalformedFramesAreRefusedWithTheReason) {
  Frame f;
  DecodeResult r = decode_frame(bytes(std::string("\x09\x01\x00\x00\x00\x00\x00\x00\x00", 9)), &f);
  EXPECT_EQ(r.status, DecodeStatus::kBad);
  EXPECT_NE(r.error.find("unknown relay frame kind 9"), std::string::npos);
  r = decode_frame(bytes(std::string("\x03\x01\x00\x00\x00\x01\x00\x00\x00x", 10)), &f);
  EXPECT_EQ(r.status, DecodeStatus::kBad);
  EXPECT_NE(r.error.find("CLOSE frame with a payload"), std::string::npos);
  std::string huge("\x02\x01\x00\x00\x00", 5);
  put_u32(&huge, kMaxFramePayload + 1);
  r = decode_frame(bytes(huge), &f);
  EXPECT_EQ(r.status, DecodeStatus::kBad);
  EXPECT_NE(r.error.find("exceeds"), std::string::npos);
}

}  // namespace
}  // namespace cohort::rdzv::link
