// cohort::printable (cohort/base/printable.h): others' text made safe for a terminal.
#include "cohort/base/printable.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(Printable, KeepsTextNewlinesAndTabs) {
  EXPECT_EQ(printable("Traceback:\n\tline 3 in f\nValueError: é ✓"),
            "Traceback:\n\tline 3 in f\nValueError: é ✓");
  EXPECT_EQ(printable("a\\b"), "a\\b");
}

TEST(Printable, EscapesWhatATerminalWouldActOn) {
  // A title change, a screen clear, a clipboard write (OSC 52), a carriage return that hides
  // what came before it on the line.
  EXPECT_EQ(printable("\x1b]0;pwned\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07 ok\rhidden"),
            "\\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;ZXZpbA==\\x07 ok\\x0dhidden");
  EXPECT_EQ(printable(std::string("nul\0del\x7f", 8)), "nul\\x00del\\x7f");
  // C1 controls in UTF-8 (U+009B is a one-character CSI) and a right-to-left override.
  EXPECT_EQ(printable("\xc2\x9b"
                      "2J \xe2\x80\xae"
                      "txt"),
            "\\u{009b}2J \\u{202e}txt");
}

TEST(Printable, EscapesBytesThatAreNotUtf8) {
  EXPECT_EQ(printable("bad\xff\xfe"), "bad\\xff\\xfe");
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");           // an overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(printable("cut \xe2\x9c"), "cut \\xe2\\x9c");   // a sequence cut short
}

TEST(Printable, OneLineFieldsEscapeNewlinesToo) {
  EXPECT_EQ(printable("host\nFAKE LINE\tx", false), "host\\x0aFAKE LINE\\x09x");
}

}  // namespace
}  // namespace cohort
