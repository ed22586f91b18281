// The OpenCL backend's own machinery: parameter checks, driver errors as exceptions (build
// failure with its log, out of memory) after which the device keeps working, device-resident gemm
// with offsets and both layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/reference.hpp"
#include "test_util.hpp"
#include "opencl/cl_api.hpp"
#include "opencl/gemm_params.hpp"
#include "opencl/program_cache.hpp"

using portmat::DType;
using portmat::MatrixView;

TEST(OpenClParams, DefaultsAreValidAndBadOnesAreNamed) {
  portmat::opencl::DeviceTraits gpu{portmat::DeviceKind::gpu, "NVIDIA", 132};
  portmat::opencl::DeviceTraits cpu{portmat::DeviceKind::cpu, "PoCL", 2};
  for (auto t : {gpu, cpu})
    for (auto d : {DType::f32, DType::f64})
      for (long n : {1L, 512L, 8192L})
        EXPECT_EQ(portmat::opencl::choose_params(t, d, n, n).invalid_reason(), "");
  auto p = portmat::opencl::parse_params("MWG=48", {});
  EXPECT_NE(p.invalid_reason().find("MWG"), std::string::npos);
  EXPECT_THROW(portmat::opencl::parse_params("FOO=1", {}), std::invalid_argument);
  EXPECT_THROW(portmat::opencl::parse_params("MWG=x", {}), std::invalid_argument);
  EXPECT_THROW(portmat::opencl::parse_params("MWG", {}), std::invalid_argument);
  // Double-buffered fragments: 0 or 1, and an even slice depth.
  const std::string small = "MWG=64,NWG=64,MDIMC=8,NDIMC=8,GVW=1,";
  EXPECT_EQ(portmat::opencl::parse_params(small + "KWG=2,DBF=1", {}).invalid_reason(), "");
  EXPECT_NE(portmat::opencl::parse_params(small + "KWG=1,DBF=1", {}).invalid_reason().find("DBF"), std::string::npos);
  EXPECT_NE(portmat::opencl::parse_params("DBF=2", {}).invalid_reason().find("DBF"), std::string::npos);
  // The cp.async ring: 0 or 2-8 slices, each a slice of A and of B in local memory.
  const auto ring = portmat::opencl::parse_params(small + "KWG=8,ASYNC=4", {});
  EXPECT_EQ(ring.invalid_reason(), "");
  EXPECT_EQ(ring.local_bytes(4), 4u * 8 * ((64 + ring.pada) + (64 + ring.padb)) * 4);
  EXPECT_EQ(ring.local_bytes(4), 2 * portmat::opencl::parse_params(small + "KWG=8", {}).local_bytes(4));
  EXPECT_NE(portmat::opencl::parse_params("ASYNC=1", {}).invalid_reason().find("ASYNC"), std::string::npos);
  EXPECT_NE(portmat::opencl::parse_params("ASYNC=9", {}).invalid_reason().find("ASYNC"), std::string::npos);
  // Groups of block rows: 1 (the launch order) to 64.
  EXPECT_EQ(portmat::opencl::parse_params(small + "GROUPM=8", {}).invalid_reason(), "");
  EXPECT_NE(portmat::opencl::parse_params("GROUPM=0", {}).invalid_reason().find("GROUPM"), std::string::npos);
  EXPECT_NE(portmat::opencl::parse_params("GROUPM=65", {}).invalid_reason().find("GROUPM"), std::string::npos);
  // A row-major a transposed first: 0, 1 (the size rule) or 2; the host's choice, not the kernel's,
  // so not among the build options (one program for either value).
  const auto transposing = portmat::opencl::parse_params(small + "TRANSA=2", {});
  EXPECT_EQ(transposing.invalid_reason(), "");
  EXPECT_EQ(transposing.defines(), portmat::opencl::parse_params(small + "TRANSA=0", {}).defines());
  EXPECT_NE(transposing.str().find("TRANSA=2"), std::string::npos);
  EXPECT_NE(portmat::opencl::parse_params("TRANSA=3", {}).invalid_reason().find("TRANSA"), std::string::npos);
}

// NVIDIA's float32 on compute capability 8.0+: the cp.async ring only where no operand is
// transposed into local memory (a column-major a, a row-major b) and 128 x 128 blocks fill the
// device; within 48 KiB of local memory, as every default must be.
TEST(OpenClParams, CpAsyncRingOnlyForUntransposedOperandsOnNvidia) {
  using portmat::opencl::choose_params;
  portmat::opencl::DeviceTraits h200{portmat::DeviceKind::gpu, "NVIDIA Corporation", 132, 32, true, true};
  auto older = h200;
  older.cp_async = false;
  const auto ring = choose_params(h200, DType::f32, 4096, 4096, 1, nullptr, true);
  EXPECT_EQ(ring.async, 3);
  EXPECT_EQ(ring.kwg, 16);
  EXPECT_EQ(ring.groupm, 8);  // blocks launched in groups of 8 block rows
  EXPECT_EQ(ring.invalid_reason(), "");
  EXPECT_LE(ring.local_bytes(4), 49152u);
  EXPECT_EQ(choose_params(h200, DType::f32, 4096, 4096, 1, nullptr, false).async, 0);  // row-major a
  EXPECT_EQ(choose_params(h200, DType::f32, 4096, 4096, 1, nullptr, false).groupm, 1);
  EXPECT_EQ(choose_params(older, DType::f32, 4096, 4096, 1, nullptr, true).async, 0);
  EXPECT_EQ(choose_params(h200, DType::f32, 1024, 1024, 1, nullptr, true).async, 0);  // 64 x 128 blocks
  EXPECT_EQ(choose_params(h200, DType::f64, 4096, 4096, 1, nullptr, true).async, 0);
  // A row-major a may be transposed into that layout first (by the size rule) on NVIDIA's float32
  // only, where it was measured; float64 and other vendors' GPUs leave it to `portmat tune`.
  EXPECT_EQ(choose_params(h200, DType::f32, 4096, 4096, 1, nullptr, false).transa, 1);
  EXPECT_EQ(choose_params(h200, DType::f64, 4096, 4096, 1, nullptr, false).transa, 0);
  portmat::opencl::DeviceTraits other{portmat::DeviceKind::gpu, "Advanced Micro Devices, Inc.", 120, 32, true, false};
  EXPECT_EQ(choose_params(other, DType::f32, 4096, 4096, 1, nullptr, false).transa, 0);
}

// CPU runtimes (Intel's, and PoCL, which names an Intel CPU's vendor "GenuineIntel") run the direct
// kernel (gemm_direct.cl) in its vector form, vectors of the device's SIMD width; GPUs keep
// gemm.cl, and so does a product too large for the direct kernel's int indices. Its parameters are
// valid for every dtype, and the combinations of the two forms that do not exist are refused.
TEST(OpenClParams, DirectKernelForCpuRuntimes) {
  using portmat::opencl::DeviceTraits;
  using portmat::opencl::parse_params;
  const DeviceTraits intel{portmat::DeviceKind::cpu, "Intel(R) Corporation", 2};
  const DeviceTraits pocl_avx512{portmat::DeviceKind::cpu, "GenuineIntel", 16, 64};
  const DeviceTraits pocl_neon{portmat::DeviceKind::cpu, "ARM", 4, 16};
  const DeviceTraits too_large{portmat::DeviceKind::cpu, "GenuineIntel", 16, 64, /*direct_ok=*/false};
  const DeviceTraits intel_gpu{portmat::DeviceKind::gpu, "Intel(R) Corporation", 96};
  for (auto d : {DType::f32, DType::f64, DType::u32, DType::u64})
    for (long n : {1L, 31L, 1024L}) {
      const int elem = static_cast<int>(portmat::dtype_size(d));
      for (const DeviceTraits& t : {intel, pocl_avx512, pocl_neon}) {
        const auto p = portmat::opencl::choose_params(t, d, n, n, n == 31 ? 100 : 1);
        EXPECT_EQ(p.direct, 1);
        EXPECT_EQ(p.vecw, std::max(2, t.vector_bytes / elem)) << t.vendor;
        EXPECT_EQ(p.invalid_reason(), "");
        EXPECT_EQ(p.local_bytes(8), 0u);
      }
      EXPECT_EQ(portmat::opencl::choose_params(too_large, d, n, n).direct, 0);
      EXPECT_EQ(portmat::opencl::choose_params(too_large, d, n, n).invalid_reason(), "");
      EXPECT_EQ(portmat::opencl::choose_params(intel_gpu, d, n, n).direct, 0);
    }
  EXPECT_NE(parse_params("DIRECT=1", {}).invalid_reason(), "");  // MDIMC=16 with VECW=1: not a direct shape
  EXPECT_NE(parse_params("DIRECT=2", {}).invalid_reason(), "");
  EXPECT_EQ(parse_params("DIRECT=1,MWG=8,MDIMC=1,NDIMC=32", {}).invalid_reason(), "");  // the scalar form
  EXPECT_EQ(parse_params("DIRECT=1,VECW=8,NVEC=2,MWG=6,MDIMC=8,NDIMC=8", {}).invalid_reason(), "");
  EXPECT_NE(parse_params("DIRECT=1,VECW=3,MDIMC=1", {}).invalid_reason().find("VECW"), std::string::npos);
  EXPECT_NE(parse_params("DIRECT=1,NVEC=2,MWG=8,MDIMC=1", {}).invalid_reason().find("NVEC"), std::string::npos);
  EXPECT_NE(parse_params("DIRECT=1,VECW=16,NVEC=8,MWG=8", {}).invalid_reason(), "");  // a tile of 1024
  // gemm.cl ignores the direct kernel's fields (so an override of DIRECT=0 over them works), as the
  // direct kernel ignores gemm.cl's; values no kernel takes are refused for both.
  EXPECT_EQ(parse_params("VECW=8,NVEC=2", {}).invalid_reason(), "");
  EXPECT_NE(parse_params("VECW=5", {}).invalid_reason().find("VECW"), std::string::npos);
  EXPECT_NE(parse_params("PACK=3", {}).invalid_reason().find("PACK"), std::string::npos);
}

class OpenClDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(OpenClDevice, BuildFailureCarriesTheLogAndTheDeviceKeepsWorking) {
  const portmat::opencl::ClApi* cl = portmat::opencl::cl_api();
  ASSERT_NE(cl, nullptr);
  cl_platform_id platform;
  ASSERT_EQ(cl->GetPlatformIDs(1, &platform, nullptr), CL_SUCCESS);
  cl_device_id dev;
  ASSERT_EQ(cl->GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &dev, nullptr), CL_SUCCESS);
  cl_int err;
  cl_context ctx = cl->CreateContext(nullptr, 1, &dev, nullptr, nullptr, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  try {
    portmat::opencl::build_program(*cl, ctx, dev, "test device", "__kernel void f() { this is not C }", "");
    FAIL() << "no exception";
  } catch (const portmat::DeviceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("clBuildProgram"), std::string::npos) << what;
    EXPECT_NE(what.find("CL_BUILD_PROGRAM_FAILURE"), std::string::npos) << what;
    EXPECT_NE(what.find("build log"), std::string::npos) << what;
  }
  cl->ReleaseContext(ctx);

  std::vector<float> a(6, 1.0f), b(6, 2.0f), c(4, 0.0f);
  MatrixView va{a.data(), 2, 3, 3, 1, DType::f32}, vb{b.data(), 3, 2, 2, 1, DType::f32};
  MatrixView vc{c.data(), 2, 2, 2, 1, DType::f32};
  portmat::matmul(va, vb, vc, GetParam());
  for (float x : c) EXPECT_EQ(x, 6.0f);
}

TEST_P(OpenClDevice, OutOfMemoryIsAnExceptionAndLaterCallsWork) {
  auto dev = portmat::core::open_device(GetParam());
  EXPECT_THROW(dev->alloc(dev->info().memory_bytes * 4 + (std::size_t(1) << 40)),
               portmat::OutOfDeviceMemory);
  auto buf = dev->alloc(1024);
  std::vector<float> x(256, 3.0f), y(256, 0.0f);
  dev->upload(*buf, x.data(), 1024);
  dev->download(y.data(), *buf, 1024);
  EXPECT_EQ(x, y);
}

// The integer kernels (gemm.cl with REAL_KIND 2 / 3: wrapping uint / ulong multiply-adds): the
// device computes them itself; full-range values, every layout (with and without edges), and a
// stack, equal to the wrapping reference.
TEST_P(OpenClDevice, IntegerKernelsWrapAround) {
  auto dev = portmat::core::open_device(GetParam());
  ASSERT_TRUE(dev->computes(DType::u32));
  ASSERT_TRUE(dev->computes(DType::u64));
  std::mt19937 rng(29);
  for (int layout = 0; layout < 4; ++layout) {
    portmat::testing::check_integer<std::uint32_t>(GetParam(), DType::u32, 17, 19, 23, layout & 1, layout & 2, 1, rng);
    portmat::testing::check_integer<std::int32_t>(GetParam(), DType::i32, 64, 64, 16, layout & 1, layout & 2, 0, rng);
  }
  portmat::testing::check_integer<std::uint64_t>(GetParam(), DType::u64, 17, 19, 23, false, false, 2, rng);
  portmat::testing::check_integer<std::int64_t>(GetParam(), DType::i64, 33, 9, 40, true, true, 0, rng);
  const std::int64_t count = 4, m = 9, k = 13, n = 11;
  std::vector<std::uint32_t> a(count * m * k), b(count * k * n), c(count * m * n);
  for (auto& x : a) x = rng();
  for (auto& x : b) x = rng();
  portmat::matmul(portmat::ArrayView{a.data(), DType::u32, {count, m, k}, {m * k, k, 1}},
                  portmat::ArrayView{b.data(), DType::u32, {count, k, n}, {k * n, n, 1}},
                  portmat::ArrayView{c.data(), DType::u32, {count, m, n}, {m * n, n, 1}}, GetParam());
  for (std::int64_t i = 0; i < count; ++i) {
    const auto want = portmat::testing::wrapping_product<std::uint32_t>(
        {a.data() + i * m * k, m, k, k, 1, DType::u32}, {b.data() + i * k * n, k, n, n, 1, DType::u32});
    for (std::int64_t e = 0; e < m * n; ++e) ASSERT_EQ(c[i * m * n + e], want[e]) << "matrix " << i << " entry " << e;
  }
}

TEST_P(OpenClDevice, DeviceResidentGemmWithOffsetsAndLayouts) {
  auto dev = portmat::core::open_device(GetParam());
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-1, 1);
  const std::int64_t M = 37, K = 70, N = 45, off = 5;
  for (bool a_col : {false, true})
    for (bool b_col : {false, true}) {
      std::vector<float> a(off + M * K), b(off + K * N), c(off + M * N, -1.0f);
      for (auto& v : a) v = u(rng);
      for (auto& v : b) v = u(rng);
      auto ba = dev->alloc(a.size() * 4), bb = dev->alloc(b.size() * 4), bc = dev->alloc(c.size() * 4);
      dev->upload(*ba, a.data(), a.size() * 4);
      dev->upload(*bb, b.data(), b.size() * 4);
      dev->upload(*bc, c.data(), c.size() * 4);
      portmat::core::DeviceMatrix da{ba.get(), off, M, K, a_col ? M : K, a_col, DType::f32};
      portmat::core::DeviceMatrix db{bb.get(), off, K, N, b_col ? K : N, b_col, DType::f32};
      portmat::core::DeviceMatrix dc{bc.get(), off, M, N, N, false, DType::f32};
      const double seconds = dev->gemm(da, db, dc);
      EXPECT_GT(seconds, 0.0);
      dev->download(c.data(), *bc, c.size() * 4);
      for (int i = 0; i < off; ++i) EXPECT_EQ(c[i], -1.0f) << "wrote before the offset";
      MatrixView va{a.data() + off, M, K, a_col ? 1 : K, a_col ? M : 1, DType::f32};
      MatrixView vb{b.data() + off, K, N, b_col ? 1 : N, b_col ? K : 1, DType::f32};
      MatrixView vc{c.data() + off, M, N, N, 1, DType::f32};
      EXPECT_LE(portmat::reference::worst_error_ratio(va, vb, vc), 1.0) << a_col << b_col;
    }
}

// Sets environment variables for one scope, putting back what was there before.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, std::string>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      setenv(name, value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_)
      if (old)
        setenv(name, old->c_str(), 1);
      else
        unsetenv(name);
  }

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

// The discrete devices' pipelined NumPy path (matmul_pipelined), run on whatever OpenCL device
// there is: PORTMAT_OPENCL_DISCRETE=1 sends a device that shares host memory (PoCL, Intel's CPU
// runtime) down a discrete GPU's path, and PORTMAT_OPENCL_CHUNKS cuts M and b's lines into that
// many pieces. Awkward sizes (one row, one column, primes, more chunks than rows), both layouts of
// a and b, padded leading dimensions and offsets, a result with padded rows whose padding must
// stay untouched; float32 and float64 against the float64 reference, integers exactly. Chunk
// counts vary so that the staging rings grow, wrap and are reused across calls.
TEST_P(OpenClDevice, PipelinedPathOverChunksLayoutsAndViews) {
  auto dev = portmat::core::open_device(GetParam());
  const bool f64 = dev->info().supports_f64;
  std::mt19937 rng(std::random_device{}());
  struct Shape {
    std::int64_t m, k, n;
  };
  const Shape shapes[] = {{1, 33, 77}, {37, 70, 45}, {129, 5, 300}, {300, 131, 1}, {2, 1, 3}, {160, 96, 130}};
  for (const char* pipeline : {"1", "0"})
    for (const char* chunks : {"0", "1", "2", "3", "7", "500"}) {
      if (pipeline[0] == '0' && chunks[0] != '0') continue;  // the unpipelined path has no chunks
      ScopedEnv env{{"PORTMAT_OPENCL_DISCRETE", "1"}, {"PORTMAT_OPENCL_PIPELINE", pipeline},
                    {"PORTMAT_OPENCL_CHUNKS", chunks}};
      for (const Shape& s : shapes)
        for (bool a_col : {false, true})
          for (bool b_col : {false, true}) {
            const int pad = 3;
            auto run = [&](auto zero) {
              using T = decltype(zero);
              const DType dt = portmat::testing::dtype_of<T>();
              const std::int64_t lda = (a_col ? s.m : s.k) + pad, ldb = (b_col ? s.k : s.n) + pad, ldc = s.n + pad;
              auto a = portmat::testing::random_vector<T>((a_col ? s.k : s.m) * lda + pad, rng);
              auto b = portmat::testing::random_vector<T>((b_col ? s.n : s.k) * ldb + pad, rng);
              std::vector<T> c(s.m * ldc + pad, T(-7));
              MatrixView va{a.data() + pad, s.m, s.k, a_col ? 1 : lda, a_col ? lda : 1, dt};
              MatrixView vb{b.data() + pad, s.k, s.n, b_col ? 1 : ldb, b_col ? ldb : 1, dt};
              MatrixView vc{c.data() + 1, s.m, s.n, ldc, 1, dt};
              portmat::matmul(va, vb, vc, GetParam());
              EXPECT_LE(portmat::reference::worst_error_ratio(va, vb, vc), 1.0)
                  << dtype_name(dt) << " " << s.m << "x" << s.k << " @ " << s.k << "x" << s.n << " a_col=" << a_col
                  << " b_col=" << b_col << " pipeline=" << pipeline << " chunks=" << chunks;
              EXPECT_EQ(c[0], T(-7)) << "wrote before the result";
              for (std::int64_t i = 0; i < s.m; ++i)
                for (std::int64_t j = s.n; j < ldc; ++j)
                  ASSERT_EQ(c[1 + i * ldc + j], T(-7)) << "wrote past row " << i << " chunks=" << chunks;
            };
            run(0.0f);
            if (f64) run(0.0);
            portmat::testing::check_integer<std::int32_t>(GetParam(), DType::i32, s.m, s.n, s.k, a_col, b_col, pad, rng);
            portmat::testing::check_integer<std::int64_t>(GetParam(), DType::i64, s.m, s.n, s.k, a_col, b_col, pad, rng);
          }
    }
}

// The pinned result pool of discrete devices (alloc_host): page-locked blocks that the pipeline's
// downloads write in place (and reads in place as operands), handed out again once given back;
// none for small results, with PORTMAT_OPENCL_PINNED_RESULTS=0, or on a device used in place.
TEST_P(OpenClDevice, PinnedResultBlocksAreWrittenInPlaceAndReused) {
  auto dev = portmat::core::open_device(GetParam());
  std::mt19937 rng(std::random_device{}());
  const std::int64_t M = 600, K = 300, N = 500;
  const std::size_t bytes = static_cast<std::size_t>(M * N) * 4;
  if (dev->info().host_unified) EXPECT_EQ(dev->alloc_host(bytes, false), nullptr);
  ScopedEnv env{{"PORTMAT_OPENCL_DISCRETE", "1"}, {"PORTMAT_OPENCL_CHUNKS", "3"}};
  EXPECT_EQ(dev->alloc_host(4096, false), nullptr) << "results under 1 MiB stay ordinary memory";
  auto a = portmat::testing::random_vector<float>(M * K, rng);
  auto b = portmat::testing::random_vector<float>(K * N, rng);
  MatrixView va{a.data(), M, K, K, 1, DType::f32}, vb{b.data(), K, N, N, 1, DType::f32};
  void* first = nullptr;
  for (int round = 0; round < 2; ++round) {
    std::shared_ptr<void> block = dev->alloc_host(bytes, round == 1);
    ASSERT_NE(block, nullptr) << "round " << round;
    if (round == 0) first = block.get();
    if (round == 1) EXPECT_EQ(block.get(), first) << "a block given back is handed out again";
    std::fill_n(static_cast<float*>(block.get()), M * N, std::nanf(""));
    MatrixView vc{block.get(), M, N, N, 1, DType::f32};
    portmat::matmul(va, vb, vc, GetParam());
    EXPECT_LE(portmat::reference::worst_error_ratio(va, vb, vc), 1.0) << "round " << round;
    // the block as an operand (read in place): (K' x M) @ (M x N)
    auto e = portmat::testing::random_vector<float>(7 * M, rng);
    std::vector<float> f(7 * N);
    MatrixView ve{e.data(), 7, M, M, 1, DType::f32}, vf{f.data(), 7, N, N, 1, DType::f32};
    portmat::matmul(ve, vc, vf, GetParam());
    EXPECT_LE(portmat::reference::worst_error_ratio(ve, vc, vf), 1.0) << "round " << round;
  }
  ScopedEnv off{{"PORTMAT_OPENCL_PINNED_RESULTS", "0"}};
  EXPECT_EQ(dev->alloc_host(bytes, false), nullptr);
}

// Stacks on the discrete path (matmul_batch_pipelined): (S x M x K) @ b for a stacked b stored
// column-major (transposed) and a broadcast b, with padded results between matrices, over 1-7
// chunks of whole matrices; every matrix against the float64 reference, the padding untouched.
TEST_P(OpenClDevice, PipelinedStacksOverChunks) {
  std::mt19937 rng(std::random_device{}());
  const std::int64_t S = 7, M = 13, K = 29, N = 11, cpad = 5;
  for (const char* chunks : {"0", "1", "2", "3", "7"}) {
    ScopedEnv env{{"PORTMAT_OPENCL_DISCRETE", "1"}, {"PORTMAT_OPENCL_CHUNKS", chunks}};
    for (bool broadcast : {false, true}) {
      auto a = portmat::testing::random_vector<float>(S * M * K, rng);
      auto b = portmat::testing::random_vector<float>((broadcast ? 1 : S) * K * N, rng);
      const std::int64_t c_step = M * N + cpad;
      std::vector<float> c(S * c_step, -7.0f);
      portmat::ArrayView va{a.data(), DType::f32, {S, M, K}, {M * K, K, 1}};
      // b's matrices stored column-major: element (k, n) of matrix s at s*K*N + n*K + k
      portmat::ArrayView vb = broadcast ? portmat::ArrayView{b.data(), DType::f32, {K, N}, {1, K}}
                                        : portmat::ArrayView{b.data(), DType::f32, {S, K, N}, {K * N, 1, K}};
      portmat::ArrayView vc{c.data(), DType::f32, {S, M, N}, {c_step, N, 1}};
      portmat::matmul(va, vb, vc, GetParam());
      for (std::int64_t i = 0; i < S; ++i) {
        MatrixView ma{a.data() + i * M * K, M, K, K, 1, DType::f32};
        MatrixView mb{b.data() + (broadcast ? 0 : i * K * N), K, N, 1, K, DType::f32};
        MatrixView mc{c.data() + i * c_step, M, N, N, 1, DType::f32};
        EXPECT_LE(portmat::reference::worst_error_ratio(ma, mb, mc), 1.0)
            << "matrix " << i << " chunks=" << chunks << " broadcast=" << broadcast;
        for (std::int64_t e = M * N; e < c_step; ++e)
          ASSERT_EQ(c[i * c_step + e], -7.0f) << "wrote between matrices " << i << " and " << i + 1;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, OpenClDevice,
                         ::testing::ValuesIn(portmat::testing::device_ids("opencl")),
                         portmat::testing::DeviceName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpenClDevice);
