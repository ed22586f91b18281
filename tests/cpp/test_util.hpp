// Shared helpers of the C++ tests: random inputs, and for suites parameterised over devices the
// ids to run on and a gtest-safe name for each.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
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

// The product of integer matrices as NumPy computes it: wrapping (modulo 2^bits), signed dtypes
// too (computed in the unsigned type of the same width).
template <class T>
std::vector<T> wrapping_product(const MatrixView& a, const MatrixView& b) {
  using U = std::make_unsigned_t<T>;
  std::vector<T> c(a.rows * b.cols);
  for (std::int64_t i = 0; i < a.rows; ++i)
    for (std::int64_t j = 0; j < b.cols; ++j) {
      U s = 0;
      for (std::int64_t p = 0; p < a.cols; ++p)
        s += static_cast<U>(static_cast<const T*>(a.data)[i * a.row_stride + p * a.col_stride]) *
             static_cast<U>(static_cast<const T*>(b.data)[p * b.row_stride + j * b.col_stride]);
      c[i * b.cols + j] = static_cast<T>(s);
    }
  return c;
}

// c = a @ b through portmat::matmul on `dev` for full-range integers (products wrap), a and b in
// the given layouts inside padded, offset buffers, c with padded rows: every entry equal to
// wrapping_product, the padding untouched.
template <class T>
void check_integer(const std::string& dev, DType dt, std::int64_t m, std::int64_t n, std::int64_t k, bool a_col,
                   bool b_col, int pad, std::mt19937& rng) {
  const std::int64_t lda = (a_col ? m : k) + pad, ldb = (b_col ? k : n) + pad, ldc = n + pad;
  std::vector<T> abuf((a_col ? k : m) * lda + pad), bbuf((b_col ? n : k) * ldb + pad), cbuf(m * ldc + pad, T(7));
  for (auto& x : abuf) x = static_cast<T>((std::uint64_t(rng()) << 32) | rng());
  for (auto& x : bbuf) x = static_cast<T>((std::uint64_t(rng()) << 32) | rng());
  MatrixView a{abuf.data() + pad, m, k, a_col ? 1 : lda, a_col ? lda : 1, dt};
  MatrixView b{bbuf.data() + pad, k, n, b_col ? 1 : ldb, b_col ? ldb : 1, dt};
  MatrixView c{cbuf.data(), m, n, ldc, 1, dt};
  portmat::matmul(a, b, c, dev);
  const auto want = wrapping_product<T>(a, b);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j)
      ASSERT_EQ(cbuf[i * ldc + j], want[i * n + j])
          << dev << " " << dtype_name(dt) << " " << m << "x" << k << " @ " << k << "x" << n << " a_col=" << a_col
          << " b_col=" << b_col << " entry " << i << "," << j;
    for (std::int64_t j = n; j < ldc; ++j) ASSERT_EQ(cbuf[i * ldc + j], T(7)) << "wrote past a row";
  }
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
