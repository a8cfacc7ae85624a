// What each worker runs: the argv built from the entry point, torchrun's way.
#include "plan/entrypoint.h"

#include <gtest/gtest.h>

namespace cohort::launch {
namespace {

TEST(EntryPoint, PythonModuleAndDirect) {
  std::map<std::string, std::string> env{{"PATH", "/usr/bin:/bin"}};
  LaunchConfig c;
  c.training_script = "train.py";
  c.training_script_args = {"--lr", "1"};
  auto cmd = build_worker_command(c, env);
  EXPECT_EQ(cmd.argv, (std::vector<std::string>{"python3", "-u", "train.py", "--lr", "1"}));
  EXPECT_EQ(cmd.title, "train.py");
  env["PYTHON_EXEC"] = "/usr/bin/python3";
  c.module = true;
  c.training_script = "pkg.train";
  EXPECT_EQ(build_worker_command(c, env).argv,
            (std::vector<std::string>{"/usr/bin/python3", "-u", "-m", "pkg.train", "--lr", "1"}));
  c.module = false;
  c.training_script = "true";  // an executable on PATH runs directly
  EXPECT_EQ(build_worker_command(c, env).argv[0], "true");
  c.training_script = "/bin/true";
  EXPECT_EQ(build_worker_command(c, env).argv[0], "/bin/true");
  c.training_script = "not_a_program_anywhere";
  EXPECT_EQ(build_worker_command(c, env).argv[0], "/usr/bin/python3");
}

TEST(EntryPoint, NoPythonTitleAndWhereTheScriptsArgumentsBegin) {
  std::map<std::string, std::string> env{{"PATH", "/usr/bin:/bin"}, {"PYTHON_EXEC", "py"}};
  LaunchConfig c;
  c.training_script = "/opt/jobs/train.py";
  c.training_script_args = {"a", "b"};
  auto cmd = build_worker_command(c, env);
  EXPECT_EQ(cmd.title, "train.py");
  EXPECT_EQ(cmd.interpreter, "py");
  ASSERT_EQ(cmd.args_at, 3u);
  EXPECT_EQ(cmd.argv[cmd.args_at], "a");
  // --no-python runs the entry point directly.
  c.training_script = "/bin/sh";
  c.no_python = true;
  cmd = build_worker_command(c, env);
  EXPECT_EQ(cmd.argv, (std::vector<std::string>{"/bin/sh", "a", "b"}));
  EXPECT_EQ(cmd.interpreter, "");
  EXPECT_EQ(cmd.args_at, 1u);
  // Without PATH a bare name cannot be found: Python runs it.
  c.no_python = false;
  c.training_script = "true";
  EXPECT_EQ(build_worker_command(c, {{"PYTHON_EXEC", "py"}}).argv[0], "py");
}

}  // namespace
}  // namespace cohort::launch
