#include "cohort/error_file.h"

#include <cxxabi.h>
#include <execinfo.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <typeinfo>

#if defined(COHORT_HAVE_LIBBACKTRACE)
#include <backtrace.h>
#endif

#include "cohort/base/error_file_format.h"
#include "cohort/base/worker_env_names.h"
#include "cohort/error.h"
#include "crash_cleanup.h"

namespace cohort {
namespace {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(mangled);
}

// "binary(_ZN6cohort3fooEv+0x1c) [0x55d0]" -> "binary(cohort::foo()+0x1c) [0x55d0]".
std::string demangle_frame(const char* frame) {
  std::string s(frame);
  const size_t open = s.find('(');
  const size_t plus = s.find('+', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || plus == std::string::npos || plus <= open + 1) return s;
  return s.substr(0, open + 1) + demangle(s.substr(open + 1, plus - open - 1).c_str()) +
         s.substr(plus);
}

std::string describe_current_exception() {
  std::exception_ptr ep = std::current_exception();
  if (!ep) return "std::terminate: called without an active exception";
  const std::type_info* type = abi::__cxa_current_exception_type();
  const std::string type_name = type != nullptr ? demangle(type->name()) : "unknown exception";
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return type_name + ": " + e.what();
  } catch (...) {
    return type_name;
  }
}

[[noreturn]] void on_terminate() noexcept {
  // Runs on the stack of the throw (the unwinder found no handler and did not unwind), so the
  // trace below shows where the exception came from.
  std::string message;
  std::string stack;
  try {
    message = describe_current_exception();
    stack = current_stack_trace(0);
  } catch (...) {
    message = "uncaught exception (describing it failed)";
  }
  detail::run_crash_cleanup();
  std::string where;
  const char* path = std::getenv(worker_env::kErrorFile);
  if (path != nullptr && *path != '\0') {
    try {
      write_error_file(path, message, stack);
      where = std::string(" (error file: ") + path + ")";
    } catch (const std::exception& e) {
      where = std::string(" (could not write the error file: ") + e.what() + ")";
    }
  }
  // A worker names its rank; a program started by hand (no RANK) just says what went wrong.
  const char* rank = std::getenv(worker_env::kRank);
  const std::string who = rank != nullptr ? std::string("rank ") + rank + ": " : "";
  std::fflush(stdout);
  std::cout.flush();
  std::fprintf(stderr, "[cohort] %suncaught %s%s\n", who.c_str(), message.c_str(), where.c_str());
  std::fflush(stderr);
  // _exit, not exit: other threads may still run, and static destructors would race with them.
  ::_exit(1);
}

}  // namespace

std::string error_file_json(std::string_view message, std::string_view callstack,
                            int64_t timestamp) {
  return error_file::encode(message, callstack, timestamp);
}

void write_error_file(const std::string& path, std::string_view message,
                      std::string_view callstack) {
  const std::string text = error_file_json(message, callstack, std::time(nullptr));
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw Error("cannot write the error file " + path);
}

#if defined(COHORT_HAVE_LIBBACKTRACE)
namespace {

struct Trace {
  backtrace_state* state;
  std::string out;
  int index = 0;
  int skip = 0;
};

void ignore_error(void*, const char*, int) {}

void on_symbol(void* data, uintptr_t, const char* symbol, uintptr_t, uintptr_t) {
  auto* t = static_cast<Trace*>(data);
  t->out += symbol != nullptr ? demangle(symbol) : "??";
}

int on_frame(void* data, uintptr_t pc, const char* file, int line, const char* function) {
  auto* t = static_cast<Trace*>(data);
  if (pc == static_cast<uintptr_t>(-1)) return 0;
  if (t->skip > 0) {
    --t->skip;
    return 0;
  }
  char addr[32];
  std::snprintf(addr, sizeof(addr), "0x%llx", static_cast<unsigned long long>(pc));
  t->out += "  #" + std::to_string(t->index++) + " " + addr + " in ";
  if (function != nullptr) {
    t->out += demangle(function);
  } else {
    backtrace_syminfo(t->state, pc, on_symbol, ignore_error, t);
  }
  if (file != nullptr) t->out += " at " + std::string(file) + ":" + std::to_string(line);
  t->out += '\n';
  return 0;
}

}  // namespace
#endif

std::string current_stack_trace(int skip) {
#if defined(COHORT_HAVE_LIBBACKTRACE)
  // libbacktrace reads the symbol table (static and .cold functions too) and DWARF line info.
  static backtrace_state* state = backtrace_create_state(nullptr, 1, ignore_error, nullptr);
  if (state != nullptr) {
    Trace t{state, {}, 0, skip};
    backtrace_full(state, 1, on_frame, ignore_error, &t);
    if (!t.out.empty()) return t.out;
  }
#endif
  void* frames[128];
  const int n = ::backtrace(frames, 128);
  std::unique_ptr<char*, void (*)(void*)> symbols(::backtrace_symbols(frames, n), std::free);
  std::string out;
  for (int i = 1 + skip; i < n; ++i) {
    out += "  #" + std::to_string(i - 1 - skip) + " ";
    out += symbols ? demangle_frame(symbols.get()[i]) : "?";
    out += '\n';
  }
  return out;
}

int run_main(int argc, char** argv, int (*main_fn)(int, char**)) {
  install_fatal_signal_handlers();
  std::set_terminate(on_terminate);
  return main_fn(argc, argv);
}

}  // namespace cohort
