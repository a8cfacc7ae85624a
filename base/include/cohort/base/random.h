// Random identifiers: tags in names and keys, ids of clients and requests. Not for secrets (the
// token handshake draws its challenges from OpenSSL). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort {

// `n` characters of [a-z0-9].
std::string random_tag(size_t n);

// 64 random bits.
uint64_t random_u64();

}  // namespace cohort
