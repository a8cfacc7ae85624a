// The conventions every cohort binary built on CLI11 (cohortd, the trainers) follows, applied to
// an app after its options are defined, so that no option list has to be rewritten for them:
//   --version          "<program> <version> (git <revision>)", exit 0;
//   usage errors       one line on stderr, "<program>: <what CLI11 says, naming the flag>; see
//                      --help", exit 2 (CLI11's own codes, 104 to 114, never escape);
//   placeholders       --help shows N, SECONDS, PATH, HOST, ... instead of INT, FLOAT, TEXT;
//   environment        with an env prefix, every long option --some-flag also reads
//                      <PREFIX>SOME_FLAG when not given on the command line;
//   --config PATH      with a config file, CLI11's TOML/INI reader: `some-flag = value` lines;
//                      <PREFIX>CONFIG names one when --config is not given;
//   --print-completion bash   a bash completion script made from the same option list (the build
//                      installs it; cohortrun has its own, launcher/plan/cli.cc).
// Precedence (CLI11's): the command line, then the config file, then the environment, then the
// defaults.
//
// Not part of the installed headers (it needs CLI11): only for cohort's own binaries.
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <string_view>

#include "cohort/base/version.h"

namespace cohort::cli {

struct Conventions {
  std::string program;     // "cohortd": the prefix of error lines and --version's first word
  std::string env_prefix;  // "COHORTD_", or empty for no environment variables
  bool config_file = false;
  // Placeholders by long flag ("--fsync" -> "always|interval|never") where the rules below do not
  // guess right.
  std::map<std::string, std::string> placeholders;
};

// "--max-key-bytes" -> "MAX_KEY_BYTES".
inline std::string env_suffix(std::string_view long_name) {
  std::string out;
  for (char ch : long_name) {
    out.push_back(ch == '-' ? '_'
                            : static_cast<char>(std::toupper(static_cast<unsigned char>(ch))));
  }
  return out;
}

// The placeholder for an option CLI11 would show as INT, UINT, FLOAT or TEXT.
inline std::string placeholder(const std::string& long_name, const std::string& cli11_type) {
  auto ends_with = [&](std::string_view s) {
    return long_name.size() >= s.size() &&
           long_name.compare(long_name.size() - s.size(), s.size(), s) == 0;
  };
  if (cli11_type == "INT" || cli11_type == "UINT") return "N";
  if (cli11_type == "FLOAT") {
    return long_name.find("timeout") != std::string::npos || ends_with("seconds") ? "SECONDS" : "X";
  }
  if (cli11_type == "TEXT") {
    if (ends_with("file") || ends_with("dir") || ends_with("path") || ends_with("json") ||
        long_name == "data") {
      return "PATH";
    }
    if (long_name == "host") return "HOST";
    if (ends_with("endpoint") || ends_with("addr")) return "HOST:PORT";
    return "STRING";
  }
  return cli11_type;
}

// A bash completion script for `program` from `app`'s options: flag names after a dash, file
// names after a PATH option, the choices of an `a|b|c` placeholder.
inline std::string bash_completion(const CLI::App& app, const std::string& program) {
  std::ostringstream words, values;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& l : opt->get_lnames()) words << "--" << l << ' ';
    for (const auto& sn : opt->get_snames()) words << '-' << sn << ' ';
    if (opt->get_lnames().empty() || opt->get_type_size() == 0) continue;
    const std::string flag = "--" + opt->get_lnames().front();
    const std::string type = opt->get_type_name();
    if (type == "PATH") {
      values << "    " << flag << ") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n";
    } else if (type.find('|') != std::string::npos &&
               type.find_first_of("[:") == std::string::npos) {
      std::string choices = type;
      for (char& ch : choices) {
        if (ch == '|') ch = ' ';
      }
      values << "    " << flag << ") COMPREPLY=($(compgen -W \"" << choices
             << "\" -- \"$cur\")); return ;;\n";
    }
  }
  std::string fn = "_" + program;
  for (char& ch : fn) {
    if (ch == '-') ch = '_';
  }
  std::ostringstream os;
  os << "# bash completion for " << program << " (" << program << " --print-completion bash)\n"
     << fn << "() {\n"
     << "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
     << "  case \"$prev\" in\n"
     << values.str() << "  esac\n"
     << "  COMPREPLY=($(compgen -W \"" << words.str() << "\" -- \"$cur\"))\n"
     << "}\n"
     << "complete -F " << fn << ' ' << program << '\n';
  return os.str();
}

// Applies `conventions` to `app`, whose options are all defined. Call once, before parse().
inline void apply(CLI::App& app, const Conventions& conventions) {
  app.name(conventions.program);  // "Usage: cohortd", not the path it was started by
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_lnames().empty()) continue;
    const std::string& name = opt->get_lnames().front();
    if (name == "help") continue;
    if (auto it = conventions.placeholders.find("--" + name);
        it != conventions.placeholders.end()) {
      opt->type_name(it->second);
    } else if (opt->get_type_size() != 0) {  // flags take no value and show no placeholder
      opt->type_name(placeholder(name, opt->get_type_name()));
    }
    if (!conventions.env_prefix.empty() && opt->get_envname().empty()) {
      opt->envname(conventions.env_prefix + env_suffix(name));
    }
  }
  app.set_version_flag("--version", version_line(conventions.program),
                       "Print the version and the git revision, then exit");
  if (conventions.config_file) {
    std::string from_env;
    if (!conventions.env_prefix.empty()) {
      const char* v = std::getenv((conventions.env_prefix + "CONFIG").c_str());
      if (v != nullptr) from_env = v;
    }
    // A file named by the environment must exist, as one named by --config must.
    app.set_config("--config", from_env,
                   "Read options from this file (lines `flag-name = value`; the command line wins)",
                   !from_env.empty())
        ->type_name("PATH");
  }
  const std::string program = conventions.program;
  app.add_option_function<std::string>(
         "--print-completion",
         [&app, program](const std::string& shell) {
           if (shell != "bash") throw CLI::ValidationError("--print-completion", "supports bash");
           std::fputs(bash_completion(app, program).c_str(), stdout);
           throw CLI::Success();
         },
         "Print a completion script (bash) and exit")
      ->type_name("bash");
  app.failure_message([program](const CLI::App*, const CLI::Error& e) {
    std::string what = e.what();
    while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
    for (char& ch : what) {
      if (ch == '\n') ch = ' ';
    }
    return program + ": " + what + "; see " + program + " --help\n";
  });
}

// After a CLI::ParseError: prints what app.exit() prints (help, version, or the one-line error)
// and returns the exit status: 0 for --help and --version, 2 for every usage error.
inline int exit_status(const CLI::App& app, const CLI::ParseError& e) {
  return app.exit(e) == 0 ? 0 : 2;
}

}  // namespace cohort::cli
