// portmat::matmul through the public C++ API on every device, against the float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/reference.hpp"
#include "test_util.hpp"
#include "portmat/portmat.hpp"

using portmat::DType;
using portmat::testing::dtype_of;
using portmat::testing::random_vector;
using portmat::MatrixView;

namespace {



// c = a @ b for an (m x k) row-major a (or column-major if a_col) and a row-major b.
template <class T>
double run(const std::string& device, std::int64_t m, std::int64_t k, std::int64_t n, bool a_col,
           std::mt19937& rng) {
  auto a = random_vector<T>(m * k, rng), b = random_vector<T>(k * n, rng);
  std::vector<T> c(m * n, T(-12345));  // poison: every entry must be written
  MatrixView va{a.data(), m, k, a_col ? 1 : k, a_col ? m : 1, dtype_of<T>()};
  MatrixView vb{b.data(), k, n, n, 1, dtype_of<T>()};
  MatrixView vc{c.data(), m, n, n, 1, dtype_of<T>()};
  portmat::matmul(va, vb, vc, device);
  return portmat::reference::worst_error_ratio(va, vb, vc);
}

}  // namespace

class EveryDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryDevice, AwkwardShapesFloat32) {
  std::mt19937 rng(std::random_device{}());
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {7, 13, 5}, {65, 129, 63}, {128, 16, 128}, {130, 257, 3}})
    for (bool a_col : {false, true})
      EXPECT_LE(run<float>(GetParam(), m, k, n, a_col, rng), 1.0) << m << "x" << k << "x" << n;
}

TEST_P(EveryDevice, Float64) {
  if (!portmat::find_device(GetParam()).supports_f64) GTEST_SKIP() << "no float64";
  std::mt19937 rng(std::random_device{}());
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {33, 65, 17}, {64, 64, 64}})
    EXPECT_LE(run<double>(GetParam(), m, k, n, false, rng), 1.0) << m << "x" << k << "x" << n;
}

TEST_P(EveryDevice, KZeroGivesZerosAndEmptyResultsAreFine) {
  std::vector<float> a(1), b(1), c(12, 7.0f);
  MatrixView va{a.data(), 4, 0, 0, 1, DType::f32}, vb{b.data(), 0, 3, 3, 1, DType::f32};
  MatrixView vc{c.data(), 4, 3, 3, 1, DType::f32};
  portmat::matmul(va, vb, vc, GetParam());
  for (float x : c) EXPECT_EQ(x, 0.0f);
  MatrixView ve{c.data(), 0, 3, 3, 1, DType::f32}, va0{a.data(), 0, 5, 5, 1, DType::f32};
  MatrixView vb5{c.data(), 5, 3, 3, 1, DType::f32};
  portmat::matmul(va0, vb5, ve, GetParam());
}

TEST_P(EveryDevice, BroadcastOperandsAreReducedNotPacked) {
  // Zero strides (np.broadcast_to) in every position, against the reference.
  std::mt19937 rng(std::random_device{}());
  const std::int64_t m = 37, k = 53, n = 29;
  auto x = random_vector<float>(m * k, rng), y = random_vector<float>(k * n, rng);
  std::vector<float> c(m * n);
  const MatrixView a_dense{x.data(), m, k, k, 1, DType::f32}, b_dense{y.data(), k, n, n, 1, DType::f32};
  const MatrixView a_cases[] = {a_dense, {x.data(), m, k, 0, 1, DType::f32}, {x.data(), m, k, 1, 0, DType::f32},
                                {x.data(), m, k, 0, 0, DType::f32}};
  const MatrixView b_cases[] = {b_dense, {y.data(), k, n, 0, 1, DType::f32}, {y.data(), k, n, 1, 0, DType::f32},
                                {y.data(), k, n, 0, 0, DType::f32}};
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      std::fill(c.begin(), c.end(), -12345.0f);
      MatrixView vc{c.data(), m, n, n, 1, DType::f32};
      portmat::matmul(a_cases[i], b_cases[j], vc, GetParam());
      EXPECT_LE(portmat::reference::worst_error_ratio(a_cases[i], b_cases[j], vc), 1.0) << i << " " << j;
    }
  // A (2^20, 2^20) view of one value (4 TiB if packed) times a (2^20, 2) matrix.
  const std::int64_t big = std::int64_t(1) << 20;
  float half = 0.5f;
  auto b = random_vector<float>(big * 2, rng);
  std::vector<float> out(big * 2);
  portmat::matmul({&half, big, big, 0, 0, DType::f32}, {b.data(), big, 2, 2, 1, DType::f32},
                  {out.data(), big, 2, 2, 1, DType::f32}, GetParam());
  for (int j = 0; j < 2; ++j) {
    double sum = 0, mag = 0;
    for (std::int64_t r = 0; r < big; ++r) sum += b[r * 2 + j], mag += std::abs(b[r * 2 + j]);
    const double bound = big * 1.2e-7 * 0.5 * mag;
    EXPECT_NEAR(out[j], 0.5 * sum, bound);
    EXPECT_NEAR(out[(big - 1) * 2 + j], 0.5 * sum, bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, EveryDevice, ::testing::ValuesIn(portmat::testing::device_ids()),
                         portmat::testing::DeviceName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(EveryDevice);

TEST(Matmul, MismatchedShapesAndDtypesAreInvalidArguments) {
  std::vector<float> x(64);
  MatrixView a{x.data(), 3, 4, 4, 1, DType::f32}, b{x.data(), 5, 2, 2, 1, DType::f32};
  MatrixView c{x.data(), 3, 2, 2, 1, DType::f32};
  try {
    portmat::matmul(a, b, c);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(3, 4)"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("(5, 2)"), std::string::npos);
  }
  MatrixView b64{x.data(), 4, 2, 2, 1, DType::f64};
  EXPECT_THROW(portmat::matmul(a, b64, c), std::invalid_argument);
}

TEST(Matmul, UnknownDeviceNamesTheChoices) {
  std::vector<float> x(4);
  MatrixView a{x.data(), 1, 1, 1, 1, DType::f32};
  try {
    portmat::matmul(a, a, a, "nosuch:3");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("nosuch:3"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("available"), std::string::npos);
  }
}

TEST(Reference, ErrorRatioCatchesAWrongEntry) {
  std::vector<float> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c{19, 22, 43, 50};
  MatrixView va{a.data(), 2, 2, 2, 1, DType::f32}, vb{b.data(), 2, 2, 2, 1, DType::f32};
  MatrixView vc{c.data(), 2, 2, 2, 1, DType::f32};
  EXPECT_EQ(portmat::reference::worst_error_ratio(va, vb, vc), 0.0);
  c[3] = 50.001f;
  EXPECT_GT(portmat::reference::worst_error_ratio(va, vb, vc), 1.0);
}

TEST(Matmul, DimensionsBeyond32BitsAreRefusedNotWrapped) {
  std::vector<float> x(4);
  const std::int64_t huge = std::int64_t(1) << 31;
  MatrixView a{x.data(), 1, huge, huge, 1, DType::f32}, b{x.data(), huge, 1, 1, 0, DType::f32};
  MatrixView c{x.data(), 1, 1, 1, 1, DType::f32};
  try {
    portmat::matmul(a, b, c);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("2**31 - 1"), std::string::npos) << e.what();
  }
}
