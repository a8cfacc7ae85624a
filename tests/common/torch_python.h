// Test helper: the PyTorch an interop test runs against.
//
// Every interop test is registered twice with CTest (tests/CMakeLists.txt,
// cohort_interop_tests()): once with COHORT_TEST_TORCH_PYTHON naming Debian's PyTorch 1.13
// (/usr/bin/python3) and once naming the PyTorch 2.x environment that scripts/torch2.sh makes.
// Run by hand (no variable), a test uses the build's COHORT_TORCH_PYTHON.
//
// When the variable is set, the interpreter must import torch: require_torch() fails the test
// instead of skipping it, so that CI cannot pass with a PyTorch missing.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace cohort::testing {

// The interpreter: $COHORT_TEST_TORCH_PYTHON, else the build's default.
inline std::string torch_python() {
  const char* p = std::getenv("COHORT_TEST_TORCH_PYTHON");
#ifdef COHORT_TORCH_PYTHON
  return p != nullptr && *p != '\0' ? p : COHORT_TORCH_PYTHON;
#else
  return p != nullptr && *p != '\0' ? p : "/usr/bin/python3";
#endif
}

// The folder of the interpreter (torchrun lives beside it).
inline std::string torch_bin_dir() {
  const std::string py = torch_python();
  return py.substr(0, py.rfind('/'));
}

// "1.13.0", "2.15.0" (without a local suffix such as "+cu132"); "" when torch cannot be imported.
inline std::string torch_version() {
  static const std::string version = [] {
    const std::string cmd =
        torch_python() + " -c 'import torch; print(torch.__version__.split(\"+\")[0])' 2>/dev/null";
    std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
    char buf[64] = {};
    if (!p || std::fgets(buf, sizeof(buf), p.get()) == nullptr) return std::string();
    std::string v(buf);
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
    return v;
  }();
  return version;
}

// The major version (1 or 2); 0 when torch cannot be imported.
inline int torch_major() {
  const std::string v = torch_version();
  return v.empty() ? 0 : std::atoi(v.c_str());
}

// True for PyTorch 1.x (the 1.13 TCPStore protocol, torchrun's 1.13 behaviour).
inline bool torch_is_1x() {
  return torch_major() == 1;
}

}  // namespace cohort::testing

// Skips the test when torch cannot be imported, or fails it when the interpreter was named by
// CTest (a PyTorch the suite must test is missing: run scripts/setup.sh).
#define COHORT_REQUIRE_TORCH()                                                              \
  do {                                                                                      \
    if (::cohort::testing::torch_version().empty()) {                                       \
      if (std::getenv("COHORT_TEST_TORCH_PYTHON") != nullptr) {                             \
        FAIL() << ::cohort::testing::torch_python()                                         \
               << " cannot import torch (scripts/setup.sh installs both PyTorch versions)"; \
      }                                                                                     \
      GTEST_SKIP() << ::cohort::testing::torch_python() << " cannot import torch";          \
    }                                                                                       \
  } while (0)
