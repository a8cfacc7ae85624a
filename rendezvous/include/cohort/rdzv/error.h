// The exceptions of cohort's public API (the store client and libcohort).
//
// Every failure a caller can meet derives from cohort::Error, so a worker's top level can catch
// one type, write its error file and exit. Messages name what failed (key, rank, operation), where
// (server address) and why (elapsed time, limit). Pure-logic layers (codec, store state, agent
// state machine) return values instead; see ../shared/STYLE.md "Error handling".
#pragma once

#include <stdexcept>
#include <string>

namespace cohort {

// Base of every exception cohort throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A deadline passed: a store wait, a connect, a collective.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(what) {}
};

// A store operation failed: the server is unreachable, closed the connection, or answered something
// malformed. key() is the key involved ("" when none) and address() the server ("host:port").
class StoreError : public Error {
 public:
  StoreError(const std::string& what, std::string key, std::string address)
      : Error(what), key_(std::move(key)), address_(std::move(address)) {}
  const std::string& key() const { return key_; }
  const std::string& address() const { return address_; }

 private:
  std::string key_;
  std::string address_;
};

// A store wait or get whose deadline passed (PyTorch raises DistStoreError there too).
class StoreTimeoutError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace cohort
