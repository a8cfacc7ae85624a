// StoredValue: one value of the store. A short one is held inline; from kShareFrom bytes on, its
// bytes live in a buffer that the replies carrying it share (output_queue.h), so that sending a
// large value costs a reference count instead of a copy: 30 clients pipelining GETs of a 10 MB
// value had the loop copy 10 MB per GET, and stalled it for up to 872 ms (issue 27).
//
// A buffer is never changed while a reply holds it: a write into a shared one is made into a new
// buffer (APPEND copies then; an unshared buffer grows in place, as a std::string does).
//
// Thread safety: none; the store's loop thread only (the reference counts are read unlocked).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace cohort::rdzv {

// Bytes shared by the store and the replies that send them; immutable while shared.
using SharedBytes = std::shared_ptr<const std::string>;

class StoredValue {
 public:
  // Values of at least this many bytes are kept in a shared buffer; copying fewer into a reply
  // costs less than the reference (a 16 KiB memcpy is about a microsecond).
  static constexpr size_t kShareFrom = 16 * 1024;

  StoredValue() = default;
  explicit StoredValue(std::string_view bytes) { assign(bytes); }

  const std::string& str() const { return shared_ ? *shared_ : inline_; }
  std::string_view view() const { return str(); }
  size_t size() const { return str().size(); }

  // The bytes' buffer when they are in a shared one (a reply may keep it), else null.
  SharedBytes shared() const { return shared_; }

  void assign(std::string_view bytes);
  void append(std::string_view suffix);

 private:
  std::string inline_;                   // under kShareFrom bytes
  std::shared_ptr<std::string> shared_;  // from kShareFrom bytes on
};

}  // namespace cohort::rdzv
