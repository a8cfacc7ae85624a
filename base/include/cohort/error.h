// The exceptions cohort throws, one hierarchy for the whole project.
//
// Every failure a caller can meet derives from cohort::Error, so a worker's top level can catch
// one type, write its error file and exit, and a binary's main() can map the kinds to its exit
// codes (usage errors exit 2). The kind is in the type, never in the text: no caller parses a
// message for its meaning. Messages name what failed (key, rank, operation, flag), where (server
// address, file) and why (elapsed time, limit, the system's error).
//
// The kinds are independent (virtual bases of Error), so that one error can be two things at
// once: a store wait that timed out is both a StoreError and a TimeoutError.
//
// Pure-logic layers (the wire codec, the store's state, the agent's state machine) return values
// instead; Asio handlers use std::error_code. Thread safety: immutable values.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace cohort {

// Base of every exception cohort throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// What a user asked for cannot be done as asked: a malformed flag or variable, a contradictory
// combination, a configuration that cannot work. The message says what to do instead.
class UsageError : public virtual Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

// A system call failed: a file, a socket, a process. code() is the errno (0 when unknown).
class IoError : public virtual Error {
 public:
  explicit IoError(const std::string& what, int code = 0) : Error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// A deadline passed: a connect, a store wait, a collective, a rendezvous.
class TimeoutError : public virtual Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(what) {}
};

// A peer sent what this side cannot accept: a malformed reply or record, a server that does not
// speak the expected protocol.
class ProtocolError : public virtual Error {
 public:
  explicit ProtocolError(const std::string& what) : Error(what) {}
};

// A file's contents are not what they must be: a corrupt checkpoint, a dataset that is not one, a
// damaged log. The message names the file and what is wrong with it.
class FormatError : public virtual Error {
 public:
  explicit FormatError(const std::string& what) : Error(what) {}
};

// A CUDA, cuBLAS or NCCL call failed; the message names the call, the library's error string and
// file:line.
class CudaError : public virtual Error {
 public:
  explicit CudaError(const std::string& what) : Error(what) {}
};

// A store operation failed: the server is unreachable, closed the connection, or answered
// something malformed. key() is the key involved ("" when none) and address() the server
// ("host:port").
class StoreError : public virtual Error {
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
class StoreTimeoutError : public StoreError, public TimeoutError {
 public:
  StoreTimeoutError(const std::string& what, std::string key, std::string address)
      : Error(what), StoreError(what, std::move(key), std::move(address)), TimeoutError(what) {}
};

// The message of a captured exception (what() of a std::exception, else "unknown error").
inline std::string describe(std::exception_ptr err) {
  try {
    std::rethrow_exception(err);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace cohort
