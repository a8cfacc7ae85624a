// The project's version and the git revision a build came from, for every binary's --version.
#pragma once

#include <string>
#include <string_view>

namespace cohort {

// "0.1.0" (CMakeLists.txt's project version).
const char* version();

// The abbreviated commit, with "-dirty" when the tree had changes; "unknown" when the sources
// were not a git checkout.
const char* git_revision();

// "<program> 0.1.0 (git 1a2b3c4)", the first line of --version.
std::string version_line(std::string_view program);

}  // namespace cohort
