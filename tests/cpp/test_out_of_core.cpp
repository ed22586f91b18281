// Issue 20: the device memory cap, out-of-core products (core/out_of_core.cpp) and one product
// split across several devices (core/multi_device.cpp), through the public C++ API.
//
// Out-of-core runs on the OpenCL devices CI has (PoCL, Intel's CPU runtime) made to take a
// discrete GPU's path (PORTMAT_OPENCL_DISCRETE=1, read at every call) under a cap of a few
// hundred KiB, with products several times that: every answer against the float64 reference
// (integers exactly), and device_usage() showing that the product was run in blocks and that the
// device never held more than the cap. The CUDA tests skip, saying so, without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <random>
#include <string>
#include <vector>

#include "core/out_of_core.hpp"
#include "core/process.hpp"
#include "core/reference.hpp"
#include "portmat/portmat.hpp"
#include "test_util.hpp"

using portmat::DType;
using portmat::MatrixView;
using portmat::testing::device_ids;

namespace {

// ---- the planner -----------------------------------------------------------------------------
// needs() of a backend with `scratch` bytes of kernel scratch: a, b, c whole plus the scratch.
auto needs_with(std::uint64_t es, std::uint64_t scratch) {
  return [=](std::int64_t bm, std::int64_t bn, std::int64_t bk) {
    return es * static_cast<std::uint64_t>(bm * bk + bk * bn + bm * bn) + scratch;
  };
}

TEST(BlockPlan, TheH200FigureRunsInThreeBlocksOfWholeRows) {
  // n = 32768 float32 (4 GiB a matrix) under an 8 GiB cap, with the CUDA backend's scratch.
  const std::uint64_t scratch = (std::uint64_t(64) << 20) + 32768;
  const auto needs = needs_with(4, scratch);
  const auto plan = portmat::core::plan_blocks(32768, 32768, 32768, 4, std::uint64_t(8) << 30, ~0ull, needs);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->gk, 1);
  EXPECT_EQ(plan->calls(), 3);
  EXPECT_LE(needs(plan->bm, plan->bn, plan->bk), std::uint64_t(8) << 30);
  EXPECT_GE(plan->bm * plan->gm, 32768);
  EXPECT_GE(plan->bn * plan->gn, 32768);
}

TEST(BlockPlan, EveryPlanFitsCoversTheProductAndSplitsKOnlyWhereAThinBlockCannotHoldIt) {
  std::mt19937 rng(20);
  for (int trial = 0; trial < 300; ++trial) {
    auto dim = [&] { return std::int64_t(1) + static_cast<std::int64_t>(rng() % 5000); };
    const std::int64_t M = dim(), N = dim(), K = trial % 7 == 0 ? dim() * 50 : dim();
    const std::uint64_t es = trial % 2 ? 4 : 8;
    const std::uint64_t scratch = trial % 3 ? 0 : 4096;
    const std::uint64_t whole = es * static_cast<std::uint64_t>(M * K + K * N + M * N);
    const std::uint64_t budget = std::max<std::uint64_t>(1, whole / (2 + rng() % 40));
    const std::uint64_t max_buffer = trial % 5 == 0 ? budget / 3 : ~0ull;
    const auto needs = needs_with(es, scratch);
    const auto plan = portmat::core::plan_blocks(M, N, K, es, budget, max_buffer, needs);
    const std::int64_t t_m = std::min<std::int64_t>(M, 32), t_n = std::min<std::int64_t>(N, 32),
                       t_k = std::min<std::int64_t>(K, 32);
    const bool smallest_fits = needs(t_m, t_n, t_k) <= budget && es * t_m * t_k <= max_buffer &&
                               es * t_k * t_n <= max_buffer && es * t_m * t_n <= max_buffer;
    if (!smallest_fits) {
      EXPECT_FALSE(plan) << M << " " << N << " " << K;
      continue;
    }
    ASSERT_TRUE(plan) << M << " " << N << " " << K << " budget " << budget;
    SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N) + " budget " +
                 std::to_string(budget) + " plan " + std::to_string(plan->bm) + "/" + std::to_string(plan->bn) +
                 "/" + std::to_string(plan->bk));
    EXPECT_LE(needs(plan->bm, plan->bn, plan->bk), budget);
    EXPECT_LE(es * plan->bm * plan->bk, max_buffer);
    EXPECT_LE(es * plan->bk * plan->bn, max_buffer);
    EXPECT_LE(es * plan->bm * plan->bn, max_buffer);
    EXPECT_GE(plan->bm * plan->gm, M);
    EXPECT_LT((plan->gm - 1) * plan->bm, M);
    EXPECT_GE(plan->bn * plan->gn, N);
    EXPECT_LT((plan->gn - 1) * plan->bn, N);
    EXPECT_GE(plan->bk * plan->gk, K);
    EXPECT_LT((plan->gk - 1) * plan->bk, K);
    const std::int64_t thin_m = std::min<std::int64_t>(M, 128), thin_n = std::min<std::int64_t>(N, 128);
    const bool thin_fits = needs(thin_m, thin_n, K) <= budget && es * thin_m * K <= max_buffer &&
                           es * K * thin_n <= max_buffer && es * thin_m * thin_n <= max_buffer;
    if (thin_fits) EXPECT_EQ(plan->gk, 1);  // k is split only where a thin block cannot hold it
  }
}

TEST(BlockPlan, NothingWhenNotEvenTheSmallestBlockFits) {
  EXPECT_FALSE(portmat::core::plan_blocks(1000, 1000, 1000, 4, 1000, ~0ull, needs_with(4, 0)));
  EXPECT_FALSE(portmat::core::plan_blocks(1000, 1000, 1000, 4, std::uint64_t(1) << 30, ~0ull, needs_with(4, 2ull << 30)));
}

// ---- the cap -----------------------------------------------------------------------------------
TEST(DeviceMemoryLimit, SizesParse) {
  EXPECT_EQ(portmat::parse_memory_size("8G"), std::uint64_t(8) << 30);
  EXPECT_EQ(portmat::parse_memory_size("8g"), std::uint64_t(8) << 30);
  EXPECT_EQ(portmat::parse_memory_size("512M"), std::uint64_t(512) << 20);
  EXPECT_EQ(portmat::parse_memory_size(" 4GiB "), std::uint64_t(4) << 30);
  EXPECT_EQ(portmat::parse_memory_size("3KB"), 3072u);
  EXPECT_EQ(portmat::parse_memory_size("1T"), std::uint64_t(1) << 40);
  EXPECT_EQ(portmat::parse_memory_size("1048576"), 1048576u);
  EXPECT_EQ(portmat::parse_memory_size("100B"), 100u);
  for (const char* bad : {"", " ", "0", "0G", "-1", "8X", "1.5G", "G", "8 GB x", "99999999999999999999",
                          "20000000000T", "8GG"})
    EXPECT_THROW(portmat::parse_memory_size(bad), std::invalid_argument) << "'" << bad << "'";
}

TEST(DeviceMemoryLimit, SetAndRestored) {
  EXPECT_THROW(portmat::set_device_memory_limit(0), std::invalid_argument);
  portmat::set_device_memory_limit(std::uint64_t(123) << 20);
  EXPECT_EQ(portmat::device_memory_limit(), std::uint64_t(123) << 20);
  portmat::set_device_memory_limit(std::nullopt);  // back to $PORTMAT_DEVICE_MEMORY, unset here
  if (!std::getenv("PORTMAT_DEVICE_MEMORY")) {
    EXPECT_FALSE(portmat::device_memory_limit());
  }
}

// ---- out-of-core on OpenCL run as a discrete device ---------------------------------------------
class OutOfCore : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "none") GTEST_SKIP() << "no OpenCL device on this machine";
    setenv("PORTMAT_OPENCL_DISCRETE", "1", 1);
    portmat::set_device_memory_limit(kCap);
    portmat::reset_device_usage(GetParam());
  }
  void TearDown() override {
    portmat::set_device_memory_limit(std::nullopt);
    unsetenv("PORTMAT_OPENCL_DISCRETE");
  }
  // The product ran in blocks, and the device never held more than the cap.
  void expect_tiled() {
    const portmat::DeviceUsage u = portmat::device_usage(GetParam());
    EXPECT_GE(u.tiled_products, 1u);
    EXPECT_GT(u.host_calls, 1u);
    EXPECT_LE(u.peak_bytes, kCap);
    EXPECT_GT(u.peak_bytes, 0u);
  }
  static constexpr std::uint64_t kCap = 384 << 10;  // 384 KiB
};

std::vector<std::string> opencl_or_none() {
  auto ids = device_ids("opencl");
  return ids.empty() ? std::vector<std::string>{"none"} : ids;
}

#define NEED_DEVICE()                                                            \
  if (GetParam() == "none") GTEST_SKIP() << "no OpenCL device on this machine"

template <class T>
void fill(std::vector<T>& v, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (auto& x : v) x = static_cast<T>(u(rng));
}

TEST_P(OutOfCore, FloatProductsSeveralTimesTheCapWithViews) {
  NEED_DEVICE();
  std::mt19937 rng(7);
  // Primes, each operand near or past the cap, together ~4x it; a column-major (transposed) a,
  // a b with padded rows, a result with padded rows whose padding must stay.
  for (DType t : {DType::f32, DType::f64}) {
    const std::int64_t M = 331, K = 211, N = 307, pad = 5;
    const std::size_t es = portmat::dtype_size(t);
    std::vector<double> a64(M * K), b64(K * (N + pad));
    fill(a64, rng), fill(b64, rng);
    std::vector<unsigned char> abuf(M * K * es), bbuf(K * (N + pad) * es), cbuf(M * (N + pad) * es, 0x7f);
    for (std::size_t i = 0; i < a64.size(); ++i) {
      if (t == DType::f32) reinterpret_cast<float*>(abuf.data())[i] = static_cast<float>(a64[i]);
      else reinterpret_cast<double*>(abuf.data())[i] = a64[i];
    }
    for (std::size_t i = 0; i < b64.size(); ++i) {
      if (t == DType::f32) reinterpret_cast<float*>(bbuf.data())[i] = static_cast<float>(b64[i]);
      else reinterpret_cast<double*>(bbuf.data())[i] = b64[i];
    }
    const MatrixView a{abuf.data(), M, K, 1, M, t};  // column-major: a's columns contiguous
    const MatrixView b{bbuf.data(), K, N, N + pad, 1, t};
    const MatrixView c{cbuf.data(), M, N, N + pad, 1, t};
    portmat::matmul(a, b, c, GetParam());
    EXPECT_LE(portmat::reference::worst_error_ratio(a, b, c), 1.0) << portmat::dtype_name(t);
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = N * static_cast<std::int64_t>(es); j < (N + pad) * static_cast<std::int64_t>(es); ++j)
        ASSERT_EQ(cbuf[i * (N + pad) * es + j], 0x7f) << "wrote into the padding";
    expect_tiled();
  }
}

TEST_P(OutOfCore, KSplitWhereNotEvenAThinBlockHoldsAllOfK) {
  NEED_DEVICE();
  std::mt19937 rng(8);
  // A thin block with all of k: (128 * 6007 * 2 + 128 * 128) * 4 bytes = 6.2 MB, 16x the cap.
  const std::int64_t M = 149, K = 6007, N = 131;
  std::vector<float> a(M * K), b(K * N), c(M * N);
  fill(a, rng), fill(b, rng);
  const MatrixView va{a.data(), M, K, K, 1, DType::f32}, vb{b.data(), K, N, N, 1, DType::f32};
  const MatrixView vc{c.data(), M, N, N, 1, DType::f32};
  portmat::matmul(va, vb, vc, GetParam());
  EXPECT_LE(portmat::reference::worst_error_ratio(va, vb, vc), 1.0);
  expect_tiled();
}

TEST_P(OutOfCore, IntegerProductsExactly) {
  NEED_DEVICE();
  std::mt19937 rng(9);
  portmat::testing::check_integer<std::int32_t>(GetParam(), DType::i32, 263, 251, 241, true, false, 3, rng);
  expect_tiled();
  portmat::reset_device_usage(GetParam());
  // k past what a thin block holds: the pieces added on the host, wrapping as NumPy's.
  portmat::testing::check_integer<std::uint64_t>(GetParam(), DType::u64, 67, 59, 4099, false, true, 1, rng);
  expect_tiled();
}

TEST_P(OutOfCore, AnAllocationPastTheCapIsOutOfDeviceMemory) {
  NEED_DEVICE();
  EXPECT_THROW(portmat::DeviceArray::empty(GetParam(), DType::f32, {1000, 1000}), portmat::OutOfDeviceMemory);
  // Under it, fine; and the buffer counts until it goes.
  {
    auto x = portmat::DeviceArray::empty(GetParam(), DType::f32, {100, 100});
    EXPECT_GE(portmat::device_usage(GetParam()).bytes_in_use, 40000u);
    // The cap counts what is held: a second array that would pass it fails too.
    EXPECT_THROW(portmat::DeviceArray::empty(GetParam(), DType::f32, {300, 300}), portmat::OutOfDeviceMemory);
  }
}

TEST_P(OutOfCore, ACapTooSmallForOneBlockIsAClearError) {
  NEED_DEVICE();
  portmat::set_device_memory_limit(4096);
  std::vector<float> a(200 * 200, 1.f), c(200 * 200);
  const MatrixView va{a.data(), 200, 200, 200, 1, DType::f32}, vc{c.data(), 200, 200, 200, 1, DType::f32};
  try {
    portmat::matmul(va, va, vc, GetParam());
    FAIL() << "no error";
  } catch (const portmat::OutOfDeviceMemory& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("block"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(OpenCl, OutOfCore, ::testing::ValuesIn(opencl_or_none()), portmat::testing::DeviceName());

// ---- several devices ---------------------------------------------------------------------------
// The threads of a split: every task runs to its end, then the first error (in task order) is
// the call's, whatever thread raised it and whenever.
TEST(RunConcurrently, EveryTaskFinishesThenTheFirstErrorIsThrown) {
  std::atomic<int> done{0};
  std::atomic<bool> slow_finished{false};
  std::vector<std::function<void()>> tasks;
  tasks.push_back([&] { ++done; });
  tasks.push_back([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    slow_finished = true;
    throw std::runtime_error("one");
  });
  tasks.push_back([&] { throw std::invalid_argument("two"); });
  tasks.push_back([&] { ++done; });
  try {
    portmat::core::run_concurrently(tasks);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "one");
  }
  EXPECT_TRUE(slow_finished.load());
  EXPECT_EQ(done.load(), 2);
  portmat::core::run_concurrently({});  // nothing to do
  int n = 0;
  portmat::core::run_concurrently({[&] { ++n; }});
  EXPECT_EQ(n, 1);
}

// A float32 product worth splitting (2 * 640 * 512 * 448 = 2.9e8 flops > 1e8), against the
// reference, and every device of the list took a block.
void check_split(const std::vector<std::string>& devices) {
  for (const auto& d : devices) portmat::reset_device_usage(d);
  std::mt19937 rng(11);
  const std::int64_t M = 640, K = 448, N = 512;
  std::vector<float> a(M * K), b(K * N), c(M * N, 7.f);
  fill(a, rng), fill(b, rng);
  const MatrixView va{a.data(), M, K, K, 1, DType::f32}, vb{b.data(), K, N, N, 1, DType::f32};
  const MatrixView vc{c.data(), M, N, N, 1, DType::f32};
  portmat::matmul(va, vb, vc, devices);
  EXPECT_LE(portmat::reference::worst_error_ratio(va, vb, vc), 1.0);
  double flops = 0;
  for (const auto& d : devices) {
    const auto u = portmat::device_usage(d);
    EXPECT_GE(u.host_calls, 1u) << d << " took no block";
    flops += u.flops;
  }
  EXPECT_EQ(flops, 2.0 * M * N * K);  // the blocks add up to the product, once
}

TEST(SeveralDevices, CpuAndOpenCl) {
  if (device_ids("cpu").empty() || device_ids("opencl").empty()) GTEST_SKIP() << "needs the CPU backend and an OpenCL device";
  check_split({"cpu", device_ids("opencl")[0]});
  check_split({device_ids("opencl")[0], "cpu:0"});
}

TEST(SeveralDevices, EveryOpenClDeviceTogether) {
  const auto ids = device_ids("opencl");
  if (ids.size() < 2) GTEST_SKIP() << "fewer than two OpenCL devices here";
  check_split(ids);
}

TEST(SeveralDevices, ListsAreChecked) {
  std::vector<float> a(4, 1.f), c(4);
  const MatrixView v{a.data(), 2, 2, 2, 1, DType::f32}, vc{c.data(), 2, 2, 2, 1, DType::f32};
  EXPECT_THROW(portmat::matmul(v, v, vc, std::vector<std::string>{}), std::invalid_argument);
  EXPECT_THROW(portmat::matmul(v, v, vc, std::vector<std::string>{"cpu", "cpu:0"}), std::invalid_argument);
  EXPECT_THROW(portmat::matmul(v, v, vc, std::vector<std::string>{"cpu", "nosuch:3"}), std::invalid_argument);
  EXPECT_THROW(portmat::matmul(v, v, vc, std::vector<std::string>{"cpu", ""}), std::invalid_argument);
  EXPECT_THROW(portmat::matmul(v, v, vc, std::vector<std::string>{"cpu,cpu"}), std::invalid_argument);
  // A list of one is that device.
  portmat::matmul(v, v, vc, std::vector<std::string>{"cpu"});
  EXPECT_EQ(c[0], 2.f);
}

TEST(SeveralDevices, ADeviceFailingMidwayIsTheCallsErrorAfterTheOthersFinish) {
  const auto ids = device_ids("opencl");
  if (device_ids("cpu").empty() || ids.empty()) GTEST_SKIP() << "needs the CPU backend and an OpenCL device";
  setenv("PORTMAT_OPENCL_DISCRETE", "1", 1);
  portmat::set_device_memory_limit(4096);  // the CPU has no device memory; OpenCL cannot hold a block
  std::vector<float> a(700 * 700, 1.f), c(700 * 700, 0.f);
  const MatrixView va{a.data(), 700, 700, 700, 1, DType::f32}, vc{c.data(), 700, 700, 700, 1, DType::f32};
  portmat::reset_device_usage("cpu");
  EXPECT_THROW(portmat::matmul(va, va, vc, std::vector<std::string>{"cpu", ids[0]}), portmat::OutOfDeviceMemory);
  EXPECT_GE(portmat::device_usage("cpu").host_calls, 1u);  // the CPU's block ran to its end
  EXPECT_EQ(c[0], 700.f);
  portmat::set_device_memory_limit(std::nullopt);
  unsetenv("PORTMAT_OPENCL_DISCRETE");
}

// ---- CUDA (the H200): skipped without a CUDA device ----------------------------------------------
// The figure scaled down by 16 in memory: n = 8192 float32 (256 MiB a matrix) under a
// 512 MiB cap, as n = 32768 under 8 GiB; sampled entries against float64.
TEST(CudaOutOfCore, ScaledDownFigureUnderTheCap) {
  if (device_ids("cuda").empty()) GTEST_SKIP() << "no CUDA device on this machine";
  const std::string dev = device_ids("cuda")[0];
  const std::int64_t n = 8192;
  std::mt19937 rng(12);
  std::vector<float> a(n * n), b(n * n), c(n * n);
  fill(a, rng), fill(b, rng);
  portmat::set_device_memory_limit(std::uint64_t(512) << 20);
  portmat::reset_device_usage(dev);
  portmat::matmul(MatrixView{a.data(), n, n, n, 1, DType::f32}, MatrixView{b.data(), n, n, n, 1, DType::f32},
                  MatrixView{c.data(), n, n, n, 1, DType::f32}, dev);
  const auto u = portmat::device_usage(dev);
  portmat::set_device_memory_limit(std::nullopt);
  EXPECT_GE(u.tiled_products, 1u);
  EXPECT_GT(u.host_calls, 1u);
  EXPECT_LE(u.peak_bytes, std::uint64_t(512) << 20);
  for (int s = 0; s < 200; ++s) {
    const std::int64_t i = rng() % n, j = rng() % n;
    double want = 0, mag = 0;
    for (std::int64_t k = 0; k < n; ++k) {
      want += static_cast<double>(a[i * n + k]) * b[k * n + j];
      mag += std::abs(static_cast<double>(a[i * n + k]) * b[k * n + j]);
    }
    ASSERT_LE(std::abs(c[i * n + j] - want), n * 1.2e-7 * mag) << i << "," << j;
  }
}

TEST(CudaSeveralDevices, TheGpuAndTheCpu) {
  if (device_ids("cuda").empty() || device_ids("cpu").empty()) GTEST_SKIP() << "no CUDA device on this machine";
  check_split({device_ids("cuda")[0], "cpu"});
}

}  // namespace
