// cohort::PrefixStore: a view of another store whose keys are prefixed by "<prefix>/", like
// PyTorch's PrefixStore. num_keys() reports the whole underlying store, as PyTorch does.
// Thread safety: as safe as the underlying store.
#pragma once

#include <memory>
#include <string>

#include "cohort/rdzv/store.h"

namespace cohort {

class PrefixStore final : public Store {
 public:
  // `base` must outlive this view.
  PrefixStore(std::string prefix, Store& base);
  // Shares ownership of `base`.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  const std::string& prefix() const { return prefix_; }

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key) override;
  int64_t add(std::string_view key, int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool check(std::span<const std::string> keys) override;
  using Store::wait;
  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override;
  bool delete_key(std::string_view key) override;
  int64_t num_keys() override;
  std::vector<std::string> multi_get(std::span<const std::string> keys) override;
  void multi_set(std::span<const std::string> keys, std::span<const std::string> values) override;
  void append(std::string_view key, std::string_view value) override;
  std::chrono::milliseconds timeout() const override;
  void set_timeout(std::chrono::milliseconds timeout) override;
  std::string describe() const override;
  void interrupt() override { base_.interrupt(); }
  bool supports_ttl() const override { return base_.supports_ttl(); }
  void set_with_ttl(std::string_view key, std::string_view value,
                    std::chrono::milliseconds ttl) override {
    base_.set_with_ttl(full(key), value, ttl);
  }

 private:
  std::string full(std::string_view key) const;
  std::vector<std::string> full(std::span<const std::string> keys) const;

  std::string prefix_;
  std::shared_ptr<Store> owned_;
  Store& base_;
};

}  // namespace cohort
