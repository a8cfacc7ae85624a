#include "cohort/base/version.h"

#include "cohort_version_generated.h"  // written at build time by cmake/write_version.cmake

namespace cohort {

const char* version() {
  return COHORT_VERSION_STRING;
}

const char* git_revision() {
  return COHORT_GIT_REVISION;
}

std::string version_line(std::string_view program) {
  return std::string(program) + " " + version() + " (git " + git_revision() + ")";
}

}  // namespace cohort
