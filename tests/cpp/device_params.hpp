// Helpers for tests parameterised over devices: the ids to run on and a gtest-safe name for each.
#pragma once

#include <string>
#include <vector>

#include "portmat/portmat.hpp"

namespace portmat::testing {

// Ids of every device, or of one backend's devices.
inline std::vector<std::string> device_ids(const std::string& backend = "") {
  std::vector<std::string> ids;
  for (const auto& d : portmat::devices())
    if (backend.empty() || d.backend == backend) ids.push_back(d.id());
  return ids;
}

// "opencl:0" -> "opencl_0" (gtest names allow only letters, digits and '_').
struct DeviceName {
  template <class Info>
  std::string operator()(const Info& info) const {
    std::string s = info.param;
    for (char& ch : s)
      if (ch == ':') ch = '_';
    return s;
  }
};

}  // namespace portmat::testing
