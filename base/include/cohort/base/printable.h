// Text that others wrote (a worker's error file, a record any client of a tokenless store may
// write), made safe to show on a terminal: what a terminal would act on instead of showing is
// written out as an escape. Escape sequences can retitle a window, clear the screen or write to
// the clipboard (OSC 52); kubectl's CVE-2021-25743 is this class of bug.
#pragma once

#include <string>
#include <string_view>

namespace cohort {

// `text` with every C0 control character but '\n' and '\t' (so also ESC, BEL and '\r'), DEL and
// every C1 control character written as "\xNN" or "\u{NNNN}", and every byte that is not part
// of valid UTF-8 as "\xNN". `keep_newlines` false escapes '\n' and '\t' too (one-line fields:
// a host name, a job name). A backslash stays as it is.
std::string printable(std::string_view text, bool keep_newlines = true);

}  // namespace cohort
