#include "protocol_handler.h"

#include <algorithm>
#include <cstring>

#include "cohort/rdzv/auth.h"

namespace cohort::rdzv {
namespace {

constexpr size_t kInitialBuffer = 1024;
constexpr size_t kMinReadSpace = 512;
// An empty buffer larger than this is given back (a client that sent one big request once).
constexpr size_t kKeepBuffer = 64 * 1024;

}  // namespace

ProtocolHandler::ProtocolHandler(StoreState& state, const StoreServerOptions& options, SessionId id,
                                 bool must_authenticate)
    : state_(state), options_(options), id_(id), must_authenticate_(must_authenticate) {}

void ProtocolHandler::refuse_unauthenticated() {
  refused_unauthenticated_ = true;
  close_reason_ =
      "unauthenticated connection refused: this cohortd requires its token (clients from "
      "--allow-unauthenticated-from networks excepted)";
}

bool ProtocolHandler::authenticate(bool* need_more) {
  *need_more = false;
  while (auth_state_ != AuthState::kDone && begin_ < end_) {
    const uint8_t* p = in_.get() + begin_;
    const size_t n = end_ - begin_;
    if (auth_state_ == AuthState::kNone) {
      if (p[0] != auth::kHello && p[0] != auth::kHelloMutual) {
        if (!must_authenticate_) {
          auth_state_ = AuthState::kDone;  // a plain client, welcome here
          return true;
        }
        if (p[0] == 0x00) {
          // Maybe PyTorch 2.x's VALIDATE. Its client retries a connection that fails VALIDATE or
          // PING until the store timeout (30 min by default), but fails at once when a later
          // request is refused: so answer those two (they touch no key) and refuse the rest.
          DetectStatus d = detect_dialect({p, n});
          if (d == DetectStatus::kNeedMore) {
            *need_more = true;
            return true;
          }
          if (d == DetectStatus::kCurrent) {
            auth_state_ = AuthState::kDone;
            liveness_only_ = true;
            return true;
          }
        }
        refuse_unauthenticated();
        return false;
      }
      if (p[0] == auth::kHelloMutual) {  // the server proves the token first (auth.h)
        if (n < 1 + auth::kNonceBytes) {
          *need_more = true;
          return true;
        }
        client_nonce_.assign(reinterpret_cast<const char*>(p + 1), auth::kNonceBytes);
        begin_ += auth::kNonceBytes;
      }
      begin_ += 1;
      challenge_ = auth::make_challenge();
      out_.append(challenge_);
      if (!client_nonce_.empty())
        out_.append(auth::prove_mutual(options_.auth_token, "server", client_nonce_, challenge_));
      auth_state_ = AuthState::kChallenged;
      continue;
    }
    if (n < 1 + auth::kProofBytes) {
      *need_more = true;
      return true;
    }
    std::string_view proof(reinterpret_cast<const char*>(p + 1), auth::kProofBytes);
    const bool right =
        client_nonce_.empty()
            ? auth::verify(options_.auth_token, challenge_, proof)
            : auth::same_proof(proof, auth::prove_mutual(options_.auth_token, "client",
                                                         client_nonce_, challenge_));
    if (p[0] != auth::kProof || (!options_.auth_token.empty() && !right)) {
      refused_unauthenticated_ = true;
      close_reason_ = "authentication failed: wrong token";
      return false;
    }
    begin_ += 1 + auth::kProofBytes;
    put_u8(&out_, auth::kAccepted);
    auth_state_ = AuthState::kDone;
  }
  *need_more = auth_state_ != AuthState::kDone;
  return true;
}

std::span<uint8_t> ProtocolHandler::read_space() {
  // Only here may the buffer move: the caller has no read in flight into it.
  if (begin_ == end_ && capacity_ > kKeepBuffer) {
    in_.reset();
    capacity_ = begin_ = end_ = 0;
  }
  if (capacity_ - end_ < kMinReadSpace) {
    // Move the unconsumed tail to the front, and grow when that is not enough.
    if (begin_ > 0) {
      std::memmove(in_.get(), in_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (capacity_ - end_ < kMinReadSpace) {
      size_t grown = std::max(kInitialBuffer, capacity_ * 2);
      std::unique_ptr<uint8_t[]> bigger(new uint8_t[grown]);  // uninitialised on purpose
      if (end_ > 0) std::memcpy(bigger.get(), in_.get(), end_);
      in_ = std::move(bigger);
      capacity_ = grown;
    }
  }
  return {in_.get() + end_, capacity_ - end_};
}

void ProtocolHandler::commit(size_t n) {
  end_ += n;
}

bool ProtocolHandler::process() {
  if (auth_state_ != AuthState::kDone) {
    bool need_more = false;
    if (!authenticate(&need_more)) return false;
    if (need_more) return true;
  }
  while (begin_ < end_) {
    std::span<const uint8_t> pending(in_.get() + begin_, end_ - begin_);
    if (!dialect_known_) {
      DetectStatus d = detect_dialect(pending);
      if (d == DetectStatus::kNeedMore) break;
      dialect_ = d == DetectStatus::kCurrent ? Dialect::kCurrent : Dialect::kLegacy;
      dialect_known_ = true;
    }
    if (waiting_ && dialect_ == Dialect::kCurrent) {
      auto op = op_from_wire(dialect_, pending[0]);
      if (!op || *op != Op::kCancelWait) break;  // held until the wait ends
    }
    // Backpressure: resumes when the client reads its replies.
    if (out_.size() + unsent_elsewhere_ >= options_.max_unsent_bytes) break;
    // A tagged write: run once per (client, request), however often it is sent.
    uint64_t tag_client = 0, tag_request = 0;
    bool tagged = pending[0] == kTaggedOpcode;
    if (tagged) {
      WireReader r(pending);
      uint8_t opcode;
      if (!r.u8(&opcode) || !r.u64(&tag_client) || !r.u64(&tag_request)) break;
      pending = pending.subspan(kTagBytes);
    }
    DecodeResult res = decode_request(dialect_, pending, options_.limits, &req_);
    if (res.status == DecodeStatus::kNeedMore) {
      if (pending.size() > options_.max_request_bytes) {
        close_reason_ = "request of more than " + std::to_string(options_.max_request_bytes) +
                        " bytes exceeds --max-request-bytes";
        return false;
      }
      break;
    }
    if (res.status == DecodeStatus::kBad) {
      close_reason_ = res.error;
      return false;
    }
    if (waiting_) {
      // The 1.13 dialect: it has no CANCEL_WAIT, and its client sends nothing behind a WAIT, so
      // a whole request now means the WAIT timed out at the client. PyTorch's daemon answers
      // it; so do we, and the dead wait goes without a reply.
      state_.cancel_wait(id_);
      waiting_ = false;
    }
    if (liveness_only_ && req_.op != Op::kValidate && req_.op != Op::kPing) {
      refuse_unauthenticated();
      return false;
    }
    if (tagged) {
      static constexpr Op kWrites[] = {Op::kSet,       Op::kCompareSet, Op::kAdd,
                                       Op::kDeleteKey, Op::kAppend,     Op::kMultiSet};
      if (std::find(std::begin(kWrites), std::end(kWrites), req_.op) == std::end(kWrites)) {
        close_reason_ = "a tagged request must be a write, not " + std::string(op_name(req_.op));
        return false;
      }
      begin_ += kTagBytes + res.consumed;
      if (const std::string* cached = state_.cached_reply(tag_client, tag_request)) {
        ++requests_;
        out_.append(*cached);  // a retry: the write already happened
        continue;
      }
      const size_t reply_start = out_.size();
      std::string notifications;
      notifications_aside_ = &notifications;
      state_.begin_batch();
      bool keep = dispatch(req_);
      if (keep) state_.remember_reply(tag_client, tag_request, out_.substr(reply_start));
      state_.end_batch();  // held notifications are delivered here, still set aside
      notifications_aside_ = nullptr;
      // The watch notifications this write caused go where an untagged write puts them, before
      // its reply (the write happens, then it is answered); they were set aside only so that the
      // remembered reply is the reply alone.
      out_.insert(reply_start, notifications);
      if (!keep) return false;
      continue;
    }
    bool keep = dispatch(req_);
    begin_ += res.consumed;
    if (!keep) return false;
  }
  if (begin_ == end_) begin_ = end_ = 0;
  return true;
}

bool ProtocolHandler::wake() {
  if (!waiting_) return false;
  waiting_ = false;
  put_u8(&out_, kStopWaiting);
  return begin_ < end_;
}

bool ProtocolHandler::answer_wait(StoreState::WaitResult r) {
  switch (r) {
    case StoreState::WaitResult::kReady:
      put_u8(&out_, kStopWaiting);
      return true;
    case StoreState::WaitResult::kParked:
      waiting_ = true;
      return true;
    case StoreState::WaitResult::kTooManyWaiters:
      close_reason_ =
          "parked waits exceed --max-waiters (" + std::to_string(options_.max_waiters) + ")";
      return false;
    case StoreState::WaitResult::kNotACounter:  // only a BARRIER counts
      close_reason_ = "BARRIER on a key whose value is not a decimal integer";
      return false;
  }
  return true;
}

bool ProtocolHandler::dispatch(const Request& req) {
  ++requests_;
  StoreState& st = state_;
  std::string* why = &close_reason_;
  switch (req.op) {
    case Op::kValidate:
      if (req.u32 != kValidationMagic) {
        *why = "VALIDATE with a wrong magic number";
        return false;
      }
      return true;
    case Op::kPing:
      put_u32(&out_, req.u32);
      return true;
    case Op::kSet:
      st.set(req.keys[0], req.values[0]);
      return true;
    case Op::kCompareSet:
      put_bytes(&out_, st.compare_set(req.keys[0], req.values[0], req.values[1]));
      return true;
    case Op::kGet: {
      const std::string* v = st.get(req.keys[0]);
      if (v == nullptr) {
        // The 1.13 daemon throws and drops the connection; the libuv daemon answers empty.
        if (dialect_ == Dialect::kLegacy) {
          *why = "GET of a missing key";
          return false;
        }
        put_bytes(&out_, {});
      } else {
        put_bytes(&out_, *v);
      }
      return true;
    }
    case Op::kAdd: {
      int64_t sum;
      if (!st.add(req.keys[0], req.delta, &sum)) {
        *why = "ADD on a key whose value is not a decimal integer";
        return false;
      }
      put_i64(&out_, sum);
      return true;
    }
    case Op::kCheck:
      put_u8(&out_, st.check(req.keys) ? kCheckReady : kCheckNotReady);
      return true;
    case Op::kWait:
      return answer_wait(st.wait(id_, req.keys));
    case Op::kBarrier:
      return answer_wait(st.barrier(id_, req.keys[0], req.delta));
    case Op::kListKeys: {
      // Sorted, so that the same store lists the same way (PyTorch's order is its hash map's).
      std::vector<std::string_view> keys;
      keys.reserve(static_cast<size_t>(st.num_keys()));
      st.for_each_key([&](std::string_view k) { keys.push_back(k); });
      std::sort(keys.begin(), keys.end());
      put_i64(&out_, static_cast<int64_t>(keys.size()));
      for (std::string_view k : keys) put_bytes(&out_, k);
      return true;
    }
    case Op::kCancelWait:
      st.cancel_wait(id_);
      waiting_ = false;
      put_u8(&out_, kWaitCanceled);
      return true;
    case Op::kGetNumKeys:
      put_i64(&out_, st.num_keys());
      return true;
    case Op::kWatchKey:
      st.watch(id_, req.keys[0]);
      watching_ = true;
      put_u8(&out_, kWatchRegistered);
      return true;
    case Op::kDeleteKey:
      put_i64(&out_, st.delete_key(req.keys[0]) ? 1 : 0);
      return true;
    case Op::kAppend:
      st.append(req.keys[0], req.values[0]);
      return true;
    case Op::kMultiGet:
      for (auto k : req.keys) {
        const std::string* v = st.get(k);
        if (v == nullptr && dialect_ == Dialect::kLegacy) {
          *why = "MULTI_GET of a missing key";
          return false;
        }
        put_bytes(&out_, v ? std::string_view(*v) : std::string_view());
      }
      return true;
    case Op::kMultiSet:
      // One batch, so one log record: a crash keeps all of it or none (and waiters and watchers
      // hear of it once it is logged).
      st.begin_batch();
      for (size_t i = 0; i < req.keys.size(); ++i) st.set(req.keys[i], req.values[i]);
      st.end_batch();
      return true;
    case Op::kQueuePush:
      st.queue_push(req.keys[0], req.values[0]);
      return true;
    case Op::kQueuePop: {
      std::string value;
      int64_t len = st.queue_pop(req.keys[0], &value);
      put_i64(&out_, len);
      if (len > 0) put_bytes(&out_, value);
      return true;
    }
    case Op::kQueueLen:
      put_i64(&out_, st.queue_len(req.keys[0]));
      return true;
  }
  *why = "unhandled command";
  return false;
}

}  // namespace cohort::rdzv
