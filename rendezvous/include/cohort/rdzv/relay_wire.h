// The relay link's wire format: how a node's store relay (relay.h) carries its workers'
// connections to cohortd over one TCP connection (docs/RELAY.md §3).
//
// The relay opens the link with kLinkOpcode, a byte no TCPStore dialect uses, then kLinkMagic and
// its version (link_hello()); cohortd answers with its version and the bound the relay applies to
// each worker's unsent bytes (link_welcome()). Then frames both ways:
//   u8 kind, u32 channel, u32 length, then `length` bytes of payload (DATA only).
// A channel is one worker connection; the relay numbers them, upwards, never reusing a number.
// Integers are little-endian, as in the TCPStore protocol.
//
// Pure encoding and decoding over byte spans, like codec.h; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cohort/rdzv/codec.h"

namespace cohort::rdzv::link {

inline constexpr uint8_t kLinkOpcode = 0x4C;  // beside cohortd's 0x40 (tag) and 0x41-0x43 (auth)
inline constexpr uint32_t kLinkMagic = 0x6B6E6C63;  // "clnk"
inline constexpr uint16_t kLinkVersion = 1;
inline constexpr size_t kHelloBytes = 1 + 4 + 2;
inline constexpr size_t kWelcomeBytes = 1 + 2 + 8;
inline constexpr size_t kFrameHeaderBytes = 1 + 4 + 4;
// A DATA frame's payload at most; longer runs of bytes go in several frames.
inline constexpr uint32_t kMaxFramePayload = 1u << 20;

enum class FrameKind : uint8_t {
  // relay -> store: a worker connected; the store starts a session for the channel.
  kOpen = 1,
  // Bytes of the channel's stream, either way.
  kData = 2,
  // relay -> store: the worker's connection ended. store -> relay: the store closed the channel
  // (a limit, a protocol error); the relay sends the worker what it has, then closes it.
  kClose = 3,
  // store -> relay: the channel's session is not reading (its buffered input is at its bound);
  // the relay stops reading the worker until kResume, as cohortd stops reading a socket.
  kPause = 4,
  kResume = 5,
  // relay -> store, payload u64: that many more of the channel's bytes have reached the worker.
  // Until then cohortd counts them as unsent, so --max-unsent-bytes holds a channel's requests
  // exactly as it holds a direct connection's. The relay acknowledges in steps of at most a
  // quarter of the welcome's bound (kAckFraction), so a worker that reads everything is never
  // held.
  kAck = 6,
};
inline constexpr uint64_t kAckFraction = 4;

std::string_view frame_kind_name(FrameKind k);

// The relay's first bytes.
std::string hello();
// cohortd's answer: its version and its bound on each connection's unsent bytes
// (--max-unsent-bytes), which paces the relay's acknowledgements.
std::string welcome(uint64_t max_unsent_bytes);

enum class HelloStatus { kComplete, kNeedMore, kBad };
// Checks a hello at the start of `in` (kBad: not a relay link, or a version this side lacks).
HelloStatus check_hello(std::span<const uint8_t> in);
// Parses a welcome at the start of `in` into *max_unsent_bytes.
HelloStatus parse_welcome(std::span<const uint8_t> in, uint64_t* max_unsent_bytes);

struct Frame {
  FrameKind kind = FrameKind::kData;
  uint32_t channel = 0;
  std::string_view payload;  // into the buffer given to decode_frame(); DATA and ACK only
};

// Decodes the frame at the start of `in`. kBad (with the reason) for an unknown kind, a payload
// on a frame that has none, an ACK whose payload is not 8 bytes, or a payload over
// kMaxFramePayload.
DecodeResult decode_frame(std::span<const uint8_t> in, Frame* out);

// Appends a frame without payload (OPEN, CLOSE, PAUSE, RESUME).
void put_frame(std::string* out, FrameKind kind, uint32_t channel);
// Appends an ACK of `bytes` delivered.
void put_ack(std::string* out, uint32_t channel, uint64_t bytes);
// The byte count an ACK frame carries. REQUIRES: f.kind == kAck (decode_frame checked its size).
uint64_t ack_bytes(const Frame& f);
// Appends `bytes` as DATA frames of at most kMaxFramePayload each.
void put_data(std::string* out, uint32_t channel, std::string_view bytes);

}  // namespace cohort::rdzv::link
