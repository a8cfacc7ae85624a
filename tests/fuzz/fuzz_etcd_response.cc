// fuzz_etcd_response: reading the etcd v3 JSON gateway's responses (rendezvous/etcd/etcd_json.h).
//
// The input is one response body (or one line of the /v3/watch stream). Every parser runs on it;
// each may only return or throw std::runtime_error ("malformed"), as the header promises: any
// other exception (a JSON library type_error, std::out_of_range ...), a crash, a leak or a
// sanitizer report is a bug. parse_error() never throws. Also: a lease grant is never 0, and
// base64 round-trips the input's bytes. Seeds: tests/fuzz/corpus/etcd_response/ (the gateway's
// real responses, docs/ETCD.md).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "etcd/etcd_json.h"
#include "fuzz_check.h"

namespace {

template <typename F>
void parse_or_reject(F&& parse) {
  try {
    parse();
  } catch (const std::runtime_error& e) {
    COHORT_FUZZ_CHECK(e.what()[0] != '\0', "rejected without a reason");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::etcd;
  std::string_view text(reinterpret_cast<const char*>(data), size);

  parse_or_reject([&] {
    RangeResult r = parse_range(text);
    for (const KeyValue& kv : r.kvs) (void)kv.key.size();
  });
  parse_or_reject([&] { parse_txn(text); });
  parse_or_reject([&] { parse_watch_line(text); });
  parse_or_reject([&] {
    int64_t id = parse_lease_grant(text);
    COHORT_FUZZ_CHECK(id != 0, "lease grant returned 0");
  });
  parse_or_reject([&] { parse_keepalive_ttl(text); });
  parse_or_reject([&] { parse_deleted(text); });
  (void)parse_error(text);  // never throws
  parse_or_reject([&] { base64_decode(text); });

  std::string encoded = base64_encode(text);
  COHORT_FUZZ_CHECK(encoded.size() % 4 == 0, "base64 of %zu bytes is %zu long", size,
                    encoded.size());
  COHORT_FUZZ_CHECK(base64_decode(encoded) == text, "base64 does not round-trip %zu bytes", size);
  return 0;
}
