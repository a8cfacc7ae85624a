// A Jepsen-style crash check of cohortd --data-dir (issue 14), its own ctest (label crashcheck).
//
// For each --fsync mode, a real cohortd on 127.0.0.1 with a fresh data dir; concurrent clients
// (libcohort's TcpStore with tagged writes, so a write retried across a restart runs once) write
// while cohortd is SIGKILLed at random moments and restarted on the same port:
//   registers  SETs of values unique to the writer, and GETs;
//   counters   ADDs of 1 to 3; each acknowledged ADD's reply (the new sum) is recorded;
//   chains     COMPARE_SET from the value the client last saw to a unique value;
//   groups     MULTI_SET of one value to three keys, MULTI_GET expecting them equal.
// After each restart the checker reads every key (recorded in the history like any read), and
// again once the clients have stopped. Every operation is recorded with its invoke and complete
// times (steady clock); one whose outcome is unknown (its connection lost, no reply) is
// indeterminate: it may or may not have happened.
//
// The history checker, per key (values are unique, so every read names the write it saw):
//   registers  a value read was written (by a write invoked before the read completed); no read
//              misses an acknowledged write that completed before it began and was invoked after
//              the read's own write completed (a lost or stale write); two reads in real-time order
//              never see writes in the opposite real-time order.
//   counters   every reply and read lies between the acknowledged ADDs completed before the
//              operation began and all ADDs invoked before it ended; replies grow in real-time
//              order; at the end the counter is exact: the sum of acknowledged ADDs plus at most
//              the indeterminate ones.
//   chains     the successful COMPARE_SETs form one chain from the initial value (no two succeed
//              from the same value), every acknowledged one is on it, its order agrees with real
//              time, every value read lies on it and no read sees a value older than an
//              acknowledged COMPARE_SET completed before the read began; the final value is its
//              end.
//   groups     the register checks, and the three keys always read equal.
//
// What each mode promises: cohortd write(2)s a change's log record before it replies and before
// it tells a waiter or watcher (store_log.h, store_state.h), so under every --fsync mode a SIGKILL
// (of the process; the kernel keeps its page cache) loses nothing acknowledged: all three modes
// are held to the same checks here. The modes differ only when the machine itself goes down
// (always: nothing acknowledged is lost; interval: up to --fsync-interval; never: whatever the
// kernel had not written), which a test on one machine cannot do.
//
// Usage: store_crashcheck [--seconds N] [--clients N] [--seed N]; N seconds in all (default 60;
// at most 15 under a sanitizer), split across the three modes. Exit status 0 when every check
// passed. Before the real run, the checker is run on made-up histories with a lost write, a wrong
// counter and a forked chain, each of which it must reject (else the test fails: a checker that
// accepts anything checks nothing).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../common/sanitizer.h"
#include "../../common/subprocess.h"
#include "../raw_client.h"
#include "cohort/error.h"
#include "cohort/rdzv/codec.h"
#include "cohort/rdzv/tcp_store.h"

namespace {

using namespace std::chrono_literals;
using cohort::TcpStore;
using cohort::TcpStoreOptions;
using cohort::testing::RawClient;
using cohort::testing::Subprocess;
using Clock = std::chrono::steady_clock;

constexpr int64_t kNever = INT64_MAX;  // the completion time of an indeterminate operation
constexpr int kRegisters = 4, kCounters = 2, kChains = 2, kGroups = 1;
const char* const kInit = "init";

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

enum class Kind { kWrite, kRead, kAdd, kCas };

// One operation on one key. Registers and groups: kWrite/kRead of `value` (`missing`: the read
// found no key). Counters: kAdd of `delta` replying `sum`, kRead of `sum`. Chains: kCas from
// `expected` to `value` (its reply in `reply`), kRead of `value`.
struct Op {
  Kind kind = Kind::kRead;
  std::string key;
  int64_t invoke = 0, complete = kNever;  // kNever: indeterminate (a read is then not recorded)
  std::string value, expected, reply;
  bool missing = false;
  int64_t delta = 0, sum = 0;
  bool acked() const { return complete != kNever; }
};

Op make_op(Kind kind, std::string key, std::string value = {}) {
  Op op;
  op.kind = kind;
  op.key = std::move(key);
  op.value = std::move(value);
  return op;
}

struct History {
  std::mutex mu;
  std::vector<Op> ops;
  size_t add(Op op) {
    std::lock_guard lock(mu);
    ops.push_back(std::move(op));
    return ops.size() - 1;
  }
};

// ---- the checker ----------------------------------------------------------------------------

struct Checker {
  std::vector<std::string> violations;
  void fail(std::string why) {
    if (violations.size() < 50) violations.push_back(std::move(why));
  }

  // Registers (and groups): unique values per key.
  void registers(const std::string& key, const std::vector<const Op*>& ops) {
    std::map<std::string, const Op*> writes;
    std::vector<const Op*> reads, acked_writes;
    for (const Op* o : ops) {
      if (o->kind == Kind::kWrite) {
        if (!writes.emplace(o->value, o).second) fail(key + ": value written twice: " + o->value);
        if (o->acked()) acked_writes.push_back(o);
      } else {
        reads.push_back(o);
      }
    }
    // For a read r: the latest invoke of an acknowledged write completed before r began. A read
    // whose own write completed before that missed a write it must see.
    std::sort(acked_writes.begin(), acked_writes.end(),
              [](const Op* a, const Op* b) { return a->complete < b->complete; });
    std::vector<const Op*> by_invoke = reads;
    std::sort(by_invoke.begin(), by_invoke.end(),
              [](const Op* a, const Op* b) { return a->invoke < b->invoke; });
    size_t w = 0;
    int64_t latest_invoke = INT64_MIN;
    const Op* latest = nullptr;
    for (const Op* r : by_invoke) {
      while (w < acked_writes.size() && acked_writes[w]->complete < r->invoke) {
        if (acked_writes[w]->invoke > latest_invoke) {
          latest_invoke = acked_writes[w]->invoke;
          latest = acked_writes[w];
        }
        ++w;
      }
      if (r->missing) {
        if (latest) fail(key + ": read found no key after the write of '" + latest->value + "'");
        continue;
      }
      auto it = writes.find(r->value);
      if (it == writes.end()) {
        fail(key + ": read '" + r->value + "', which nobody wrote");
        continue;
      }
      const Op* src = it->second;
      if (src->invoke > r->complete) fail(key + ": read '" + r->value + "' before it was written");
      if (latest && latest != src && latest_invoke > src->complete)
        fail(key + ": read '" + r->value + "' after the acknowledged write of '" + latest->value +
             "' had completed (lost or stale)");
    }
    // Reads in real-time order see writes in real-time order: no r2 after r1 whose write
    // completed before r1's write was invoked.
    std::vector<const Op*> by_complete;
    for (const Op* r : reads)
      if (!r->missing && writes.count(r->value)) by_complete.push_back(r);
    std::sort(by_complete.begin(), by_complete.end(),
              [](const Op* a, const Op* b) { return a->complete < b->complete; });
    size_t c = 0;
    int64_t newest_seen = INT64_MIN;  // max invoke of the writes seen by reads completed so far
    for (const Op* r2 : by_invoke) {
      if (r2->missing || !writes.count(r2->value)) continue;
      while (c < by_complete.size() && by_complete[c]->complete < r2->invoke) {
        newest_seen = std::max(newest_seen, writes[by_complete[c]->value]->invoke);
        ++c;
      }
      if (newest_seen > writes[r2->value]->complete)
        fail(key + ": read '" + r2->value + "' after an earlier read saw a later write");
    }
  }

  // Counters: ADDs of positive deltas from 0; `final_value` read once every client had stopped
  // (-1: none).
  void counter(const std::string& key, const std::vector<const Op*>& ops, int64_t final_value) {
    std::vector<const Op*> adds, acked;
    for (const Op* o : ops)
      if (o->kind == Kind::kAdd) {
        adds.push_back(o);
        if (o->acked()) acked.push_back(o);
      }
    // sum of acked deltas completed before t; sum of all deltas invoked before t
    std::vector<std::pair<int64_t, int64_t>> done, begun;
    for (const Op* a : acked) done.push_back({a->complete, a->delta});
    for (const Op* a : adds) begun.push_back({a->invoke, a->delta});
    std::sort(done.begin(), done.end());
    std::sort(begun.begin(), begun.end());
    // Cumulative sums, so each bound is a binary search (histories have 10^5 operations).
    auto cumulate = [](const std::vector<std::pair<int64_t, int64_t>>& v) {
      std::vector<int64_t> c{0};
      for (const auto& e : v) c.push_back(c.back() + e.second);
      return c;
    };
    const std::vector<int64_t> done_sum = cumulate(done), begun_sum = cumulate(begun);
    auto prefix = [&](const std::vector<std::pair<int64_t, int64_t>>& v, int64_t t) {
      size_t i = static_cast<size_t>(
          std::lower_bound(v.begin(), v.end(), std::make_pair(t, INT64_MIN)) - v.begin());
      return (&v == &done ? done_sum : begun_sum)[i];
    };
    std::set<int64_t> sums;
    for (const Op* o : ops) {
      if (!o->acked()) continue;
      if (o->kind == Kind::kAdd) {
        if (!sums.insert(o->sum).second)
          fail(key + ": two acknowledged ADDs replied " + std::to_string(o->sum));
        int64_t low = prefix(done, o->invoke) + o->delta, high = prefix(begun, o->complete);
        if (o->sum < low || o->sum > high)
          fail(key + ": ADD replied " + std::to_string(o->sum) + ", outside [" +
               std::to_string(low) + ", " + std::to_string(high) + "]");
      } else if (o->kind == Kind::kRead) {
        int64_t low = prefix(done, o->invoke), high = prefix(begun, o->complete);
        if (o->missing || o->sum < low || o->sum > high)
          fail(key + ": read " + (o->missing ? "no key" : std::to_string(o->sum)) + ", outside [" +
               std::to_string(low) + ", " + std::to_string(high) + "]");
      }
    }
    // Replies grow in real-time order.
    std::vector<const Op*> by_invoke = acked, by_complete = acked;
    std::sort(by_invoke.begin(), by_invoke.end(),
              [](const Op* a, const Op* b) { return a->invoke < b->invoke; });
    std::sort(by_complete.begin(), by_complete.end(),
              [](const Op* a, const Op* b) { return a->complete < b->complete; });
    size_t c = 0;
    int64_t max_before = INT64_MIN;
    for (const Op* a : by_invoke) {
      while (c < by_complete.size() && by_complete[c]->complete < a->invoke)
        max_before = std::max(max_before, by_complete[c++]->sum);
      if (a->sum <= max_before)
        fail(key + ": ADD replied " + std::to_string(a->sum) + " after an ADD that replied " +
             std::to_string(max_before) + " had completed");
    }
    if (final_value >= 0) {
      int64_t acked_sum = 0, unknown_sum = 0;
      for (const Op* a : adds) (a->acked() ? acked_sum : unknown_sum) += a->delta;
      if (final_value < acked_sum || final_value > acked_sum + unknown_sum)
        fail(key + ": final value " + std::to_string(final_value) + ", acknowledged ADDs sum to " +
             std::to_string(acked_sum) + " and " + std::to_string(unknown_sum) +
             " more is unknown");
    }
  }

  // Chains: COMPARE_SETs from kInit; `final_value` read once every client had stopped.
  void chain(const std::string& key, const std::vector<const Op*>& ops,
             const std::string& final_value) {
    std::set<std::string> observed{final_value};  // values some read or later CAS saw
    for (const Op* o : ops) {
      if (o->kind == Kind::kRead && !o->missing) observed.insert(o->value);
      if (o->kind == Kind::kCas && o->acked()) {
        observed.insert(o->expected);
        observed.insert(o->reply);
      }
    }
    std::map<std::string, const Op*> next;  // expected -> the CAS that moved on from it
    std::map<std::string, const Op*> writer;
    for (const Op* o : ops) {
      if (o->kind != Kind::kCas) continue;
      writer[o->value] = o;
      bool applied = o->acked() ? o->reply == o->value : observed.count(o->value) > 0;
      if (!applied) continue;
      auto [it, fresh] = next.emplace(o->expected, o);
      if (!fresh)
        fail(key + ": two COMPARE_SETs succeeded from '" + o->expected + "' (to '" +
             it->second->value + "' and '" + o->value + "')");
    }
    std::map<std::string, size_t> pos{{kInit, 0}};
    std::string at = kInit;
    for (auto it = next.find(at); it != next.end() && pos.size() <= next.size() + 1;
         it = next.find(at)) {
      at = it->second->value;
      if (!pos.emplace(at, pos.size()).second) {
        fail(key + ": the chain loops at '" + at + "'");
        break;
      }
    }
    if (at != final_value)
      fail(key + ": the chain ends at '" + at + "' but the key holds '" + final_value + "'");
    for (const Op* o : ops)
      if (o->kind == Kind::kCas && o->acked() && o->reply == o->value) {
        if (!pos.count(o->value))
          fail(key + ": the acknowledged COMPARE_SET to '" + o->value + "' is not on the chain");
      }
    // Real time: an operation that began after an acknowledged success completed sees it or later.
    std::vector<std::pair<int64_t, size_t>> done;  // (complete, pos) of acked successes
    for (const Op* o : ops)
      if (o->kind == Kind::kCas && o->acked() && o->reply == o->value && pos.count(o->value))
        done.push_back({o->complete, pos[o->value]});
    std::sort(done.begin(), done.end());
    std::vector<size_t> max_pos;  // max_pos[i]: the furthest of done[0..i]
    for (const auto& [c, p] : done)
      max_pos.push_back(std::max(max_pos.empty() ? 0 : max_pos.back(), p));
    auto floor_at = [&](int64_t t) {
      size_t i = static_cast<size_t>(
          std::lower_bound(done.begin(), done.end(), std::make_pair(t, size_t{0})) - done.begin());
      return i == 0 ? size_t{0} : max_pos[i - 1];
    };
    for (const Op* o : ops) {
      if (!o->acked()) continue;
      std::string seen;
      size_t min_pos = floor_at(o->invoke);
      if (o->kind == Kind::kRead) {
        if (o->missing) {
          fail(key + ": read found no key");
          continue;
        }
        seen = o->value;
      } else if (o->kind == Kind::kCas) {
        if (o->reply == o->value) {
          if (pos.count(o->value) && pos[o->value] <= min_pos)
            fail(key + ": COMPARE_SET to '" + o->value + "' ordered before one completed earlier");
          continue;
        }
        if (o->reply == o->expected) {  // PyTorch's reply for a missing key
          fail(key + ": COMPARE_SET found no key");
          continue;
        }
        seen = o->reply;
      } else {
        continue;
      }
      auto p = pos.find(seen);
      if (p == pos.end()) {
        fail(key + ": saw '" + seen + "', which is not on the chain");
        continue;
      }
      if (p->second < min_pos)
        fail(key + ": saw '" + seen + "' after a later value was acknowledged");
      if (seen != kInit && writer.count(seen) && writer[seen]->invoke > o->complete)
        fail(key + ": saw '" + seen + "' before it was written");
    }
  }
};

// ---- clients --------------------------------------------------------------------------------

std::string reg_key(int i) {
  return "reg/" + std::to_string(i);
}
std::string ctr_key(int i) {
  return "ctr/" + std::to_string(i);
}
std::string cas_key(int i) {
  return "cas/" + std::to_string(i);
}
std::vector<std::string> group_keys(int g) {
  std::string p = "grp/" + std::to_string(g) + "/";
  return {p + "a", p + "b", p + "c"};
}

TcpStoreOptions client_options(int port) {
  TcpStoreOptions o;
  o.port = port;
  o.timeout = cohort::testing::kSanitized ? 20s : 5s;
  o.connect_timeout = 20s;
  o.tagged_writes = true;
  return o;
}

// SET and MULTI_SET have no reply in TCPStore's protocol: libcohort's set() returns once the bytes
// are sent, and after a lost connection the next call reconnects silently, so nothing a TcpStore
// caller sees says that a set() reached cohortd. These writers follow each write with a CHECK of
// its key on the same connection: cohortd handles a connection's requests in order and writes a
// change's log record before it reads the next request, so the CHECK's reply acknowledges the
// write. A connection lost before that reply leaves the write indeterminate (Unknown).
struct Unknown : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class RawWriter {
 public:
  RawWriter(int port, std::chrono::milliseconds timeout) : port_(port), timeout_(timeout) {}
  // Returns false when the CHECK said the key just written is missing (a violation).
  bool write(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
    namespace r = cohort::rdzv;
    if (!c_) connect();
    r::Request req;
    req.op = keys.size() == 1 ? r::Op::kSet : r::Op::kMultiSet;
    for (const auto& k : keys) req.keys.push_back(k);
    for (const auto& v : values) req.values.push_back(v);
    std::string bytes;
    r::encode_request(r::Dialect::kCurrent, req, &bytes);
    r::Request check;
    check.op = r::Op::kCheck;
    check.keys.push_back(keys[0]);
    r::encode_request(r::Dialect::kCurrent, check, &bytes);
    std::optional<std::string> reply;
    try {
      c_->send(bytes);
      reply = c_->read(1, timeout_);
    } catch (const std::runtime_error&) {
    }
    if (!reply) {
      c_.reset();
      throw Unknown("the connection was lost before the write was acknowledged");
    }
    return (*reply)[0] == 0;  // READY
  }

 private:
  void connect() {
    const auto deadline = Clock::now() + 20s;
    for (;;) {
      try {
        c_ = std::make_unique<RawClient>(port_);
        namespace r = cohort::rdzv;
        r::Request v;
        v.op = r::Op::kValidate;
        v.u32 = r::kValidationMagic;
        std::string hello;
        r::encode_request(r::Dialect::kCurrent, v, &hello);
        c_->send(hello);
        return;
      } catch (const std::runtime_error&) {
        c_.reset();
        if (Clock::now() > deadline) throw Unknown("cannot connect to cohortd");
        std::this_thread::sleep_for(2ms);  // cohortd is restarting: poll until the deadline
      }
    }
  }
  int port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<RawClient> c_;
};

struct Counts {
  std::atomic<uint64_t> acked{0}, unknown{0}, failed_reads{0}, group_mismatch{0}, not_ready{0};
};

// Reads every key once, recording each read (the checker's reads after a restart, and at the end).
void read_all(TcpStore& s, History& h, Counts& n, std::vector<std::string>* torn) {
  auto read = [&](Kind kind, const std::string& key, const std::string& hkey, bool counter) {
    Op op = make_op(kind, hkey);
    op.invoke = now_ns();
    std::vector<std::string> k{key};
    if (!s.check(k)) {
      op.missing = true;
    } else {
      op.value = s.get(key);
      if (counter) op.sum = std::stoll(op.value);
    }
    op.complete = now_ns();
    h.add(op);
    ++n.acked;
  };
  for (int i = 0; i < kRegisters; ++i) read(Kind::kRead, reg_key(i), reg_key(i), false);
  for (int i = 0; i < kCounters; ++i) read(Kind::kRead, ctr_key(i), ctr_key(i), true);
  for (int i = 0; i < kChains; ++i) read(Kind::kRead, cas_key(i), cas_key(i), false);
  for (int g = 0; g < kGroups; ++g) {
    auto keys = group_keys(g);
    Op op = make_op(Kind::kRead, keys[0]);
    op.invoke = now_ns();
    auto v = s.multi_get(keys);
    op.complete = now_ns();
    op.value = v[0];
    if (v[1] != v[0] || v[2] != v[0]) torn->push_back(v[0] + "/" + v[1] + "/" + v[2]);
    h.add(op);
    ++n.acked;
  }
}

void client(int id, int port, uint32_t seed, const std::atomic<bool>& stop, History& h, Counts& n) {
  std::mt19937 rng(seed);
  TcpStore s(client_options(port));
  RawWriter writer(port, client_options(port).timeout);
  std::vector<std::string> last_cas(kChains, kInit);
  uint64_t seq = 0;
  while (!stop.load()) {
    std::string value = std::to_string(id) + ":" + std::to_string(++seq);
    int dice = static_cast<int>(rng() % 100);
    Op op;
    size_t at = SIZE_MAX;  // a write's entry, recorded before it may happen
    op.invoke = now_ns();
    try {
      if (dice < 30) {
        op.kind = Kind::kWrite;
        op.key = reg_key(static_cast<int>(rng() % kRegisters));
        op.value = value;
        at = h.add(op);
        if (!writer.write({op.key}, {value})) ++n.not_ready;
      } else if (dice < 50) {
        op.kind = Kind::kRead;
        op.key = reg_key(static_cast<int>(rng() % kRegisters));
        op.value = s.get(op.key);
      } else if (dice < 70) {
        op.kind = Kind::kAdd;
        op.key = ctr_key(static_cast<int>(rng() % kCounters));
        op.delta = 1 + static_cast<int64_t>(rng() % 3);
        at = h.add(op);
        op.sum = s.add(op.key, op.delta);
      } else if (dice < 90) {
        int c = static_cast<int>(rng() % kChains);
        op.kind = Kind::kCas;
        op.key = cas_key(c);
        op.expected = last_cas[c];
        op.value = value;
        at = h.add(op);
        op.reply = s.compare_set(op.key, op.expected, value);
        // Moved on, or told the current value; PyTorch's reply for a missing key echoes
        // `expected` (the checker flags it).
        last_cas[c] = op.reply;
      } else if (dice < 95) {
        op.kind = Kind::kWrite;
        auto keys = group_keys(static_cast<int>(rng() % kGroups));
        op.key = keys[0];
        op.value = value;
        at = h.add(op);
        if (!writer.write(keys, std::vector<std::string>(3, value))) ++n.not_ready;
      } else {
        op.kind = Kind::kRead;
        auto keys = group_keys(static_cast<int>(rng() % kGroups));
        op.key = keys[0];
        auto v = s.multi_get(keys);
        if (v[1] != v[0] || v[2] != v[0]) ++n.group_mismatch;
        op.value = v[0];
      }
      op.complete = now_ns();
      ++n.acked;
    } catch (const std::runtime_error&) {  // cohort::Error, Unknown
      // Its outcome is unknown: writes stay recorded as indeterminate; reads are dropped.
      op.complete = kNever;
      if (op.kind == Kind::kRead) {
        ++n.failed_reads;
        continue;
      }
      ++n.unknown;  // its entry stays indeterminate (complete == kNever)
      continue;
    }
    if (op.kind == Kind::kRead) {
      h.add(op);
    } else {
      std::lock_guard lock(h.mu);
      Op& entry = h.ops[at];
      entry.complete = op.complete;
      entry.sum = op.sum;
      entry.reply = op.reply;
    }
  }
}

// ---- one mode -------------------------------------------------------------------------------

// A free port below the kernel's ephemeral range. While cohortd is down between a kill and its
// restart, the clients connect again and again; a port from the ephemeral range could be handed
// to one of those connections as its own source port, and a TCP connect to 127.0.0.1:P from P
// connects to itself (simultaneous open): the restarted cohortd could not bind, and the client
// would be talking to itself. Source ports never come from below the range.
int free_port(std::mt19937& rng) {
  int low = 32768, high = 60999;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &low, &high) != 2) low = 32768;
    std::fclose(f);
  }
  const int first = 10000, span = std::max(1, low - first);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int port = first + static_cast<int>(rng() % static_cast<uint32_t>(span));
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    if (free) return port;
  }
  std::fprintf(stderr, "crashcheck: no free port below %d\n", low);
  std::exit(2);
}

struct ModeResult {
  int kills = 0;
  uint64_t ops = 0, unknown = 0;
  std::vector<std::string> violations;
};

ModeResult run_mode(const std::string& mode, double seconds, int clients, uint32_t seed) {
  ModeResult res;
  char templ[] = "/tmp/cohort_crashcheck_XXXXXX";
  std::string dir = ::mkdtemp(templ);
  std::mt19937 rng(seed);
  int port = free_port(rng);
  auto start = [&] {
    auto p = std::make_unique<Subprocess>(
        std::vector<std::string>{COHORTD_BIN, "--host", "127.0.0.1", "--port", std::to_string(port),
                                 "--data-dir", dir, "--fsync", mode});
    if (!p->read_line(30s)) {
      res.violations.push_back("cohortd did not start: " + p->read_all_stderr(1s));
      return std::unique_ptr<Subprocess>();
    }
    return p;
  };
  auto cohortd = start();
  if (!cohortd) return res;
  History h;
  Counts n;
  std::vector<std::string> torn;
  {
    TcpStore s(client_options(port));
    RawWriter w(port, client_options(port).timeout);
    auto write = [&](Kind kind, const std::string& key, auto&& fn) {
      Op op = make_op(kind, key, kInit);
      op.invoke = now_ns();
      fn();
      op.complete = now_ns();
      h.add(op);
    };
    for (int i = 0; i < kRegisters; ++i)
      write(Kind::kWrite, reg_key(i), [&] { w.write({reg_key(i)}, {kInit}); });
    for (int i = 0; i < kCounters; ++i) s.add(ctr_key(i), 0);  // creates "0": no delta to count
    for (int i = 0; i < kChains; ++i) w.write({cas_key(i)}, {kInit});  // the chain's root
    for (int g = 0; g < kGroups; ++g)
      write(Kind::kWrite, group_keys(g)[0],
            [&] { w.write(group_keys(g), std::vector<std::string>(3, kInit)); });
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back(client, c, port, seed * 7919 + static_cast<uint32_t>(c), std::cref(stop),
                         std::ref(h), std::ref(n));
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  TcpStore checker(client_options(port));
  while (Clock::now() < end && res.violations.empty()) {
    // Kill at a random moment: once the clients have made some progress since the restart (20 to
    // 220 acknowledged operations) and 5 to 200 ms have passed, whichever is later; --fsync
    // always is many times slower, so a count alone would kill it rarely and time alone might
    // kill before any client reconnected.
    const uint64_t target = n.acked.load() + 20 + rng() % 200;
    const auto not_before = Clock::now() + std::chrono::milliseconds(5 + rng() % 196);
    while ((n.acked.load() < target || Clock::now() < not_before) && Clock::now() < end)
      std::this_thread::sleep_for(1ms);
    if (Clock::now() >= end) break;
    cohortd->signal(SIGKILL);
    if (!cohortd->wait(10s)) {
      res.violations.push_back("cohortd did not die of SIGKILL");
      break;
    }
    ++res.kills;
    cohortd = start();
    if (!cohortd) break;
    try {
      read_all(checker, h, n, &torn);
    } catch (const cohort::Error& e) {
      res.violations.push_back(std::string("the checker's reads after a restart failed: ") +
                               e.what());
    }
  }
  stop = true;
  for (auto& t : threads) t.join();
  std::vector<int64_t> final_counters(kCounters, -1);
  std::vector<std::string> final_chains(kChains);
  if (cohortd) {
    try {
      read_all(checker, h, n, &torn);
      for (int i = 0; i < kCounters; ++i) final_counters[i] = std::stoll(checker.get(ctr_key(i)));
      for (int i = 0; i < kChains; ++i) final_chains[i] = checker.get(cas_key(i));
    } catch (const cohort::Error& e) {
      res.violations.push_back(std::string("the final reads failed: ") + e.what());
    }
  }
  cohortd.reset();  // kills its process group
  std::filesystem::remove_all(dir);

  Checker check;
  std::map<std::string, std::vector<const Op*>> by_key;
  for (const Op& o : h.ops) by_key[o.key].push_back(&o);
  for (int i = 0; i < kRegisters; ++i) check.registers(reg_key(i), by_key[reg_key(i)]);
  for (int g = 0; g < kGroups; ++g) check.registers(group_keys(g)[0], by_key[group_keys(g)[0]]);
  for (int i = 0; i < kCounters; ++i)
    check.counter(ctr_key(i), by_key[ctr_key(i)], final_counters[i]);
  for (int i = 0; i < kChains; ++i) check.chain(cas_key(i), by_key[cas_key(i)], final_chains[i]);
  for (const auto& t : torn) check.fail("a MULTI_SET read half applied: " + t);
  if (n.not_ready)
    check.fail(std::to_string(n.not_ready.load()) + " CHECKs found no key just written");
  if (n.group_mismatch)
    check.fail("clients read " + std::to_string(n.group_mismatch.load()) +
               " half-applied MULTI_SETs");
  res.violations.insert(res.violations.end(), check.violations.begin(), check.violations.end());
  res.ops = n.acked.load();
  res.unknown = n.unknown.load();
  std::map<Kind, std::pair<uint64_t, uint64_t>> kinds;  // acked, unknown
  for (const Op& o : h.ops) (o.acked() ? kinds[o.kind].first : kinds[o.kind].second)++;
  std::string counters;
  for (int i = 0; i < kCounters; ++i) {
    int64_t acked = 0, unknown = 0;
    for (const Op* o : by_key[ctr_key(i)])
      if (o->kind == Kind::kAdd) (o->acked() ? acked : unknown) += o->delta;
    counters += " " + ctr_key(i) + "=" + std::to_string(final_counters[i]) + " (acked " +
                std::to_string(acked) + ", +" + std::to_string(unknown) + " unknown)";
  }
  std::printf(
      "crashcheck --fsync %-8s %3d SIGKILLs, %7llu ops acknowledged (writes %llu, reads %llu, "
      "adds %llu, compare_sets %llu), %llu indeterminate, %llu reads lost to a kill;%s; "
      "%zu violations\n",
      mode.c_str(), res.kills, static_cast<unsigned long long>(res.ops),
      static_cast<unsigned long long>(kinds[Kind::kWrite].first),
      static_cast<unsigned long long>(kinds[Kind::kRead].first),
      static_cast<unsigned long long>(kinds[Kind::kAdd].first),
      static_cast<unsigned long long>(kinds[Kind::kCas].first),
      static_cast<unsigned long long>(res.unknown),
      static_cast<unsigned long long>(n.failed_reads.load()), counters.c_str(),
      res.violations.size());
  std::fflush(stdout);
  return res;
}

// ---- the checker rejects what it must --------------------------------------------------------

int self_test() {
  int failures = 0;
  auto expect_rejects = [&](const char* what, Checker& c) {
    if (c.violations.empty()) {
      std::printf("checker self-test: accepted %s\n", what);
      ++failures;
    }
  };
  auto op = [](Kind k, std::string v, int64_t a, int64_t b) {
    Op o = make_op(k, "k", std::move(v));
    o.invoke = a;
    o.complete = b;
    return o;
  };
  {  // init, then "x" acknowledged, then a read of "init": x was lost
    std::vector<Op> ops{op(Kind::kWrite, kInit, 0, 1), op(Kind::kWrite, "x", 2, 3),
                        op(Kind::kRead, kInit, 4, 5)};
    std::vector<const Op*> p;
    for (auto& o : ops) p.push_back(&o);
    Checker c;
    c.registers("k", p);
    expect_rejects("a lost register write", c);
    Checker ok;
    ops[2].value = "x";
    ok.registers("k", p);
    if (!ok.violations.empty()) {
      std::printf("checker self-test: rejected a good register history: %s\n",
                  ok.violations[0].c_str());
      ++failures;
    }
  }
  {  // two acknowledged ADDs of 1, the counter ends at 1
    std::vector<Op> ops{op(Kind::kAdd, "", 0, 1), op(Kind::kAdd, "", 2, 3)};
    ops[0].delta = ops[1].delta = 1;
    ops[0].sum = 1;
    ops[1].sum = 2;
    std::vector<const Op*> p{&ops[0], &ops[1]};
    Checker c;
    c.counter("k", p, 1);
    expect_rejects("a lost ADD", c);
    Checker ok;
    ok.counter("k", p, 2);
    if (!ok.violations.empty()) {
      std::printf("checker self-test: rejected a good counter: %s\n", ok.violations[0].c_str());
      ++failures;
    }
  }
  {  // two COMPARE_SETs both succeed from init: a fork
    std::vector<Op> ops{op(Kind::kCas, "a", 0, 1), op(Kind::kCas, "b", 2, 3)};
    for (auto& o : ops) {
      o.expected = kInit;
      o.reply = o.value;
    }
    std::vector<const Op*> p{&ops[0], &ops[1]};
    Checker c;
    c.chain("k", p, "b");
    expect_rejects("a forked chain", c);
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 60;
  int clients = 4;
  uint32_t seed = static_cast<uint32_t>(std::random_device{}());
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (a == "--clients") {
      clients = std::atoi(argv[i + 1]);
    } else if (a == "--seed") {
      seed = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    } else {
      std::fprintf(stderr, "usage: store_crashcheck [--seconds N] [--clients N] [--seed N]\n");
      return 2;
    }
  }
  // Under a sanitizer cohortd restarts and serves several times slower: a quarter of the time
  // still kills it a few times per mode, and keeps the sanitizer stages short.
  if (cohort::testing::kSanitized) seconds = std::min(seconds, 15.0);
  ::signal(SIGPIPE, SIG_IGN);
  if (int f = self_test()) {
    std::printf("crashcheck: the checker's self-test failed %d times\n", f);
    return 1;
  }
  std::printf("crashcheck: %.0f s, %d clients, seed %u\n", seconds, clients, seed);
  int kills = 0;
  uint64_t ops = 0;
  bool failed = false;
  for (const char* mode : {"always", "interval", "never"}) {
    ModeResult r = run_mode(mode, seconds / 3, clients, seed);
    kills += r.kills;
    ops += r.ops;
    for (const auto& v : r.violations)
      std::printf("  VIOLATION (--fsync %s): %s\n", mode, v.c_str());
    if (!r.violations.empty()) failed = true;
    if (r.kills < 2) {
      std::printf("  --fsync %s: only %d SIGKILLs: too few to judge\n", mode, r.kills);
      failed = true;
    }
  }
  std::printf("crashcheck: %s: %d SIGKILLs, %llu operations acknowledged\n",
              failed ? "FAILED" : "passed", kills, static_cast<unsigned long long>(ops));
  return failed ? 1 : 0;
}
