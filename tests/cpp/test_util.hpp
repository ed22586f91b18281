// Shared helpers of the C++ tests: random inputs, and for suites parameterised over devices the
// ids to run on and a gtest-safe name for each.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "portmat/portmat.hpp"

namespace portmat::testing {

// n values uniform in [-1, 1): never zeros only, which would hide unwritten outputs.
template <class T>
std::vector<T> random_vector(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(rng));
  return v;
}

template <class T>
constexpr DType dtype_of() {
  return sizeof(T) == 4 ? DType::f32 : DType::f64;
}

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
