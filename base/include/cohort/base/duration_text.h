// A duration as the launcher's messages write it: "900 s", "0.1 s", "2.5 s". A timeout under a
// second is not "0 s", and a whole number of seconds has no trailing ".0".
#pragma once

#include <chrono>
#include <sstream>
#include <string>

namespace cohort {

inline std::string in_seconds(std::chrono::milliseconds d) {
  std::ostringstream os;
  os << std::chrono::duration<double>(d).count() << " s";
  return os.str();
}

}  // namespace cohort
