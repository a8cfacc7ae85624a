#include "server/output_queue.h"

namespace cohort::rdzv {

void OutputQueue::seal() {
  if (tail_.empty()) return;
  size_ += tail_.size();
  pieces_.push_back({std::move(tail_), nullptr});
  tail_ = std::string();
}

void OutputQueue::share(SharedBytes value) {
  if (!value || value->empty()) return;
  seal();
  size_ += value->size();
  pieces_.push_back({std::string(), std::move(value)});
}

void OutputQueue::take(std::vector<Piece>* out) {
  seal();
  for (auto& p : pieces_) out->push_back(std::move(p));
  pieces_.clear();
  size_ = 0;
}

void OutputQueue::clear() {
  std::deque<Piece>().swap(pieces_);
  std::string().swap(tail_);
  size_ = 0;
}

std::string OutputQueue::flatten() const {
  std::string all;
  all.reserve(size());
  for (const auto& p : pieces_) all.append(p.view());
  all.append(tail_);
  return all;
}

}  // namespace cohort::rdzv
