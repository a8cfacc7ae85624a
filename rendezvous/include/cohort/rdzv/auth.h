// cohortd's authentication: an HMAC-SHA256 challenge-response that a connection completes before
// anything else, when the server has a token. PyTorch's clients cannot take part, so a server may
// admit unauthenticated connections from listed networks (cohortd --allow-unauthenticated-from).
//
// On the wire (opcodes no PyTorch dialect uses, so detection stays unambiguous):
//   client  41                      AUTH_HELLO
//   server  <32 random bytes>       the challenge
//   client  42 <32 bytes>           AUTH_PROOF = HMAC-SHA256(token, challenge || "cohort-auth-v1")
//   server  01                      accepted (a wrong proof closes the connection)
// libcohort's clients use the mutual form, in which the server proves knowledge of the token too,
// before the client sends anything else (a server that cannot is refused):
//   client  43 <32 random bytes>    AUTH_HELLO_MUTUAL with the client's nonce
//   server  <32 random bytes>       the challenge, then
//           <32 bytes>              HMAC-SHA256(token, "cohort-auth-v2 server" || nonce ||
//           challenge)
//   client  42 <32 bytes>           AUTH_PROOF = HMAC-SHA256(token, "cohort-auth-v2 client" ||
//                                   nonce || challenge)
//   server  01                      accepted
// Both proofs cover both nonces and name their direction, so neither can be replayed to another
// connection or reflected back. Without TLS there is no channel to bind to: the traffic after the
// handshake is plaintext, and an attacker on the path can still take over an authenticated
// connection; the handshake keeps away clients and servers that do not know the token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::auth {

inline constexpr uint8_t kHello = 0x41;
inline constexpr uint8_t kProof = 0x42;
inline constexpr uint8_t kAccepted = 0x01;
inline constexpr size_t kChallengeBytes = 32;
inline constexpr size_t kProofBytes = 32;
inline constexpr uint8_t kHelloMutual = 0x43;
inline constexpr size_t kNonceBytes = 32;

// 32 bytes from the system's CSPRNG.
std::string make_challenge();
// HMAC-SHA256(token, challenge || "cohort-auth-v1").
std::string prove(std::string_view token, std::string_view challenge);
// Constant-time comparison of `proof` with the expected one.
bool verify(std::string_view token, std::string_view challenge, std::string_view proof);
// The mutual handshake's proofs: HMAC-SHA256(token, "cohort-auth-v2 " + role || nonce ||
// challenge), role "server" or "client".
std::string prove_mutual(std::string_view token, std::string_view role, std::string_view nonce,
                         std::string_view challenge);
// Constant-time comparison of two proofs.
bool same_proof(std::string_view a, std::string_view b);

// The largest token file read: a token is tens of bytes (a JWT a few KiB); a path to something
// else (a log, an image, /dev/zero) is refused instead of read.
inline constexpr size_t kMaxTokenFileBytes = 64 * 1024;

// Reads a token file: its content without surrounding whitespace. The one reader of cohortd,
// cohortrun, cohortctl and libcohort's workers. Only a regular file of at most kMaxTokenFileBytes
// is read (cohort/base/regular_file.h: opened without blocking, so a FIFO cannot hang it); a
// symbolic link is followed, since mounted secrets (Kubernetes, Docker, systemd credentials) are
// links, and its target is judged like a file named directly. Throws UsageError naming the file
// when it is not a regular file, is too large or is empty; IoError when it cannot be read.
std::string read_token_file(const std::string& path);

// The shortest token cohortd accepts: a guessable token protects nothing.
inline constexpr size_t kMinTokenBytes = 16;

// Judges a token read from the file at `path`, as ssh judges a private key. Throws UsageError,
// naming the file and what to do, when `token` is shorter than kMinTokenBytes. Returns a warning
// when group or others may read the file ("" when it is private to its owner, or cannot be
// examined: reading it just worked).
std::string check_token_file(const std::string& path, std::string_view token);

// A network such as "10.0.0.0/8", "127.0.0.1" (one host) or "fd00::/8".
class Cidr {
 public:
  // Throws UsageError naming the bad text.
  static Cidr parse(const std::string& text);
  // `address` in numeric form; IPv4-mapped IPv6 addresses match IPv4 networks.
  bool contains(const std::string& address) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  bool v6_ = false;
  std::vector<uint8_t> bytes_;
  int prefix_ = 0;
};

// Parses a comma-separated list of networks.
std::vector<Cidr> parse_cidrs(const std::string& list);

}  // namespace cohort::auth
