#include "server/pending_handshakes.h"

namespace cohort::rdzv {

void PendingHandshakes::add(SessionId id, const std::string& address) {
  auto& of_address = by_address_[address];
  all_.push_back(id);
  of_address.push_back(id);
  entries_.emplace(id, Entry{address, std::prev(all_.end()), std::prev(of_address.end())});
}

void PendingHandshakes::remove(SessionId id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  all_.erase(it->second.in_all);
  auto of_address = by_address_.find(it->second.address);
  of_address->second.erase(it->second.in_address);
  if (of_address->second.empty()) by_address_.erase(of_address);
  entries_.erase(it);
}

std::optional<SessionId> PendingHandshakes::oldest(const std::string& address) const {
  auto it = by_address_.find(address);
  if (it == by_address_.end()) return std::nullopt;
  return it->second.front();
}

std::optional<SessionId> PendingHandshakes::oldest() const {
  if (all_.empty()) return std::nullopt;
  return all_.front();
}

}  // namespace cohort::rdzv
