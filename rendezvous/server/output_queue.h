// OutputQueue: the bytes a store connection has yet to send, in order. Small pieces (reply
// headers, counters, short values) are copied into it; a large stored value is referred to, its
// buffer shared with the store and every other reply carrying it, so that a GET of a 10 MB value
// costs the loop a reference count, not a 10 MB copy (issue 27: 30 clients pipelining such GETs
// stalled the loop for up to 872 ms).
//
// Thread safety: none; one connection, the loop thread.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "server/stored_value.h"

namespace cohort::rdzv {

class OutputQueue {
 public:
  // Where encoders append copied bytes (after everything queued); the reference is valid until
  // the next call of a method other than size() and empty().
  std::string& bytes() { return tail_; }
  // Queues `value`'s bytes after everything before, by reference (no copy).
  void share(SharedBytes value);

  size_t size() const { return size_ + tail_.size(); }
  bool empty() const { return size() == 0; }

  // A piece of the queue: copied bytes, or a shared value.
  struct Piece {
    std::string copied;
    SharedBytes shared;
    std::string_view view() const { return shared ? std::string_view(*shared) : copied; }
  };
  // Moves everything queued to the end of `out`, leaving the queue empty (its tail's buffer
  // goes too: a large one is not kept for the next replies).
  void take(std::vector<Piece>* out);
  // Drops everything queued and gives the memory back.
  void clear();
  // Everything queued as one string (tests and the fuzz targets).
  std::string flatten() const;

 private:
  void seal();                // moves the tail, when not empty, into pieces_
  std::deque<Piece> pieces_;  // before the tail
  size_t size_ = 0;           // bytes in pieces_
  std::string tail_;
};

}  // namespace cohort::rdzv
