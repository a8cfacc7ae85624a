#include "cohort/base/printable.h"

#include <cstdint>
#include <cstdio>

namespace cohort {
namespace {

void hex_byte(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

// The length of the UTF-8 sequence at the start of `s` and its code point; 0 when invalid.
size_t utf8_sequence(std::string_view s, uint32_t* code) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  size_t n;
  uint32_t cp;
  if (c < 0x80) {
    *code = c;
    return 1;
  } else if (c >= 0xc2 && c <= 0xdf) {
    n = 2, cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3f);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are not valid UTF-8.
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  *code = cp;
  return n;
}

// C1 controls, and the bidirectional overrides that make a terminal show text in another order
// than it is ("Trojan Source", CVE-2021-42574).
bool is_invisible_control(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string printable(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    uint32_t cp = 0;
    const size_t n = utf8_sequence(text, &cp);
    if (n == 0) {
      hex_byte(out, static_cast<unsigned char>(text[0]));
      text.remove_prefix(1);
      continue;
    }
    if (n == 1) {
      const char c = text[0];
      if ((c == '\n' || c == '\t') && keep_newlines) {
        out += c;
      } else if (cp < 0x20 || cp == 0x7f) {
        hex_byte(out, static_cast<unsigned char>(c));
      } else {
        out += c;
      }
    } else if (is_invisible_control(cp)) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\u{%04x}", cp);
      out += buf;
    } else {
      out.append(text.substr(0, n));
    }
    text.remove_prefix(n);
  }
  return out;
}

}  // namespace cohort
