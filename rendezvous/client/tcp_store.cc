#include "cohort/rdzv/tcp_store.h"
#include "cohort/error.h"

#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "client/tcp_connection.h"
#include "cohort/base/net.h"
#include "cohort/base/random.h"
#include "cohort/rdzv/auth.h"
#include "cohort/rdzv/codec.h"

namespace cohort {

using detail::Clock;
using detail::ConnectionLost;
using detail::ReplyTimeout;

// The server is one cohortrun cannot work with; connecting again would not help.
// How long a server may take to answer a connection's first request (or token handshake).
constexpr std::chrono::seconds kFirstAnswerTimeout{10};

class UnsupportedServer : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
using detail::TcpConnection;
using rdzv::Op;
using rdzv::Request;

class TcpStore::Connection {
 public:
  Connection(TcpConnection c, uint64_t max_reply) : conn(std::move(c)), max_reply_(max_reply) {}
  TcpConnection conn;
  // The reply to a request of `op` (rdzv::decode_reply); its views point into conn's buffer,
  // valid until the next read.
  const rdzv::Reply& read(Op op, Clock::time_point deadline, size_t keys = 1) {
    conn.read_reply(op, keys, deadline, &reply_, max_reply_);
    return reply_;
  }

 private:
  rdzv::Reply reply_;
  uint64_t max_reply_;
};

namespace {

rdzv::Dialect wire_dialect(StoreDialect d) {
  return d == StoreDialect::kTorch113 ? rdzv::Dialect::kLegacy : rdzv::Dialect::kCurrent;
}

std::string join_keys(std::span<const std::string> keys) {
  std::string s;
  for (const auto& k : keys) {
    if (!s.empty()) s += ", ";
    s += "'" + k + "'";
  }
  return s;
}

// Builds the wire bytes of one request.
class RequestBuilder {
 public:
  explicit RequestBuilder(rdzv::Dialect d) : dialect_(d) {}
  RequestBuilder& op(Op op) {
    req_.clear();
    req_.op = op;
    return *this;
  }
  RequestBuilder& key(std::string_view k) {
    req_.keys.push_back(k);
    return *this;
  }
  RequestBuilder& keys(std::span<const std::string> ks) {
    for (const auto& k : ks) req_.keys.push_back(k);
    return *this;
  }
  RequestBuilder& value(std::string_view v) {
    req_.values.push_back(v);
    return *this;
  }
  RequestBuilder& delta(int64_t d) {
    req_.delta = d;
    return *this;
  }
  RequestBuilder& u32(uint32_t v) {
    req_.u32 = v;
    return *this;
  }
  // Appends the request to `out`.
  void into(std::string* out) { rdzv::encode_request(dialect_, req_, out); }
  std::string bytes() {
    std::string out;
    into(&out);
    return out;
  }

 private:
  rdzv::Dialect dialect_;
  Request req_;
};

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) {
  if (options_.tagged_writes && options_.dialect != StoreDialect::kCurrent) {
    throw StoreError("tagged writes need the current dialect", "", "");
  }
  client_id_ = random_u64();
  tagging_ = options_.tagged_writes;
  probe_ = options_.tagged_writes ? Probe::kTag : Probe::kNone;
  address_ = format_host_port(strip_brackets(options_.host), options_.port);
  std::lock_guard lock(mu_);
  reconnect_locked();
}

TcpStore::~TcpStore() = default;

void TcpStore::interrupt() {
  std::lock_guard lock(fd_mu_);
  ++interrupts_;
  if (live_fd_ >= 0) ::shutdown(live_fd_, SHUT_RDWR);
}

void TcpStore::drop_connection_locked() {
  std::lock_guard lock(fd_mu_);
  live_fd_ = -1;
  conn_.reset();
}

void TcpStore::reconnect_locked() {
  drop_connection_locked();
  auto deadline = Clock::now() + options_.connect_timeout;
  auto backoff = std::chrono::milliseconds(20);
  try {
    for (;;) {
      auto c = TcpConnection::connect(strip_brackets(options_.host), options_.port, deadline,
                                      options_.abandon);
      auto conn = std::make_unique<Connection>(std::move(c), options_.max_reply_bytes);
      try {
        handshake_locked(*conn, deadline);
      } catch (const ConnectionLost&) {
        // Accepted by a listener that died at once (a store being restarted): try again.
        if (Clock::now() >= deadline || (options_.abandon && options_.abandon->load())) throw;
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
        continue;
      }
      std::lock_guard fd_lock(fd_mu_);
      conn_ = std::move(conn);
      live_fd_ = conn_->conn.fd();
      return;
    }
  } catch (const UnsupportedServer& e) {
    throw StoreError(e.what(), "", address_);
  } catch (const std::exception& e) {
    throw StoreError("cannot connect to the store at " + address_ + " within " +
                         std::to_string(options_.connect_timeout.count()) + " ms: " + e.what() +
                         (options_.dialect == StoreDialect::kCurrent
                              ? " (a PyTorch 1.13/2.0 server speaks only the 1.13 dialect; "
                                "libcohort workers choose it with COHORT_STORE_DIALECT=torch113)"
                              : ""),
                     "", address_);
  }
}

void TcpStore::handshake_locked(Connection& conn, Clock::time_point deadline) {
  auto hs_deadline = std::max(deadline, Clock::now() + std::chrono::seconds(10));
  // A store answers its first bytes at once; a listener that does not within this time is some
  // other program (a web server, a database) on that port, which would otherwise hold us until
  // the whole connect deadline. Then the endpoint is wrong: no retry.
  const auto first_answer = std::min(hs_deadline, Clock::now() + kFirstAnswerTimeout);
  auto not_a_store = [&](const std::string& what) {
    return UnsupportedServer(
        "the program listening at " + address_ + " " + what +
        ": it is not a TCPStore server (cohortd, or PyTorch's); check the address and port" +
        (options_.dialect == StoreDialect::kCurrent && !options_.tagged_writes
             ? " (a PyTorch 1.13/2.0 server speaks only the 1.13 dialect; libcohort workers "
               "choose it with COHORT_STORE_DIALECT=torch113)"
             : ""));
  };
  if (!options_.auth_token.empty()) {
    // The mutual handshake (auth.h): the server proves that it knows the token before we prove
    // it, or send anything else.
    const std::string nonce = auth::make_challenge();
    conn.conn.send_all(std::string(1, static_cast<char>(auth::kHelloMutual)) + nonce, hs_deadline);
    std::string challenge, server_proof;
    try {
      challenge = conn.conn.read_exact(auth::kChallengeBytes, first_answer);
      server_proof = conn.conn.read_exact(auth::kProofBytes, first_answer);
    } catch (const ReplyTimeout&) {
      throw not_a_store("sent no token challenge within " +
                        std::to_string(kFirstAnswerTimeout.count()) + " s");
    }
    if (!auth::same_proof(server_proof,
                          auth::prove_mutual(options_.auth_token, "server", nonce, challenge))) {
      throw UnsupportedServer(
          "the server at " + address_ +
          " could not prove that it knows the store token: refused, before sending it anything "
          "(it is not the job's cohortd, or cohortd runs without --auth-token-file or with "
          "another token)");
    }
    std::string proof(1, static_cast<char>(auth::kProof));
    proof += auth::prove_mutual(options_.auth_token, "client", nonce, challenge);
    conn.conn.send_all(proof, hs_deadline);
    try {
      if (conn.conn.read_u8(hs_deadline) != auth::kAccepted)
        throw ProtocolError("unexpected answer to the token");
    } catch (const ConnectionLost&) {
      throw ProtocolError("the server refused our token");
    }
  }
  if (options_.dialect == StoreDialect::kCurrent) {
    RequestBuilder b(rdzv::Dialect::kCurrent);
    std::string hello;
    b.op(Op::kValidate).u32(rdzv::kValidationMagic).into(&hello);
    uint32_t nonce = static_cast<uint32_t>(::getpid());
    b.op(Op::kPing).u32(nonce).into(&hello);
    // What the server is, asked once: cohortd knows its tagged writes; of PyTorch's servers, the
    // libuv one (2.4+'s default) knows QUEUE_LEN and the classic one closes at both.
    const Probe probe = probe_;
    if (probe == Probe::kTag) {
      // Request 0 of this client: never one of its real writes (they count from 1).
      rdzv::put_u8(&hello, rdzv::kTaggedOpcode);
      rdzv::put_u64(&hello, client_id_);
      rdzv::put_u64(&hello, 0);
      b.op(Op::kDeleteKey).key("/cohort/tag-probe").into(&hello);
    } else if (probe == Probe::kQueue) {
      b.op(Op::kQueueLen).key("/cohort/queue-probe").into(&hello);
    }
    conn.conn.send_all(hello, hs_deadline);
    uint32_t answer = 0;
    try {
      answer = conn.read(Op::kPing, first_answer).u32;
    } catch (const ReplyTimeout&) {
      throw not_a_store("did not answer a TCPStore PING within " +
                        std::to_string(kFirstAnswerTimeout.count()) + " s");
    }
    if (answer != nonce) throw not_a_store("answered a TCPStore PING with other bytes");
    if (probe == Probe::kNone) return;
    try {
      conn.read(probe == Probe::kTag ? Op::kDeleteKey : Op::kQueueLen, hs_deadline);
    } catch (const ConnectionLost&) {
      if (probe == Probe::kTag) {
        // It answered PING, then closed at the tag: not cohortd. Connect again and ask more.
        tagging_ = false;
        probe_ = Probe::kQueue;
        throw;
      }
      probe_ = Probe::kNone;
      throw UnsupportedServer(
          "the store at " + address_ +
          " is PyTorch's classic TCPStore server (TORCH_TCPSTORE_USE_LIBUV=0, or a PyTorch "
          "before 2.4): it does not wake waiters when COMPARE_SET creates a key, which "
          "cohortrun's rendezvous needs; point --rdzv-endpoint at a cohortd, or at a libuv "
          "TCPStore server (PyTorch 2.4+'s default)");
    }
    if (probe == Probe::kQueue && options_.on_foreign_server) {
      options_.on_foreign_server(
          "the store at " + address_ +
          " is not cohortd but PyTorch's libuv TCPStore server (as a torchrun agent hosts); "
          "going on with plain operations, so a write whose connection is lost is not retried");
    }
    probe_ = Probe::kNone;
  }
}

template <typename Fn>
auto TcpStore::call(bool idempotent, std::string_view op, std::string_view key, Fn&& fn) {
  std::lock_guard lock(mu_);
  const uint64_t interrupts_at_start = interrupts_.load();
  for (int attempt = 0;; ++attempt) {
    try {
      if (!conn_) reconnect_locked();
      return fn(*conn_, Clock::now() + options_.timeout);
    } catch (const ConnectionLost& e) {
      drop_connection_locked();
      if (interrupts_.load() != interrupts_at_start) {
        throw StoreError(std::string(op) + " interrupted", std::string(key), address_);
      }
      if (!idempotent || attempt >= 1) {
        // Lost again on a connection just made: the store is up and closes at this request,
        // which is how a TCPStore server refuses one (no dialect has an error reply).
        throw StoreError(std::string(op) + " failed: the connection to " + address_ +
                             " was lost (" + e.what() + ")" +
                             (idempotent ? "" : "; whether it took effect is unknown") +
                             (attempt >= 1 ? "; it was lost again right after reconnecting: the "
                                             "store refuses this request (cohortd closes the "
                                             "connection of a request over a limit, such as a "
                                             "write past --max-memory, and its log says which)"
                                           : ""),
                         std::string(key), address_);
      }
    } catch (const ReplyTimeout&) {
      drop_connection_locked();  // the reply may still come; this stream can no longer be trusted
      throw StoreTimeoutError(std::string(op) + " of '" + std::string(key) +
                                  "' got no reply from " + address_ + " within " +
                                  std::to_string(options_.timeout.count()) + " ms",
                              std::string(key), address_);
    }
  }
}

std::string TcpStore::describe() const {
  return "tcp://" + address_;
}

std::chrono::milliseconds TcpStore::timeout() const {
  std::lock_guard lock(mu_);
  return options_.timeout;
}

void TcpStore::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  options_.timeout = timeout;
}

void TcpStore::set(std::string_view key, std::string_view value) {
  call(true, "set", key, [&](Connection& c, Clock::time_point deadline) {
    c.conn.send_all(
        RequestBuilder(wire_dialect(options_.dialect)).op(Op::kSet).key(key).value(value).bytes(),
        deadline);
  });
}

std::string TcpStore::get(std::string_view key) {
  std::string k(key);
  return call(true, "get", key, [&](Connection& c, Clock::time_point deadline) {
    wait_locked(c, std::span<const std::string>(&k, 1), options_.timeout);
    c.conn.send_all(RequestBuilder(wire_dialect(options_.dialect)).op(Op::kGet).key(key).bytes(),
                    deadline);
    return std::string(c.read(Op::kGet, deadline).values[0]);
  });
}

std::string TcpStore::tag() {
  if (!tagging_) return {};
  std::lock_guard lock(mu_);
  std::string t;
  rdzv::put_u8(&t, rdzv::kTaggedOpcode);
  rdzv::put_u64(&t, client_id_);
  rdzv::put_u64(&t, next_request_++);
  return t;
}

int64_t TcpStore::add(std::string_view key, int64_t delta) {
  const std::string t = tag();  // the same tag on a retry: cohortd runs the add once
  return call(!t.empty(), "add", key, [&](Connection& c, Clock::time_point deadline) {
    c.conn.send_all(t + RequestBuilder(wire_dialect(options_.dialect))
                            .op(Op::kAdd)
                            .key(key)
                            .delta(delta)
                            .bytes(),
                    deadline);
    return c.read(Op::kAdd, deadline).number;
  });
}

std::string TcpStore::compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) {
  const std::string t = tag();
  return call(!t.empty(), "compare_set", key, [&](Connection& c, Clock::time_point deadline) {
    c.conn.send_all(t + RequestBuilder(wire_dialect(options_.dialect))
                            .op(Op::kCompareSet)
                            .key(key)
                            .value(expected)
                            .value(desired)
                            .bytes(),
                    deadline);
    return std::string(c.read(Op::kCompareSet, deadline).values[0]);
  });
}

bool TcpStore::check(std::span<const std::string> keys) {
  return call(
      true, "check", keys.empty() ? "" : keys[0], [&](Connection& c, Clock::time_point deadline) {
        c.conn.send_all(
            RequestBuilder(wire_dialect(options_.dialect)).op(Op::kCheck).keys(keys).bytes(),
            deadline);
        return c.read(Op::kCheck, deadline).code == rdzv::kCheckReady;
      });
}

void TcpStore::wait_locked(Connection& c, std::span<const std::string> keys,
                           std::chrono::milliseconds timeout) {
  auto d = wire_dialect(options_.dialect);
  c.conn.send_all(RequestBuilder(d).op(Op::kWait).keys(keys).bytes(),
                  Clock::now() + std::chrono::seconds(30));
  try {
    uint8_t r = c.read(Op::kWait, Clock::now() + timeout).code;
    if (r != rdzv::kStopWaiting) throw ConnectionLost("unexpected WAIT reply " + std::to_string(r));
    return;
  } catch (const ReplyTimeout&) {
  }
  bool satisfied_late = false;
  if (d == rdzv::Dialect::kCurrent) {
    // Cancel, then drain: a STOP_WAITING may already be on its way ahead of WAIT_CANCELED.
    try {
      auto cancel_deadline = Clock::now() + std::chrono::seconds(10);
      c.conn.send_all(RequestBuilder(d).op(Op::kCancelWait).bytes(), cancel_deadline);
      for (;;) {
        uint8_t r = c.read(Op::kCancelWait, cancel_deadline).code;  // or WAIT's STOP_WAITING
        if (r == rdzv::kWaitCanceled) break;
        if (r == rdzv::kStopWaiting) {
          satisfied_late = true;
          continue;
        }
        throw ConnectionLost("unexpected reply to CANCEL_WAIT");
      }
    } catch (const ReplyTimeout&) {
      drop_connection_locked();
    }
  } else {
    // PyTorch 1.13 cannot cancel a wait: its late reply would be read as the answer to a later
    // request, so this connection ends here and the next call reconnects.
    drop_connection_locked();
  }
  if (satisfied_late) return;
  throw StoreTimeoutError("wait timed out after " + std::to_string(timeout.count()) + " ms on " +
                              address_ + "; keys not all set: " + join_keys(keys),
                          keys.empty() ? "" : keys[0], address_);
}

void TcpStore::wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  call(true, "wait", keys.empty() ? "" : keys[0],
       [&](Connection& c, Clock::time_point) { wait_locked(c, keys, timeout); });
}

bool TcpStore::delete_key(std::string_view key) {
  return call(true, "delete_key", key, [&](Connection& c, Clock::time_point deadline) {
    c.conn.send_all(
        RequestBuilder(wire_dialect(options_.dialect)).op(Op::kDeleteKey).key(key).bytes(),
        deadline);
    return c.read(Op::kDeleteKey, deadline).number == 1;
  });
}

int64_t TcpStore::num_keys() {
  return call(true, "num_keys", "", [&](Connection& c, Clock::time_point deadline) {
    c.conn.send_all(RequestBuilder(wire_dialect(options_.dialect)).op(Op::kGetNumKeys).bytes(),
                    deadline);
    return c.read(Op::kGetNumKeys, deadline).number;
  });
}

std::vector<std::string> TcpStore::list_keys() {
  if (options_.dialect != StoreDialect::kCurrent) {
    throw StoreError(
        "listing keys needs the current dialect: PyTorch 1.13/2.0 servers have no "
        "LIST_KEYS",
        "", address_);
  }
  return call(true, "list_keys", "", [&](Connection& c, Clock::time_point deadline) {
    c.conn.send_all(RequestBuilder(rdzv::Dialect::kCurrent).op(Op::kListKeys).bytes(), deadline);
    std::vector<std::string> out;
    try {
      for (std::string_view k : c.read(Op::kListKeys, deadline).values) out.emplace_back(k);
    } catch (const ConnectionLost& e) {
      // Servers that do not know an opcode close the connection at it; listing is read-only, so
      // nothing is lost, and retrying would only be refused again.
      drop_connection_locked();
      throw StoreError("the store at " + address_ + " closed the connection at LIST_KEYS (" +
                           e.what() +
                           "): it cannot list its keys; cohortd can (PyTorch's TCPStore servers "
                           "before LIST_KEYS was added cannot)",
                       "", address_);
    }
    return out;
  });
}

std::vector<std::string> TcpStore::multi_get(std::span<const std::string> keys) {
  return call(true, "multi_get", keys.empty() ? "" : keys[0],
              [&](Connection& c, Clock::time_point deadline) {
                std::vector<std::string> out;
                if (keys.empty()) return out;
                wait_locked(c, keys, options_.timeout);
                auto d = wire_dialect(options_.dialect);
                RequestBuilder b(d);
                std::string bytes;
                if (d == rdzv::Dialect::kCurrent) {
                  b.op(Op::kMultiGet).keys(keys).into(&bytes);
                } else {
                  for (const auto& k : keys) b.op(Op::kGet).key(k).into(&bytes);  // pipelined
                }
                c.conn.send_all(bytes, deadline);
                out.reserve(keys.size());
                if (d == rdzv::Dialect::kCurrent) {
                  for (std::string_view v : c.read(Op::kMultiGet, deadline, keys.size()).values)
                    out.emplace_back(v);
                } else {
                  for (size_t i = 0; i < keys.size(); ++i)
                    out.emplace_back(c.read(Op::kGet, deadline).values[0]);
                }
                return out;
              });
}

void TcpStore::multi_set(std::span<const std::string> keys, std::span<const std::string> values) {
  if (keys.size() != values.size()) {
    throw StoreError("multi_set needs as many values as keys", keys.empty() ? "" : keys[0],
                     address_);
  }
  call(true, "multi_set", keys.empty() ? "" : keys[0],
       [&](Connection& c, Clock::time_point deadline) {
         if (keys.empty()) return;
         auto d = wire_dialect(options_.dialect);
         RequestBuilder b(d);
         std::string bytes;
         if (d == rdzv::Dialect::kCurrent) {
           b.op(Op::kMultiSet).keys(keys);
           for (const auto& v : values) b.value(v);
           b.into(&bytes);
         } else {
           for (size_t i = 0; i < keys.size(); ++i)
             b.op(Op::kSet).key(keys[i]).value(values[i]).into(&bytes);
         }
         c.conn.send_all(bytes, deadline);
       });
}

void TcpStore::append(std::string_view key, std::string_view value) {
  if (options_.dialect == StoreDialect::kCurrent) {
    const std::string t = tag();
    call(!t.empty(), "append", key, [&](Connection& c, Clock::time_point deadline) {
      c.conn.send_all(
          t + RequestBuilder(rdzv::Dialect::kCurrent).op(Op::kAppend).key(key).value(value).bytes(),
          deadline);
    });
    return;
  }
  // PyTorch 1.13 has no APPEND: read, then compare_set until nobody wrote in between.
  std::string k(key);
  for (;;) {
    std::string current = check(std::span<const std::string>(&k, 1)) ? get(key) : std::string();
    std::string desired = current + std::string(value);
    if (compare_set(key, current, desired) == desired) return;
  }
}

}  // namespace cohort
