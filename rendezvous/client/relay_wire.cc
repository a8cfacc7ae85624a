#include "cohort/rdzv/relay_wire.h"

namespace cohort::rdzv::link {

std::string_view frame_kind_name(FrameKind k) {
  switch (k) {
    case FrameKind::kOpen:
      return "OPEN";
    case FrameKind::kData:
      return "DATA";
    case FrameKind::kClose:
      return "CLOSE";
    case FrameKind::kPause:
      return "PAUSE";
    case FrameKind::kResume:
      return "RESUME";
    case FrameKind::kAck:
      return "ACK";
  }
  return "?";
}

std::string hello() {
  std::string out;
  put_u8(&out, kLinkOpcode);
  put_u32(&out, kLinkMagic);
  const uint16_t v = kLinkVersion;
  out.append(reinterpret_cast<const char*>(&v), 2);
  return out;
}

std::string welcome(uint64_t max_unsent_bytes) {
  std::string out;
  put_u8(&out, kLinkOpcode);
  const uint16_t v = kLinkVersion;
  out.append(reinterpret_cast<const char*>(&v), 2);
  put_u64(&out, max_unsent_bytes);
  return out;
}

HelloStatus check_hello(std::span<const uint8_t> in) {
  if (in.empty()) return HelloStatus::kNeedMore;
  if (in[0] != kLinkOpcode) return HelloStatus::kBad;
  if (in.size() < kHelloBytes) return HelloStatus::kNeedMore;
  WireReader r(in.subspan(1));
  uint32_t magic = 0;
  r.u32(&magic);
  uint16_t version = 0;
  std::memcpy(&version, in.data() + 5, 2);
  return magic == kLinkMagic && version == kLinkVersion ? HelloStatus::kComplete
                                                        : HelloStatus::kBad;
}

HelloStatus parse_welcome(std::span<const uint8_t> in, uint64_t* max_unsent_bytes) {
  if (in.empty()) return HelloStatus::kNeedMore;
  if (in[0] != kLinkOpcode) return HelloStatus::kBad;
  if (in.size() < kWelcomeBytes) return HelloStatus::kNeedMore;
  uint16_t version = 0;
  std::memcpy(&version, in.data() + 1, 2);
  if (version != kLinkVersion) return HelloStatus::kBad;
  WireReader r(in.subspan(3));
  r.u64(max_unsent_bytes);
  return HelloStatus::kComplete;
}

DecodeResult decode_frame(std::span<const uint8_t> in, Frame* out) {
  WireReader r(in);
  uint8_t kind = 0;
  uint32_t channel = 0, length = 0;
  if (!r.u8(&kind) || !r.u32(&channel) || !r.u32(&length)) {
    return {DecodeStatus::kNeedMore, kFrameHeaderBytes, {}};
  }
  if (kind < static_cast<uint8_t>(FrameKind::kOpen) ||
      kind > static_cast<uint8_t>(FrameKind::kAck)) {
    return {DecodeStatus::kBad, 0, "unknown relay frame kind " + std::to_string(kind)};
  }
  out->kind = static_cast<FrameKind>(kind);
  out->channel = channel;
  if (out->kind == FrameKind::kAck && length != 8) {
    return {DecodeStatus::kBad, 0, "ACK frame of " + std::to_string(length) + " bytes, not 8"};
  }
  if (out->kind != FrameKind::kData && out->kind != FrameKind::kAck && length != 0) {
    return {DecodeStatus::kBad, 0,
            std::string(frame_kind_name(out->kind)) + " frame with a payload"};
  }
  if (length > kMaxFramePayload) {
    return {DecodeStatus::kBad, 0,
            "relay frame of " + std::to_string(length) + " bytes exceeds " +
                std::to_string(kMaxFramePayload)};
  }
  if (r.left() < length) return {DecodeStatus::kNeedMore, kFrameHeaderBytes + length, {}};
  out->payload =
      std::string_view(reinterpret_cast<const char*>(in.data() + kFrameHeaderBytes), length);
  return {DecodeStatus::kComplete, kFrameHeaderBytes + length, {}};
}

void put_frame(std::string* out, FrameKind kind, uint32_t channel) {
  put_u8(out, static_cast<uint8_t>(kind));
  put_u32(out, channel);
  put_u32(out, 0);
}

void put_ack(std::string* out, uint32_t channel, uint64_t bytes) {
  put_u8(out, static_cast<uint8_t>(FrameKind::kAck));
  put_u32(out, channel);
  put_u32(out, 8);
  put_u64(out, bytes);
}

uint64_t ack_bytes(const Frame& f) {
  uint64_t n = 0;
  std::memcpy(&n, f.payload.data(), 8);
  return n;
}

void put_data(std::string* out, uint32_t channel, std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), kMaxFramePayload);
    put_u8(out, static_cast<uint8_t>(FrameKind::kData));
    put_u32(out, channel);
    put_u32(out, static_cast<uint32_t>(n));
    out->append(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
}

}  // namespace cohort::rdzv::link
