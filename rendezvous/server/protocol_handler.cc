#include "server/protocol_handler.h"

#include <algorithm>
#include <cstring>

#include "cohort/rdzv/auth.h"
#include "server/write_growth.h"

namespace cohort::rdzv {
namespace {

constexpr size_t kInitialBuffer = 1024;
constexpr size_t kMinReadSpace = 512;
// An empty buffer larger than this is given back (a client that sent one big request once).
constexpr size_t kKeepBuffer = 64 * 1024;

}  // namespace

ProtocolHandler::ProtocolHandler(StoreState& state, const StoreServerOptions& options, SessionId id,
                                 bool must_authenticate, ServerCounters* counters,
                                 uint64_t wait_scope)
    : state_(state),
      options_(options),
      id_(id),
      counters_(counters),
      wait_scope_(wait_scope),
      must_authenticate_(must_authenticate) {}

bool ProtocolHandler::reject(RejectReason reason, std::string why) {
  close_reason_ = std::move(why);
  rejected_ = reason;
  if (reason == RejectReason::kNoToken || reason == RejectReason::kWrongToken)
    refused_unauthenticated_ = true;
  if (counters_) counters_->rejected(reason);
  return false;
}

bool ProtocolHandler::refuse_unauthenticated() {
  return reject(RejectReason::kNoToken,
                "unauthenticated connection refused: this cohortd requires its token (clients "
                "from --allow-unauthenticated-from networks excepted)");
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
        return refuse_unauthenticated();
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
      out_.bytes().append(challenge_);
      if (!client_nonce_.empty())
        out_.bytes().append(
            auth::prove_mutual(options_.auth_token, "server", client_nonce_, challenge_));
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
      return reject(RejectReason::kWrongToken, "authentication failed: wrong token");
    }
    begin_ += 1 + auth::kProofBytes;
    put_u8(&out_.bytes(), auth::kAccepted);
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
  // The token handshake, when one is owed, comes before any request.
  if (auth_state_ != AuthState::kDone) {
    bool need_more = false;
    if (!authenticate(&need_more)) return false;
    if (need_more) return true;
  }
  yielded_ = false;
  const size_t out_at_start = out_.size();
  while (begin_ < end_) {
    if (out_.size() - out_at_start >= kTurnOutputBytes) {
      yielded_ = true;
      break;
    }
    Framed f;
    const Step step = next_request(&f);
    if (step == Step::kClose) return false;
    if (step == Step::kHold) break;
    if (!admit(f) || !run(f)) return false;
  }
  if (begin_ == end_) begin_ = end_ = 0;
  return true;
}

ProtocolHandler::Step ProtocolHandler::next_request(Framed* f) {
  std::span<const uint8_t> pending(in_.get() + begin_, end_ - begin_);
  // 1. The dialect, told once from the connection's first bytes.
  if (!dialect_known_) {
    DetectStatus d = detect_dialect(pending);
    if (d == DetectStatus::kNeedMore) return Step::kHold;
    dialect_ = d == DetectStatus::kCurrent ? Dialect::kCurrent : Dialect::kLegacy;
    dialect_known_ = true;
  }
  // 2. Behind a parked WAIT only CANCEL_WAIT runs; the rest is held until the wait ends.
  if (waiting_ && dialect_ == Dialect::kCurrent) {
    auto op = op_from_wire(dialect_, pending[0]);
    if (!op || !command_info(*op).has(kWhileWaiting)) return Step::kHold;
  }
  // 3. Backpressure: resumes when the client reads its replies.
  if (out_.size() + unsent_elsewhere_ >= options_.max_unsent_bytes) return Step::kHold;
  // 4. A tagged write's tag: it runs once per (client, request), however often it is sent.
  f->tagged = pending[0] == kTaggedOpcode;
  if (f->tagged) {
    WireReader r(pending);
    uint8_t opcode;
    if (!r.u8(&opcode) || !r.u64(&f->client) || !r.u64(&f->request)) return Step::kHold;
    pending = pending.subspan(kTagBytes);
  }
  // 5. The request, whole and within the limits.
  DecodeResult res = decode_request(dialect_, pending, options_.limits, &req_);
  if (res.status == DecodeStatus::kNeedMore) {
    if (pending.size() > options_.max_request_bytes) {
      reject(RejectReason::kTooLarge, "request of more than " +
                                          std::to_string(options_.max_request_bytes) +
                                          " bytes exceeds --max-request-bytes");
      return Step::kClose;
    }
    return Step::kHold;
  }
  if (res.status == DecodeStatus::kBad) {
    reject(RejectReason::kMalformed, res.error);
    return Step::kClose;
  }
  f->bytes = (f->tagged ? kTagBytes : 0) + res.consumed;
  return Step::kRun;
}

bool ProtocolHandler::admit(const Framed& f) {
  if (waiting_) {
    // The 1.13 dialect: it has no CANCEL_WAIT, and its client sends nothing behind a WAIT, so
    // a whole request now means the WAIT timed out at the client. PyTorch's daemon answers
    // it; so do we, and the dead wait goes without a reply.
    state_.cancel_wait(id_);
    waiting_ = false;
  }
  if (liveness_only_ && !command_info(req_.op).has(kLiveness)) return refuse_unauthenticated();
  if (f.tagged && !command_info(req_.op).has(kTaggable))
    return reject(RejectReason::kBadRequest,
                  "a tagged request must be a write, not " + std::string(op_name(req_.op)));
  return true;
}

bool ProtocolHandler::fits() {
  if (options_.max_memory == 0) return true;
  const uint64_t growth = write_growth(state_, req_);
  const uint64_t held = state_.key_value_bytes() + state_.queued_bytes();
  if (growth == 0 || held + growth <= options_.max_memory) return true;
  return reject(RejectReason::kMaxMemory,
                std::string(op_name(req_.op)) + " refused: it adds " + std::to_string(growth) +
                    " bytes to the " + std::to_string(held) +
                    " of keys, values and queued items, past --max-memory (" +
                    std::to_string(options_.max_memory) +
                    "); reads go on, and deleting keys makes room");
}

bool ProtocolHandler::run(const Framed& f) {
  if (!f.tagged) {
    bool keep = fits() && dispatch(req_);
    begin_ += f.bytes;
    return keep;
  }
  begin_ += f.bytes;
  if (const std::string* cached = state_.cached_reply(f.client, f.request)) {
    ++requests_;
    out_.bytes().append(*cached);  // a retry: the write already happened
    return true;
  }
  if (!fits()) return false;
  // A write's reply is copied bytes (only GET and MULTI_GET share values), all in the tail.
  std::string& out = out_.bytes();
  const size_t reply_start = out.size();
  std::string notifications;
  notifications_aside_ = &notifications;
  state_.begin_batch();
  bool keep = dispatch(req_);
  // The reply is taken out before the batch ends, so that while the held notifications are
  // delivered the output ends where they will go.
  std::string reply = out.substr(reply_start);
  out.resize(reply_start);
  if (keep) state_.remember_reply(f.client, f.request, reply);
  state_.end_batch();  // held notifications are delivered here, still set aside
  notifications_aside_ = nullptr;
  // The watch notifications this write caused go where an untagged write puts them, before its
  // reply (the write happens, then it is answered); they were set aside only so that the
  // remembered reply is the reply alone.
  out_.bytes() += notifications;
  out_.bytes() += reply;
  return keep;
}

bool ProtocolHandler::wake() {
  if (!waiting_) return false;
  waiting_ = false;
  reply_.clear(Op::kWait);
  reply_.code = kStopWaiting;
  encode_reply(reply_, &out_.bytes());
  if (counters_) counters_->answered(parked_op_, std::chrono::steady_clock::now() - parked_at_);
  return begin_ < end_;
}

bool ProtocolHandler::answer_wait(StoreState::WaitResult r, bool* answered) {
  switch (r) {
    case StoreState::WaitResult::kReady:
      reply_.code = kStopWaiting;
      return true;
    case StoreState::WaitResult::kParked:
      waiting_ = true;
      parked_at_ = read_at_;
      parked_op_ = req_.op;
      *answered = false;  // STOP_WAITING comes from wake()
      return true;
    case StoreState::WaitResult::kTooManyWaiters:
      return reject(RejectReason::kTooManyWaiters, "parked waits exceed --max-waiters (" +
                                                       std::to_string(options_.max_waiters) + ")");
    case StoreState::WaitResult::kNotACounter:  // only a BARRIER counts
      return reject(RejectReason::kNotACounter,
                    "BARRIER on a key whose value is not a decimal integer");
  }
  return true;
}

void ProtocolHandler::put_value(const StoredValue* v) {
  std::string& out = out_.bytes();
  if (v == nullptr) {
    put_u64(&out, 0);  // a missing key reads as empty (the libuv daemon's answer)
  } else if (SharedBytes shared = v->shared()) {
    put_u64(&out, shared->size());
    out_.share(std::move(shared));  // referred to, not copied
  } else {
    put_bytes(&out, v->view());
  }
}

bool ProtocolHandler::dispatch(const Request& req) {
  ++requests_;
  StoreState& st = state_;
  Reply& reply = reply_;
  reply.clear(req.op);
  bool answered = true;  // false while a WAIT or BARRIER is parked
  bool encoded = false;  // GET and MULTI_GET put their values themselves (put_value)
  std::string owned;     // a value the reply refers to that nothing else holds
  switch (req.op) {
    case Op::kValidate:
      if (req.u32 != kValidationMagic) {
        return reject(RejectReason::kBadRequest, "VALIDATE with a wrong magic number");
      }
      break;
    case Op::kPing:
      reply.u32 = req.u32;
      break;
    case Op::kSet:
      st.set(req.keys[0], req.values[0]);
      break;
    case Op::kCompareSet:
      owned = st.compare_set(req.keys[0], req.values[0], req.values[1]);
      reply.values.push_back(owned);
      break;
    case Op::kGet: {
      const StoredValue* v = st.value(req.keys[0]);
      // The 1.13 daemon throws and drops the connection; the libuv daemon answers empty.
      if (v == nullptr && dialect_ == Dialect::kLegacy) {
        return reject(RejectReason::kMissingKey, "GET of a missing key");
      }
      put_value(v);
      encoded = true;
      break;
    }
    case Op::kAdd:
      if (!st.add(req.keys[0], req.delta, &reply.number)) {
        return reject(RejectReason::kNotACounter,
                      "ADD on a key whose value is not a decimal integer");
      }
      break;
    case Op::kCheck:
      reply.code = st.check(req.keys) ? kCheckReady : kCheckNotReady;
      break;
    case Op::kWait:
      if (!answer_wait(st.wait(id_, req.keys, wait_scope_), &answered)) return false;
      break;
    case Op::kBarrier:
      if (!answer_wait(st.barrier(id_, req.keys[0], req.delta), &answered)) return false;
      break;
    case Op::kListKeys:
      // Sorted, so that the same store lists the same way (PyTorch's order is its hash map's).
      reply.values.reserve(static_cast<size_t>(st.num_keys()));
      st.for_each_key([&](std::string_view k) { reply.values.push_back(k); });
      std::sort(reply.values.begin(), reply.values.end());
      reply.number = static_cast<int64_t>(reply.values.size());
      break;
    case Op::kCancelWait:
      st.cancel_wait(id_);
      waiting_ = false;
      reply.code = kWaitCanceled;
      break;
    case Op::kGetNumKeys:
      reply.number = st.num_keys();
      break;
    case Op::kWatchKey:
      st.watch(id_, req.keys[0]);
      watching_ = true;
      reply.code = kWatchRegistered;
      break;
    case Op::kDeleteKey:
      reply.number = st.delete_key(req.keys[0]) ? 1 : 0;
      break;
    case Op::kAppend:
      st.append(req.keys[0], req.values[0]);
      break;
    case Op::kMultiGet:
      if (dialect_ == Dialect::kLegacy) {
        for (auto k : req.keys)
          if (st.value(k) == nullptr)
            return reject(RejectReason::kMissingKey, "MULTI_GET of a missing key");
      }
      for (auto k : req.keys) put_value(st.value(k));
      encoded = true;
      break;
    case Op::kMultiSet:
      // One batch, so one log record: a crash keeps all of it or none (and waiters and watchers
      // hear of it once it is logged).
      st.begin_batch();
      for (size_t i = 0; i < req.keys.size(); ++i) st.set(req.keys[i], req.values[i]);
      st.end_batch();
      break;
    case Op::kQueuePush:
      st.queue_push(req.keys[0], req.values[0]);
      break;
    case Op::kQueuePop:
      reply.number = st.queue_pop(req.keys[0], &owned);
      if (reply.number > 0) reply.values.push_back(owned);
      break;
    case Op::kQueueLen:
      reply.number = st.queue_len(req.keys[0]);
      break;
  }
  if (answered) {
    if (!encoded) encode_reply(reply, &out_.bytes());
    if (counters_) counters_->answered(req.op, std::chrono::steady_clock::now() - read_at_);
  }
  return true;
}

}  // namespace cohort::rdzv
