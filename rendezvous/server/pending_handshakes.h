// PendingHandshakes: the connections that must complete the token handshake and have not yet, in
// the order they were accepted, overall and per client address.
//
// When an address, or the whole server, is at its connection limit, a newcomer that must
// authenticate takes the place of the oldest of these instead of being turned away. A flooder
// that re-opens half handshakes as fast as they are closed then holds its slots only until newer
// connections come, while a token holder completes its handshake within a round trip: with the
// newcomer turned away, 3 of 12 token holders got in within 25 s beside such a flooder (issue 27).
//
// Thread safety: none; the server's loop thread only.
#pragma once

#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include "server/store_state.h"

namespace cohort::rdzv {

class PendingHandshakes {
 public:
  // `id`, from `address`, must authenticate and has not. REQUIRES: not already added.
  void add(SessionId id, const std::string& address);
  // `id` authenticated, or closed; nothing when it was not pending.
  void remove(SessionId id);
  // The oldest pending connection from `address`, or of all.
  std::optional<SessionId> oldest(const std::string& address) const;
  std::optional<SessionId> oldest() const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string address;
    std::list<SessionId>::iterator in_all, in_address;
  };
  std::list<SessionId> all_;                                          // oldest first
  std::unordered_map<std::string, std::list<SessionId>> by_address_;  // oldest first
  std::unordered_map<SessionId, Entry> entries_;
};

}  // namespace cohort::rdzv
