// The failure summary's hints for setup mistakes: the interpreter of Python workers (with what to
// do when an import failed), and the local-rank flag a script refuses or wants.
#include "failure/failure_hints.h"

#include <gtest/gtest.h>

namespace cohort::launch {
namespace {

WorkerFailure failed_with(const std::string& traceback, const std::string& message = "") {
  WorkerFailure f;
  f.traceback = traceback;
  f.message = message.empty() ? "exited with code 1" : message;
  return f;
}

const HintContext kPython{"python3 (/usr/bin/python3, the first on PATH): Python 3.11.2"};

TEST(FailureHints, PythonWorkersAreToldWhichInterpreterRanThem) {
  EXPECT_EQ(failure_hints({failed_with("ZeroDivisionError")}, kPython),
            std::vector<std::string>{"cohortrun: the workers ran under python3 (/usr/bin/python3, "
                                     "the first on PATH): Python 3.11.2\n"});
  EXPECT_TRUE(failure_hints({failed_with("ZeroDivisionError")}, HintContext{}).empty());
}

TEST(FailureHints, AnImportThatFailedNamesWhatToDo) {
  for (const char* words : {"ModuleNotFoundError: No module named 'torch'",
                            "ImportError: cannot import name 'x'", "No module named torchvision"}) {
    const auto lines = failure_hints({failed_with("", words)}, kPython);
    ASSERT_EQ(lines.size(), 1u) << words;
    EXPECT_NE(lines[0].find("; set PYTHON_EXEC to the Python that has the module"),
              std::string::npos)
        << lines[0];
    EXPECT_EQ(lines[0].back(), '\n');
  }
  // Only Python workers are told (a direct program has no interpreter to blame).
  EXPECT_TRUE(failure_hints({failed_with("ImportError")}, HintContext{}).empty());
}

TEST(FailureHints, TheLocalRankFlagAScriptRefusesOrWants) {
  auto hint = [](const std::string& argparse) {
    const auto lines = failure_hints({failed_with("usage: train.py\n" + argparse)}, HintContext{});
    return lines.empty() ? std::string() : lines[0];
  };
  EXPECT_NE(hint("error: unrecognized arguments: --local-rank=0").find("--legacy-local-rank"),
            std::string::npos);
  EXPECT_NE(hint("error: the following arguments are required: --local_rank")
                .find("which torchrun and cohortrun do not give by default"),
            std::string::npos);
  EXPECT_NE(hint("error: unrecognized arguments: --local_rank=0").find("--append-local-rank"),
            std::string::npos);
  EXPECT_NE(hint("error: the following arguments are required: --local-rank")
                .find("which cohortrun gives only when asked"),
            std::string::npos);
  EXPECT_EQ(hint("error: unrecognized arguments: --lr"), "");
}

TEST(FailureHints, AnyFailureOfTheJobCanCarryTheWords) {
  const auto lines = failure_hints(
      {failed_with("RuntimeError: timeout"), failed_with("unrecognized arguments: --local-rank=1")},
      kPython);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("cohortrun: the workers ran under ", 0), 0u);
  EXPECT_EQ(lines[1].rfind("cohortrun: the script wants torch.distributed.launch's", 0), 0u);
}

}  // namespace
}  // namespace cohort::launch
