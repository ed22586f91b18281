// portmat::matmul through the public C++ API on every device, against the float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "core/backend.hpp"
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

// Device-resident stacks (gemm_batch_repeated: one launch per stack on CUDA and OpenCL, one gemm
// per product elsewhere): on CUDA the small kernel (up to 64x64 results) and the batched 64x64 and
// 128x256 tiles past it, on OpenCL the small-matrix block and the usual ones; both layouts, a
// broadcast b.
template <class T>
static void check_stack(const std::string& dev, long count, long m, long n, long k, int layout, bool b_bcast,
                        std::mt19937& rng) {
  auto d = portmat::core::open_device(dev);
  const DType dt = dtype_of<T>();
  const bool a_col = layout & 1, b_col = layout & 2;
  const long a_mat = m * k, b_mat = k * n, c_mat = m * n, b_count = b_bcast ? 1 : count;
  auto ah = random_vector<T>(count * a_mat, rng), bh = random_vector<T>(b_count * b_mat, rng);
  std::vector<T> ch(count * c_mat, std::numeric_limits<T>::quiet_NaN());
  auto ab = d->alloc(ah.size() * sizeof(T)), bb = d->alloc(bh.size() * sizeof(T)), cb = d->alloc(ch.size() * sizeof(T));
  d->upload(*ab, ah.data(), ah.size() * sizeof(T));
  d->upload(*bb, bh.data(), bh.size() * sizeof(T));
  d->upload(*cb, ch.data(), ch.size() * sizeof(T));
  portmat::core::DeviceMatrix da{ab.get(), 0, m, k, a_col ? m : k, a_col, dt};
  portmat::core::DeviceMatrix db{bb.get(), 0, k, n, b_col ? k : n, b_col, dt};
  portmat::core::DeviceMatrix dc{cb.get(), 0, m, n, n, false, dt};
  EXPECT_GT(d->gemm_batch_repeated(da, a_mat, db, b_bcast ? 0 : b_mat, dc, c_mat, count, 1), 0.0);
  d->download(ch.data(), *cb, ch.size() * sizeof(T));
  double worst = 0;
  for (long i = 0; i < count; ++i) {
    MatrixView a{ah.data() + i * a_mat, m, k, a_col ? 1 : k, a_col ? m : 1, dt};
    MatrixView b{bh.data() + (b_bcast ? 0 : i) * b_mat, k, n, b_col ? 1 : n, b_col ? k : 1, dt};
    MatrixView c{ch.data() + i * c_mat, m, n, n, 1, dt};
    worst = std::max(worst, portmat::reference::worst_error_ratio(a, b, c));
  }
  EXPECT_LE(worst, 1.0) << count << " x " << m << "x" << k << " @ " << k << "x" << n << " layout "
                        << layout << (b_bcast ? " broadcast b" : "");
}

TEST_P(EveryDevice, DeviceResidentStacks) {
  const std::string dev = GetParam();
  const bool f64 = portmat::core::open_device(dev)->info().supports_f64;
  std::mt19937 rng(23);
  const long shapes[][4] = {{3, 1, 1, 1},    {5, 31, 33, 17}, {70, 32, 32, 32}, {4, 64, 64, 64},
                            {3, 65, 70, 40}, {2, 300, 200, 100}, {70, 256, 512, 40}};  // last: 128x256 tiles
  for (const auto& s : shapes) {
    if (s[1] * s[2] * s[3] > 2000000 && dev.rfind("cuda", 0) != 0) continue;  // the CUDA tile's size
    for (int layout = 0; layout < 4; ++layout)
      for (bool bcast : {false, true}) {
        check_stack<float>(dev, s[0], s[1], s[2], s[3], layout, bcast, rng);
        if (f64 && (layout == 0 || layout == 3)) check_stack<double>(dev, s[0], s[1], s[2], s[3], layout, bcast, rng);
      }
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

// ---- every dtype, stacks and vectors (the np.matmul contract in C++) ------------------------------

namespace {

// c = a @ b for row-major contiguous operands of `T`, the way NumPy defines it: integers wrap
// modulo 2^bits (computed in uint64, which wraps the same), booleans are OR of ANDs, floats and
// complex numbers are summed in double / complex<double>.
template <class T>
std::vector<T> naive(const std::vector<T>& a, const std::vector<T>& b, std::int64_t m, std::int64_t k,
                     std::int64_t n) {
  std::vector<T> c(m * n);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      if constexpr (std::is_same_v<T, bool>) {
        bool s = false;
        for (std::int64_t p = 0; p < k; ++p) s = s || (a[i * k + p] && b[p * n + j]);
        c[i * n + j] = s;
      } else if constexpr (std::is_integral_v<T>) {
        std::uint64_t s = 0;
        for (std::int64_t p = 0; p < k; ++p)
          s += static_cast<std::uint64_t>(a[i * k + p]) * static_cast<std::uint64_t>(b[p * n + j]);
        c[i * n + j] = static_cast<T>(s);
      } else {
        std::complex<double> s = 0;
        for (std::int64_t p = 0; p < k; ++p) s += std::complex<double>(a[i * k + p]) * std::complex<double>(b[p * n + j]);
        if constexpr (std::is_floating_point_v<T>) c[i * n + j] = static_cast<T>(s.real());
        else c[i * n + j] = T(s);
      }
    }
  return c;
}

template <class T>
std::vector<T> random_of(std::size_t n, std::mt19937& rng) {
  std::vector<T> v(n);
  for (auto&& x : v) {
    if constexpr (std::is_same_v<T, bool>) x = rng() & 1;
    else if constexpr (std::is_integral_v<T>) x = static_cast<T>(rng() * 2654435761ull + rng());  // full range
    else if constexpr (std::is_floating_point_v<T>) x = static_cast<T>(std::uniform_real_distribution<double>(-1, 1)(rng));
    else x = T(std::uniform_real_distribution<double>(-1, 1)(rng), std::uniform_real_distribution<double>(-1, 1)(rng));
  }
  return v;
}

template <class T>
void expect_dtype(const std::string& device, DType dt, std::mt19937& rng) {
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {7, 13, 5}, {33, 70, 17}, {130, 40, 65}}) {
    auto a = random_of<T>(m * k, rng), b = random_of<T>(k * n, rng);
    std::vector<T> c(m * n);
    // bool vectors are bit-packed: the products run on plain byte copies.
    std::vector<unsigned char> ab, bb, cb;
    void *pa = nullptr, *pb = nullptr, *pc = nullptr;
    if constexpr (std::is_same_v<T, bool>) {
      ab.assign(a.begin(), a.end()), bb.assign(b.begin(), b.end()), cb.assign(m * n, 7);
      pa = ab.data(), pb = bb.data(), pc = cb.data();
    } else {
      pa = a.data(), pb = b.data(), pc = c.data();
    }
    portmat::matmul({pa, m, k, k, 1, dt}, {pb, k, n, n, 1, dt}, {pc, m, n, n, 1, dt}, device);
    const auto want = naive(a, b, m, k, n);
    for (std::int64_t i = 0; i < m * n; ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        ASSERT_EQ(cb[i], static_cast<unsigned char>(want[i])) << dtype_name(dt) << " entry " << i;
      } else if constexpr (std::is_integral_v<T>) {
        ASSERT_EQ(c[i], want[i]) << dtype_name(dt) << " entry " << i;
      } else {
        // |c - ref| <= K * eps * sum_p |a_ip| |b_pj| (twice that for complex: four real products)
        const bool single = sizeof(T) == 4 || (sizeof(T) == 8 && !std::is_floating_point_v<T>);
        const double eps = single ? 1.1920929e-7 : 2.220446e-16;
        double mag = 0;
        for (std::int64_t p = 0; p < k; ++p) mag += std::abs(a[(i / n) * k + p]) * std::abs(b[p * n + i % n]);
        const double bound = (std::is_floating_point_v<T> ? 1 : 2) * k * eps * mag;
        EXPECT_LE(std::abs(std::complex<double>(c[i]) - std::complex<double>(want[i])), bound)
            << dtype_name(dt) << " entry " << i;
      }
    }
  }
}

}  // namespace

TEST_P(EveryDevice, EveryDtypeAsNumPyComputesIt) {
  std::mt19937 rng(std::random_device{}());
  const std::string d = GetParam();
  expect_dtype<bool>(d, DType::boolean, rng);
  expect_dtype<std::int8_t>(d, DType::i8, rng);
  expect_dtype<std::int16_t>(d, DType::i16, rng);
  expect_dtype<std::int32_t>(d, DType::i32, rng);
  expect_dtype<std::int64_t>(d, DType::i64, rng);
  expect_dtype<std::uint8_t>(d, DType::u8, rng);
  expect_dtype<std::uint16_t>(d, DType::u16, rng);
  expect_dtype<std::uint32_t>(d, DType::u32, rng);
  expect_dtype<std::uint64_t>(d, DType::u64, rng);
  expect_dtype<float>(d, DType::f32, rng);
  expect_dtype<std::complex<float>>(d, DType::c64, rng);
  if (portmat::find_device(d).supports_f64) {
    expect_dtype<double>(d, DType::f64, rng);
    expect_dtype<std::complex<double>>(d, DType::c128, rng);
  }
}

TEST_P(EveryDevice, StacksBroadcastAndVectorsAsNumPy) {
  // a: (3, 1, M, K), b: (1, 4, K, N) -> (3, 4, M, N): every matrix against a 2-D product.
  std::mt19937 rng(std::random_device{}());
  const std::int64_t M = 9, K = 17, N = 6;
  auto a = random_vector<float>(3 * M * K, rng), b = random_vector<float>(4 * K * N, rng);
  std::vector<float> c(3 * 4 * M * N, -1.0f);
  portmat::ArrayView va{a.data(), DType::f32, {3, 1, M, K}, {M * K, M * K, K, 1}};
  portmat::ArrayView vb{b.data(), DType::f32, {1, 4, K, N}, {4 * K * N, K * N, N, 1}};
  portmat::ArrayView vc{c.data(), DType::f32, {3, 4, M, N}, {4 * M * N, M * N, N, 1}};
  ASSERT_EQ(portmat::matmul_shape(va.shape, vb.shape), vc.shape);
  portmat::matmul(va, vb, vc, GetParam());
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      MatrixView ma{a.data() + i * M * K, M, K, K, 1, DType::f32}, mb{b.data() + j * K * N, K, N, N, 1, DType::f32};
      MatrixView mc{c.data() + (i * 4 + j) * M * N, M, N, N, 1, DType::f32};
      EXPECT_LE(portmat::reference::worst_error_ratio(ma, mb, mc), 1.0) << i << ", " << j;
    }
  // A vector on either side, and both: the added axis is not in the result.
  std::vector<float> y(K), out(M), dot(1);
  for (auto& v : y) v = 0.5f;
  portmat::ArrayView vy{y.data(), DType::f32, {K}, {1}};
  portmat::matmul({a.data(), DType::f32, {M, K}, {K, 1}}, vy, {out.data(), DType::f32, {M}, {1}}, GetParam());
  MatrixView col{y.data(), K, 1, 1, 1, DType::f32}, res{out.data(), M, 1, 1, 1, DType::f32};
  EXPECT_LE(portmat::reference::worst_error_ratio({a.data(), M, K, K, 1, DType::f32}, col, res), 1.0);
  portmat::matmul(vy, vy, {dot.data(), DType::f32, {}, {}}, GetParam());
  EXPECT_NEAR(dot[0], 0.25 * K, 1e-5);
}

TEST(Matmul, ShapesNumPyRefusesNameBothOperands) {
  auto message = [](std::vector<std::int64_t> a, std::vector<std::int64_t> b) {
    try {
      portmat::matmul_shape(a, b);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_NE(message({}, {2, 2}).find("at least 1 dimension"), std::string::npos);
  EXPECT_NE(message({2, 3}, {2, 2}).find("(2, 3)"), std::string::npos);
  EXPECT_NE(message({2, 2, 3}, {3, 3, 2}).find("do not broadcast"), std::string::npos);
  EXPECT_EQ(portmat::matmul_shape({5, 1, 2, 3}, {4, 3, 7}), (std::vector<std::int64_t>{5, 4, 2, 7}));
  EXPECT_EQ(portmat::matmul_shape({3}, {3}), std::vector<std::int64_t>{});
  EXPECT_EQ(portmat::matmul_shape({2, 3}, {3}), std::vector<std::int64_t>{2});
}

TEST_P(EveryDevice, ComplexProductsWhoseBIsRewrittenOnThreads) {
  // K x 4N reals of B'' >= 2^20: dtypes.cpp fills it on several threads (and reuses the buffer on
  // the second call, which must not see the first call's values).
  std::mt19937 rng(std::random_device{}());
  const std::int64_t M = 24, K = 512, N = 600;
  for (int call = 0; call < 2; ++call) {
    auto a = random_of<std::complex<float>>(M * K, rng), b = random_of<std::complex<float>>(K * N, rng);
    std::vector<std::complex<float>> c(M * N);
    portmat::matmul({a.data(), M, K, K, 1, DType::c64}, {b.data(), K, N, N, 1, DType::c64},
                    {c.data(), M, N, N, 1, DType::c64}, GetParam());
    const auto want = naive(a, b, M, K, N);
    for (std::int64_t i = 0; i < M * N; ++i)
      ASSERT_LE(std::abs(std::complex<double>(c[i]) - std::complex<double>(want[i])), 2.0 * K * 1.2e-7 * 2 * K)
          << "call " << call << " entry " << i;
  }
}

// The automatic device choice's model (registry.cpp, product_seconds), on the H200 machine's
// figures: a 67 TFLOP/s GPU behind a 50 GB/s link, a 16-core host of 1.6 TFLOP/s copying 40 GB/s.
TEST(DeviceChoice, TheModelSendsEachProductWhereItFinishesFirst) {
  portmat::DeviceInfo gpu, cpu;
  gpu.kind = portmat::DeviceKind::gpu, gpu.peak_gflops = 67000;
  cpu.kind = portmat::DeviceKind::cpu, cpu.host_unified = true, cpu.peak_gflops = 1600;
  auto gpu_wins = [&](double m, double n, double k, double link = 50e9, double copy = 40e9) {
    const double flops = 2 * m * n * k, bytes = 4 * (m * k + k * n + m * n);
    return portmat::core::product_seconds(flops, bytes, gpu, link) <
           portmat::core::product_seconds(flops, bytes, cpu, copy);
  };
  EXPECT_FALSE(gpu_wins(64, 64, 64));  // the GPU's fixed cost per call dominates
  EXPECT_FALSE(gpu_wins(256, 256, 256));
  EXPECT_TRUE(gpu_wins(1024, 1024, 1024));
  EXPECT_TRUE(gpu_wins(8192, 8192, 8192));
  // Bandwidth-bound shapes: decided by the link against the host's memory, not by flops.
  EXPECT_TRUE(gpu_wins(1, 16384, 16384, 50e9, 20e9));
  EXPECT_FALSE(gpu_wins(1, 16384, 16384, 50e9, 100e9));
  EXPECT_FALSE(gpu_wins(16384, 8, 16384, 10e9, 40e9));  // a slow link loses a skinny product
  // More arithmetic per byte never moves a product from the GPU to the CPU.
  bool was_gpu = false;
  for (double n = 16; n <= 16384; n *= 2) {
    const bool now = gpu_wins(n, n, n);
    EXPECT_TRUE(now || !was_gpu) << n;
    was_gpu = now;
  }
}
