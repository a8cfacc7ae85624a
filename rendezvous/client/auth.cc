#include "cohort/rdzv/auth.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <sstream>
#include <stdexcept>

#include "cohort/base/regular_file.h"
#include "cohort/error.h"

namespace cohort::auth {
namespace {

constexpr std::string_view kContext = "cohort-auth-v1";

// Numeric address -> 4 or 16 bytes; IPv4-mapped IPv6 becomes IPv4. False if not numeric.
bool address_bytes(const std::string& text, std::vector<uint8_t>* out, bool* v6) {
  in6_addr a6{};
  in_addr a4{};
  if (::inet_pton(AF_INET, text.c_str(), &a4) == 1) {
    const auto* p = reinterpret_cast<const uint8_t*>(&a4);
    out->assign(p, p + 4);
    *v6 = false;
    return true;
  }
  if (::inet_pton(AF_INET6, text.c_str(), &a6) == 1) {
    const auto* p = reinterpret_cast<const uint8_t*>(&a6);
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::equal(p, p + 12, mapped)) {
      out->assign(p + 12, p + 16);
      *v6 = false;
    } else {
      out->assign(p, p + 16);
      *v6 = true;
    }
    return true;
  }
  return false;
}

}  // namespace

std::string make_challenge() {
  std::string c(kChallengeBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(c.data()), static_cast<int>(c.size())) != 1)
    throw Error("RAND_bytes failed");
  return c;
}

std::string prove(std::string_view token, std::string_view challenge) {
  std::string msg(challenge);
  msg.append(kContext);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

bool verify(std::string_view token, std::string_view challenge, std::string_view proof) {
  std::string expected = prove(token, challenge);
  return proof.size() == expected.size() &&
         CRYPTO_memcmp(proof.data(), expected.data(), expected.size()) == 0;
}

std::string prove_mutual(std::string_view token, std::string_view role, std::string_view nonce,
                         std::string_view challenge) {
  std::string msg("cohort-auth-v2 ");
  msg.append(role);
  msg.append(nonce);
  msg.append(challenge);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

bool same_proof(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string read_token_file(const std::string& path) {
  std::string t = read_regular_file(path, "the token file", {.max_bytes = kMaxTokenFileBytes});
  size_t a = t.find_first_not_of(" \t\r\n"), b = t.find_last_not_of(" \t\r\n");
  if (a == std::string::npos) throw UsageError("the token file " + path + " is empty");
  return t.substr(a, b - a + 1);
}

std::string check_token_file(const std::string& path, std::string_view token) {
  if (token.size() < kMinTokenBytes) {
    throw UsageError("the token in " + path + " is " + std::to_string(token.size()) +
                     " bytes; at least " + std::to_string(kMinTokenBytes) +
                     " are required (make one with: head -c 32 /dev/urandom | base64 > " + path +
                     "; chmod 600 " + path + ")");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) == 0) return {};
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return "the token file " + path + " has mode " + mode +
         ": other users may read it and use the store; chmod 600 " + path;
}

Cidr Cidr::parse(const std::string& text) {
  Cidr c;
  c.text_ = text;
  auto slash = text.find('/');
  std::string addr = text.substr(0, slash);
  if (!address_bytes(addr, &c.bytes_, &c.v6_)) {
    throw UsageError("'" + text + "' is not a network (a.b.c.d/n or an IPv6 prefix)");
  }
  int bits = static_cast<int>(c.bytes_.size() * 8);
  c.prefix_ = bits;
  if (slash != std::string::npos) {
    try {
      size_t used = 0;
      std::string p = text.substr(slash + 1);
      c.prefix_ = std::stoi(p, &used);
      if (used != p.size()) throw UsageError(p);
    } catch (const std::exception&) {
      throw UsageError("'" + text + "': bad prefix length");
    }
    if (c.prefix_ < 0 || c.prefix_ > bits) throw UsageError("'" + text + "': prefix out of range");
  }
  return c;
}

bool Cidr::contains(const std::string& address) const {
  std::vector<uint8_t> a;
  bool v6 = false;
  if (!address_bytes(address, &a, &v6) || v6 != v6_) return false;
  int bits = prefix_;
  for (size_t i = 0; i < a.size() && bits > 0; ++i, bits -= 8) {
    uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a[i] & mask) != (bytes_[i] & mask)) return false;
  }
  return true;
}

std::vector<Cidr> parse_cidrs(const std::string& list) {
  std::vector<Cidr> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(Cidr::parse(item));
  }
  return out;
}

}  // namespace cohort::auth
