// The fatal-signal half of error_file.h. Everything the handler touches is prepared by
// install_fatal_signal_handlers(): the error-file path, a memfd that backtrace_symbols_fd() writes
// into, fixed buffers, an alternate stack. The handler itself calls only async-signal-safe
// functions (open/write/read/lseek/ftruncate/close/unlink/sigaction/raise/getpid/time), plus
// backtrace() and backtrace_symbols_fd(), which glibc documents as safe once backtrace() has been
// called once (it loads libgcc lazily; we call it at install time).
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "cohort/base/worker_env_names.h"
#include "cohort/error_file.h"
#include "crash_cleanup.h"

namespace cohort {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE};
constexpr size_t kPathMax = 4096;
constexpr size_t kTraceMax = 32 * 1024;

// Process-wide by nature (signal dispositions are); written once under g_install_once.
struct HandlerState {
  char error_file[kPathMax] = {};
  char rank[32] = "?";
  int trace_fd = -1;
  char trace[kTraceMax];
  char escaped[kTraceMax * 2];
  std::atomic<bool> entered{false};
};
HandlerState g_state;
std::once_flag g_install_once;

// Tiny async-signal-safe formatting helpers.
struct Buf {
  char* p;
  size_t cap;
  size_t len = 0;
  void put(const char* s) {
    while (*s != '\0' && len + 1 < cap) p[len++] = *s++;
  }
  void put_int(long long v) {
    char tmp[24];
    int n = 0;
    const bool neg = v < 0;
    unsigned long long u = neg ? 0ULL - static_cast<unsigned long long>(v) : v;
    do {
      tmp[n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (neg && len + 1 < cap) p[len++] = '-';
    while (n > 0 && len + 1 < cap) p[len++] = tmp[--n];
  }
  // JSON string body: escapes quotes, backslashes and control characters.
  void put_json(const char* s, size_t n) {
    static const char kHex[] = "0123456789abcdef";
    for (size_t i = 0; i < n && len + 7 < cap; ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c == '"' || c == '\\') {
        p[len++] = '\\';
        p[len++] = static_cast<char>(c);
      } else if (c == '\n') {
        p[len++] = '\\';
        p[len++] = 'n';
      } else if (c < 0x20 || c >= 0x7f) {
        // Non-ASCII bytes are escaped too: a symbol or path need not be valid UTF-8.
        p[len++] = '\\';
        p[len++] = 'u';
        p[len++] = '0';
        p[len++] = '0';
        p[len++] = kHex[c >> 4];
        p[len++] = kHex[c & 15];
      } else {
        p[len++] = static_cast<char>(c);
      }
    }
  }
};

void write_all(int fd, const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
  }
  return "SIG?";
}

void on_fatal_signal(int sig, siginfo_t*, void*) {
  const int saved_errno = errno;
  // Only the first crashing thread reports; any other dies with its signal below.
  if (!g_state.entered.exchange(true)) {
    detail::run_crash_cleanup();

    char msg[256];
    Buf m{msg, sizeof(msg)};
    m.put("Signal ");
    m.put_int(sig);
    m.put(" (");
    m.put(signal_name(sig));
    m.put(") received by PID ");
    m.put_int(::getpid());
    msg[m.len] = '\0';

    size_t trace_len = 0;
    // The memfd is empty unless a handler ran before (only the first crashing thread gets here);
    // a trace file that cannot be emptied is left out rather than read with stale bytes.
    if (g_state.trace_fd >= 0 && ::ftruncate(g_state.trace_fd, 0) == 0) {
      void* frames[64];
      const int n = ::backtrace(frames, 64);
      ::lseek(g_state.trace_fd, 0, SEEK_SET);
      ::backtrace_symbols_fd(frames, n, g_state.trace_fd);
      ::lseek(g_state.trace_fd, 0, SEEK_SET);
      ssize_t r;
      while (trace_len < kTraceMax &&
             (r = ::read(g_state.trace_fd, g_state.trace + trace_len, kTraceMax - trace_len)) > 0) {
        trace_len += static_cast<size_t>(r);
      }
    }

    bool wrote = false;
    if (g_state.error_file[0] != '\0') {
      Buf j{g_state.escaped, sizeof(g_state.escaped)};
      j.put("{\"message\": {\"message\": \"");
      j.put_json(msg, m.len);
      j.put("\", \"extraInfo\": {\"py_callstack\": \"");
      j.put_json(g_state.trace, trace_len);
      j.put("\", \"timestamp\": \"");
      j.put_int(static_cast<long long>(::time(nullptr)));
      j.put("\"}}}");
      const int fd = ::open(g_state.error_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        write_all(fd, g_state.escaped, j.len);
        ::close(fd);
        wrote = true;
      }
    }

    char line[kPathMax + 512];
    Buf l{line, sizeof(line)};
    l.put("[cohort] rank ");
    l.put(g_state.rank);
    l.put(": ");
    l.put(msg);
    if (wrote) {
      l.put(" (error file: ");
      l.put(g_state.error_file);
      l.put(")");
    }
    l.put("\n");
    write_all(STDERR_FILENO, line, l.len);
  }

  // Die of the same signal, so the launcher sees the signal in the exit status.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  errno = saved_errno;
  ::raise(sig);  // pending until the handler returns (sig is blocked while it runs)
}

void install_once() {
  const char* path = std::getenv(worker_env::kErrorFile);
  if (path != nullptr && std::strlen(path) < kPathMax) std::strcpy(g_state.error_file, path);
  const char* rank = std::getenv(worker_env::kRank);
  if (rank != nullptr && std::strlen(rank) < sizeof(g_state.rank)) std::strcpy(g_state.rank, rank);
  g_state.trace_fd = ::memfd_create("cohort-backtrace", MFD_CLOEXEC);
  void* warm[4];
  ::backtrace(warm, 4);  // loads libgcc's unwinder now, not inside the handler

  // An alternate stack for this thread, so a stack overflow can still be reported.
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof(alt_stack);
  ::sigaltstack(&ss, nullptr);

  for (int sig : kSignals) {
    struct sigaction sa {};
    sa.sa_sigaction = on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace

void install_fatal_signal_handlers() {
  std::call_once(g_install_once, install_once);
}

}  // namespace cohort
