// cohort_test_worker: a worker with scripted behaviour for the launcher tests.
//
//   --out DIR            write DIR/<rank>.attempt<a>.{env,pid} (environment; own pid and children)
//   --exit-code N        exit with N ...
//   --signal NAME        ... or die of this signal (SEGV, ABRT, KILL, ...) ...
//   --on-rank R          ... only on global rank R (default: every rank)
//   --until-attempt A    ... only while TORCHELASTIC_RESTART_COUNT < A (default: always)
//   --stderr TEXT        print TEXT on stderr before failing
//   --error-file MSG     write $TORCHELASTIC_ERROR_FILE (torchrun format) with MSG before failing
//   --grandchild         start a child process that sleeps (tests whole-tree cleanup)
//   --lines N            print N numbered lines to stdout and to stderr
//   --alloc-mb N         allocate and touch N MiB (an allocation failure under ulimit -v)
//   --sleep S            sleep S seconds before finishing (0 = exit at once)
//   --beat N             send N heartbeats (120 ms apart)
//   --hang               then stop beating and sleep forever (subject to --on-rank/--until-attempt)
//   --trap-term          on SIGTERM write DIR/<rank>.term and exit 0
//   --trap-usr1          on SIGUSR1 write DIR/<rank>.usr1 and carry on
//   --escape-chatter S   in the first attempt only, start a descendant that leaves the process
//                        group (setsid) and writes a line to the inherited stderr every 10 ms for
//                        S seconds; its pid goes to DIR/<rank>.attempt0.escaped
//   --escape-daemon      start a daemon the classic way (setsid and a second fork, stdio on
//                        /dev/null) that sleeps 300 s; its pid goes to DIR/<rank>.attempt<a>.daemon
//   --lines-done         after --lines, write DIR/<rank>.attempt<a>.lines_done
//   --ignore-term        ignore SIGTERM (a worker that only SIGKILL stops)
//   --report-tty         write DIR/<rank>.attempt<a>.tty: "out=<isatty(1)> err=<isatty(2)>"
//   --partial TEXT       write TEXT to stderr without a newline (then --sleep)
//   --uninterruptible S  spend S seconds in uninterruptible sleep (state D: the parent of a
//                        vfork() waits so until its child exits), subject to --on-rank
// In --stderr TEXT, "{attempt}" becomes TORCHELASTIC_RESTART_COUNT.
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

std::string g_out;
int g_rank = 0;
int g_attempt = 0;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

std::string path(const std::string& what, int rank = g_rank) {
  return g_out + "/" + std::to_string(rank) + ".attempt" + std::to_string(g_attempt) + "." + what;
}

// Readers poll for these files, so they appear whole or not at all.
void write_atomically(const std::string& file, const std::string& content) {
  std::string tmp = file + ".tmp";
  std::ofstream(tmp) << content;
  std::rename(tmp.c_str(), file.c_str());
}

// A failing rank first waits (up to 10 s) until every rank of its attempt has recorded itself,
// so that the tests can count on one record per rank and attempt: without this the launcher may
// stop a slow peer before it wrote anything.
void wait_for_peers_records() {
  if (g_out.empty()) return;
  int world = env_int("WORLD_SIZE", 1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int r = 0; r < world; ++r) {
    while (::access(path("pid", r).c_str(), F_OK) != 0 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Paths the signal handlers create, made before the handlers are installed: a handler may only
// make async-signal-safe calls (no allocation; ThreadSanitizer checks).
char g_term_path[4096];
char g_usr1_path[4096];

void touch(const char* p) {
  if (p[0] == '\0') return;
  int saved = errno;
  int fd = ::open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) ::close(fd);
  errno = saved;
}

void on_term(int) {
  touch(g_term_path);
  ::_exit(0);
}

void on_usr1(int) {
  touch(g_usr1_path);
}

int signal_from_name(const std::string& n) {
  if (n == "SEGV") return SIGSEGV;
  if (n == "ABRT") return SIGABRT;
  if (n == "KILL") return SIGKILL;
  if (n == "TERM") return SIGTERM;
  if (n == "BUS") return SIGBUS;
  if (n == "FPE") return SIGFPE;
  return std::atoi(n.c_str());
}

// The parent of a vfork() sleeps uninterruptibly until its child exits. A function of its own:
// vfork would let the child's calls clobber main()'s variables.
[[gnu::noinline]] void sleep_uninterruptibly(double seconds) {
  const struct timespec t = {static_cast<time_t>(seconds),
                             static_cast<long>((seconds - static_cast<time_t>(seconds)) * 1e9)};
  if (::vfork() == 0) {
    ::syscall(SYS_nanosleep, &t, nullptr);  // the child shares this stack: a raw call, then _exit
    ::_exit(0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 0, on_rank = -1, until_attempt = 1 << 30, lines = 0, beats = 0, alloc_mb = 0;
  double sleep_s = 0;
  std::string sig, stderr_text, error_msg;
  bool grandchild = false, hang = false, trap_term = false, trap_usr1 = false;
  bool escape_daemon = false, lines_done = false, ignore_term = false, report_tty = false;
  std::string partial;
  double escape_chatter = 0, uninterruptible_s = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--out")
      g_out = next();
    else if (a == "--exit-code")
      exit_code = std::atoi(next().c_str());
    else if (a == "--signal")
      sig = next();
    else if (a == "--on-rank")
      on_rank = std::atoi(next().c_str());
    else if (a == "--until-attempt")
      until_attempt = std::atoi(next().c_str());
    else if (a == "--stderr")
      stderr_text = next();
    else if (a == "--error-file")
      error_msg = next();
    else if (a == "--grandchild")
      grandchild = true;
    else if (a == "--lines")
      lines = std::atoi(next().c_str());
    else if (a == "--alloc-mb")
      alloc_mb = std::atoi(next().c_str());
    else if (a == "--sleep")
      sleep_s = std::atof(next().c_str());
    else if (a == "--beat")
      beats = std::atoi(next().c_str());
    else if (a == "--hang")
      hang = true;
    else if (a == "--trap-term")
      trap_term = true;
    else if (a == "--trap-usr1")
      trap_usr1 = true;
    else if (a == "--escape-chatter")
      escape_chatter = std::atof(next().c_str());
    else if (a == "--escape-daemon")
      escape_daemon = true;
    else if (a == "--lines-done")
      lines_done = true;
    else if (a == "--ignore-term")
      ignore_term = true;
    else if (a == "--report-tty")
      report_tty = true;
    else if (a == "--partial")
      partial = next();
    else if (a == "--uninterruptible")
      uninterruptible_s = std::atof(next().c_str());
    else {
      std::fprintf(stderr, "cohort_test_worker: unknown argument %s\n", a.c_str());
      return 64;
    }
  }
  g_rank = env_int("RANK", 0);
  g_attempt = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  if (!g_out.empty()) {
    std::snprintf(g_term_path, sizeof g_term_path, "%s/%d.term", g_out.c_str(), g_rank);
    std::snprintf(g_usr1_path, sizeof g_usr1_path, "%s/%d.usr1", g_out.c_str(), g_rank);
  }
  if (trap_term) ::signal(SIGTERM, on_term);
  if (trap_usr1) ::signal(SIGUSR1, on_usr1);
  if (ignore_term) ::signal(SIGTERM, SIG_IGN);

  std::string pids = std::to_string(::getpid()) + "\n";
  if (grandchild) {
    pid_t c = ::fork();
    if (c == 0) {
      ::execlp("sleep", "sleep", "300", nullptr);
      ::_exit(127);
    }
    pids += std::to_string(c) + "\n";
  }
  if (!g_out.empty()) {
    std::string env;
    for (char** e = environ; *e; ++e) env += std::string(*e) + "\n";
    write_atomically(path("env"), env);
    write_atomically(path("pid"), pids);
  }
  if (report_tty && !g_out.empty()) {
    write_atomically(path("tty"), "out=" + std::to_string(::isatty(1)) +
                                      " err=" + std::to_string(::isatty(2)) + "\n");
  }
  if (!partial.empty()) {
    std::fputs(partial.c_str(), stderr);
    std::fflush(stderr);
  }
  if (escape_chatter > 0 && g_attempt == 0) {
    pid_t c = ::fork();
    if (c == 0) {
      ::setsid();
      auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(escape_chatter);
      while (std::chrono::steady_clock::now() < until) {
        std::fprintf(stderr, "chatter from an escaped descendant\n");
        std::fflush(stderr);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ::_exit(0);
    }
    if (!g_out.empty()) write_atomically(path("escaped"), std::to_string(c) + "\n");
  }
  if (escape_daemon) {
    int ready[2];
    if (::pipe(ready) != 0) return 70;
    pid_t c = ::fork();
    if (c == 0) {
      ::setsid();
      if (::fork() == 0) {
        int null = ::open("/dev/null", O_RDWR);
        for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
        if (!g_out.empty()) write_atomically(path("daemon"), std::to_string(::getpid()) + "\n");
        (void)!::write(ready[1], "r", 1);
        for (int i = 0; i < 300; ++i) ::sleep(1);
        ::_exit(0);
      }
      ::_exit(0);
    }
    ::waitpid(c, nullptr, 0);
    char r;
    (void)!::read(ready[0], &r, 1);  // the daemon has recorded itself
  }
  if (uninterruptible_s > 0 && (on_rank < 0 || on_rank == g_rank)) {
    sleep_uninterruptibly(uninterruptible_s);
  }
  if (alloc_mb > 0) {
    // Uncaught std::bad_alloc under ulimit -v: terminate() and SIGABRT, as in a real program.
    std::vector<char> big(static_cast<size_t>(alloc_mb) << 20, 1);
    std::printf("allocated %zu bytes\n", big.size());
  }
  for (int i = 0; i < lines; ++i) {
    std::printf("out line %d\n", i);
    std::fprintf(stderr, "err line %d\n", i);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  if (lines_done && !g_out.empty()) write_atomically(path("lines_done"), "");

  int hb = env_int("COHORT_HEARTBEAT_FD", -1);
  for (int i = 0; i < beats && hb >= 0; ++i) {
    (void)!::write(hb, "b", 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
  }
  bool fail_here = (on_rank < 0 || on_rank == g_rank) && g_attempt < until_attempt;
  if (hang && fail_here) {
    for (;;) ::pause();
  }
  if (fail_here && (exit_code != 0 || !sig.empty())) {
    wait_for_peers_records();
    if (!stderr_text.empty()) {
      for (size_t at; (at = stderr_text.find("{attempt}")) != std::string::npos;)
        stderr_text.replace(at, 9, std::to_string(g_attempt));
      std::fprintf(stderr, "%s\n", stderr_text.c_str());
    }
    if (!error_msg.empty()) {
      const char* ef = std::getenv("TORCHELASTIC_ERROR_FILE");
      if (ef != nullptr) {
        std::ofstream f(ef);
        f << "{\"message\": {\"message\": \"RuntimeError: " << error_msg
          << "\", \"extraInfo\": {\"py_callstack\": \"Traceback (most recent call last):\\n  "
             "File \\\"train.py\\\", line 7\\nRuntimeError: "
          << error_msg << "\", \"timestamp\": \"" << std::time(nullptr) << "\"}}}";
      }
    }
    std::fflush(stderr);
    if (!sig.empty()) {
      int s = signal_from_name(sig);
      ::signal(s, SIG_DFL);
      ::raise(s);
    }
    return exit_code;
  }
  if (sleep_s > 0) {
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(sleep_s);
    while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_until(until);
  }
  return 0;
}
