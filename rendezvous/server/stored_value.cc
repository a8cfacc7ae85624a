#include "server/stored_value.h"

namespace cohort::rdzv {

void StoredValue::assign(std::string_view bytes) {
  if (bytes.size() < kShareFrom) {
    shared_.reset();
    inline_.assign(bytes);
    return;
  }
  std::string().swap(inline_);
  if (shared_ && shared_.use_count() == 1) {
    shared_->assign(bytes);  // no reply holds it: reuse the buffer
  } else {
    shared_ = std::make_shared<std::string>(bytes);
  }
}

void StoredValue::append(std::string_view suffix) {
  const size_t size = this->size() + suffix.size();
  if (size < kShareFrom) {
    inline_.append(suffix);
    return;
  }
  if (shared_ && shared_.use_count() == 1) {
    shared_->append(suffix);  // no reply holds it: grow in place
    return;
  }
  // Inline until now, or held by a reply: a new buffer.
  auto grown = std::make_shared<std::string>();
  grown->reserve(size);
  grown->append(str()).append(suffix);
  shared_ = std::move(grown);
  std::string().swap(inline_);
}

}  // namespace cohort::rdzv
