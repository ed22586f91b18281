// The native CPU backend's own machinery: every micro-kernel this CPU can run against the scalar
// reference kernel for every edge-tile size (and that it writes nothing outside its tile); every
// A packer against the portable one for every edge panel; the complex B packer against B''; the
// blocking driver in both loop orders with small block sizes so every loop runs several times, on
// 1 to 4 threads, with both storage orders of A and B; the device's info, thread setting and
// concurrent callers.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/backend.hpp"
#include "core/batch.hpp"
#include "core/layout.hpp"
#include "core/reference.hpp"
#include "cpu/boolean.hpp"
#include "cpu/gemm_driver.hpp"
#include "cpu/kernel_table.hpp"
#include "cpu/skinny.hpp"
#include "cpu/small.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/kernels/gemm_ref.hpp"
#include "portmat/cpu.hpp"
#include "portmat/portmat.hpp"
#include "test_util.hpp"

using portmat::DType;
using portmat::MatrixView;
using portmat::cpu::GemmConfig;
using portmat::cpu::KernelSet;
using portmat::testing::dtype_of;
using portmat::testing::random_vector;

namespace {

template <class T>
const GemmConfig<T>& config_of(const KernelSet& s) {
  if constexpr (sizeof(T) == 4)
    return s.f32;
  else
    return s.f64;
}

// The reference micro-kernel at the tile shape of cfg (the shapes of the table).
template <class T>
portmat::cpu::GemmUkernel<T> reference_for(const GemmConfig<T>& cfg) {
  using portmat::cpu::gemm_ref;
  const int mr = cfg.mr, nr = cfg.nr;
  if (mr == 14 && nr == 32) return &gemm_ref<T, 14, 32>;
  if (mr == 14 && nr == 16) return &gemm_ref<T, 14, 16>;
  if (mr == 6 && nr == 16) return &gemm_ref<T, 6, 16>;
  if (mr == 6 && nr == 8) return &gemm_ref<T, 6, 8>;
  if (mr == 8 && nr == 12) return &gemm_ref<T, 8, 12>;
  if (mr == 8 && nr == 6) return &gemm_ref<T, 8, 6>;
  if (mr == 4 && nr == 8) return &gemm_ref<T, 4, 8>;
  if (mr == 4 && nr == 4) return &gemm_ref<T, 4, 4>;
  return nullptr;
}

// One m x n tile of C (m <= mr, n <= nr) computed by `kernel(c_tile, ldc)` inside a larger
// poisoned matrix (ldc > nr, a margin on every side), against the reference micro-kernel `ref` on
// the same packed panels ap (k x mr) and bp (k x nr), zero-padded past the edge: nothing outside
// the tile written, every element inside within the rounding bound of its k products.
template <class T, class Kernel>
void check_tile(Kernel&& kernel, portmat::cpu::GemmUkernel<T> ref, const std::vector<T>& ap,
                const std::vector<T>& bp, std::int64_t k, int mr, int nr, int m, int n, bool accumulate) {
  const T poison = T(-777);
  const std::int64_t ldc = nr + 5, rows = mr + 2;
  std::vector<T> c(rows * ldc + 8, poison), want;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) c[(i + 1) * ldc + 2 + j] = accumulate ? T(0.5 * (i - j)) : T(NAN);
  want = c;
  kernel(c.data() + ldc + 2, ldc);
  ref(k, ap.data(), bp.data(), want.data() + ldc + 2, ldc, m, n, accumulate);
  const double eps = std::numeric_limits<T>::epsilon();
  for (std::size_t x = 0; x < c.size(); ++x) {
    const std::int64_t i = static_cast<std::int64_t>(x) / ldc - 1, j = static_cast<std::int64_t>(x) % ldc - 2;
    const bool inside = i >= 0 && i < m && j >= 0 && j < n;
    if (!inside) {
      ASSERT_EQ(c[x], poison) << "wrote outside the tile at (" << i << ", " << j
                              << ") for m=" << m << " n=" << n << " k=" << k;
      continue;
    }
    double mag = accumulate ? std::fabs(0.5 * (i - j)) : 0.0;
    for (std::int64_t p = 0; p < k; ++p) mag += std::fabs(double(ap[p * mr + i]) * bp[p * nr + j]);
    ASSERT_LE(std::fabs(double(c[x]) - double(want[x])), 2 * (k + 1) * eps * mag + 1e-30)
        << "m=" << m << " n=" << n << " k=" << k << " acc=" << accumulate << " at (" << i
        << ", " << j << ")";
  }
}

template <class T>
void check_micro_kernel(const GemmConfig<T>& cfg) {
  SCOPED_TRACE(cfg.kernel);
  auto ref = reference_for(cfg);
  ASSERT_NE(ref, nullptr) << "no reference instance for this tile shape";
  std::mt19937 rng(42);
  const int mr = cfg.mr, nr = cfg.nr;
  for (std::int64_t k : {1, 3, 64, 259}) {
    auto a = random_vector<T>(mr * k, rng), b = random_vector<T>(k * nr, rng);
    for (int m = 1; m <= mr; ++m)
      for (int n = 1; n <= nr; ++n)
        for (bool accumulate : {false, true}) {
          // Zero-pad the panels beyond the edge as the packers do.
          auto ap = a, bp = b;
          for (std::int64_t p = 0; p < k; ++p) {
            for (int i = m; i < mr; ++i) ap[p * mr + i] = 0;
            for (int j = n; j < nr; ++j) bp[p * nr + j] = 0;
          }
          ASSERT_NO_FATAL_FAILURE(check_tile<T>(
              [&](T* c, std::int64_t ldc) { cfg.ukernel(k, ap.data(), bp.data(), c, ldc, m, n, accumulate); }, ref,
              ap, bp, k, mr, nr, m, n, accumulate));
        }
  }
}

// The direct-A form of cfg's kernel (ukernel.hpp, GemmUkernelDirectA), where it has one: all mr
// rows read in place from a row-major a with a padded leading dimension, against the reference on
// the same panel packed here by hand; edge columns, accumulate, k with and without a tail.
template <class T>
void check_direct_a_kernel(const GemmConfig<T>& cfg) {
  if (!cfg.ukernel_direct_a) GTEST_SKIP() << cfg.kernel << " has no direct-A form";
  SCOPED_TRACE(cfg.kernel);
  auto ref = reference_for(cfg);
  ASSERT_NE(ref, nullptr);
  std::mt19937 rng(43);
  const int mr = cfg.mr, nr = cfg.nr;
  for (std::int64_t k : {1, 3, 37, 259}) {
    const std::int64_t lda = k + 5;  // rows apart by more than k, the last row ending the buffer
    auto a = random_vector<T>((mr - 1) * lda + k, rng), b = random_vector<T>(k * nr, rng);
    std::vector<T> ap(mr * k);
    for (std::int64_t p = 0; p < k; ++p)
      for (int i = 0; i < mr; ++i) ap[p * mr + i] = a[i * lda + p];
    for (int n = 1; n <= nr; ++n)
      for (bool accumulate : {false, true}) {
        auto bp = b;
        for (std::int64_t p = 0; p < k; ++p)
          for (int j = n; j < nr; ++j) bp[p * nr + j] = 0;
        ASSERT_NO_FATAL_FAILURE(check_tile<T>(
            [&](T* c, std::int64_t ldc) { cfg.ukernel_direct_a(k, a.data(), lda, bp.data(), c, ldc, n, accumulate); },
            ref, ap, bp, k, mr, nr, mr, n, accumulate));
      }
  }
}

// The forms of cfg's kernels that prefetch as they run (ukernel.hpp, PrefetchLines), where it has
// them: the same tiles as the plain kernels (edges, accumulate, direct A), and the stream of lines
// advanced by one a k step (rows wrapping after `lines` lines) until none is left.
template <class T>
void check_prefetching_kernels(const GemmConfig<T>& cfg) {
  if (!cfg.ukernel_pf || !cfg.ukernel_direct_a_pf) GTEST_SKIP() << cfg.kernel << " has no prefetching form";
  SCOPED_TRACE(cfg.kernel);
  auto ref = reference_for(cfg);
  ASSERT_NE(ref, nullptr);
  std::mt19937 rng(44);
  const int mr = cfg.mr, nr = cfg.nr;
  std::vector<char> lines(64 * 64 * 8);  // what the kernels prefetch: 64 rows of 8 lines
  const std::int64_t ld = 64 * 8;
  auto stream_after = [&](std::int64_t start, std::int64_t left, std::int64_t k, const portmat::cpu::PrefetchLines& pl) {
    // Started at line `start` of 5-line rows with `left` to go, after k steps.
    const std::int64_t issued = std::min(left, k), at = start + issued;
    EXPECT_EQ(pl.left, left - issued) << "k=" << k;
    EXPECT_EQ(pl.row, lines.data() + (at / 5) * ld) << "k=" << k;
    EXPECT_EQ(pl.line, at % 5) << "k=" << k;
    EXPECT_EQ(pl.lines, 5);
    EXPECT_EQ(pl.ld, ld);
  };
  for (std::int64_t k : {1, 3, 37, 259}) {
    for (std::int64_t left : {std::int64_t(0), std::int64_t(7), k + 40}) {
      auto a = random_vector<T>(mr * k, rng), b = random_vector<T>(k * nr, rng);
      for (int m : {1, mr / 2, mr})
        for (int n : {1, nr - 3, nr})
          for (bool accumulate : {false, true}) {
            auto ap = a, bp = b;
            for (std::int64_t p = 0; p < k; ++p) {
              for (int i = m; i < mr; ++i) ap[p * mr + i] = 0;
              for (int j = n; j < nr; ++j) bp[p * nr + j] = 0;
            }
            portmat::cpu::PrefetchLines pl{lines.data(), ld, 3, 5, left};
            ASSERT_NO_FATAL_FAILURE(check_tile<T>(
                [&](T* c, std::int64_t ldc) { cfg.ukernel_pf(k, ap.data(), bp.data(), c, ldc, m, n, accumulate, &pl); },
                ref, ap, bp, k, mr, nr, m, n, accumulate));
            stream_after(3, left, k, pl);
          }
      // Direct A: rows of a row-major a, lda past k.
      const std::int64_t lda = k + 5;
      auto ar = random_vector<T>((mr - 1) * lda + k, rng);
      std::vector<T> apk(mr * k);
      for (std::int64_t p = 0; p < k; ++p)
        for (int i = 0; i < mr; ++i) apk[p * mr + i] = ar[i * lda + p];
      for (int n : {1, nr})
        for (bool accumulate : {false, true}) {
          auto bp = b;
          for (std::int64_t p = 0; p < k; ++p)
            for (int j = n; j < nr; ++j) bp[p * nr + j] = 0;
          portmat::cpu::PrefetchLines pl{lines.data(), ld, 0, 5, left};
          ASSERT_NO_FATAL_FAILURE(check_tile<T>(
              [&](T* c, std::int64_t ldc) {
                cfg.ukernel_direct_a_pf(k, ar.data(), lda, bp.data(), c, ldc, n, accumulate, &pl);
              },
              ref, apk, bp, k, mr, nr, mr, n, accumulate));
          stream_after(0, left, k, pl);
        }
    }
  }
}

// The portable packer at the A tile height of cfg: the oracle for ISA-specific packers.
template <class T>
portmat::cpu::PackFn<T> reference_pack_a(const GemmConfig<T>& cfg) {
  using portmat::cpu::pack_a_panels;
  switch (cfg.mr) {
    case 14: return &pack_a_panels<T, 14>;
    case 8: return &pack_a_panels<T, 8>;
    case 6: return &pack_a_panels<T, 6>;
    case 4: return &pack_a_panels<T, 4>;
    default: return nullptr;
  }
}

// cfg.pack_a against the portable packer, bit for bit, for every edge panel height (m below,
// at and above mr), k around the SIMD widths, leading dimensions with and without slack, both
// storage orders, at an offset, and nothing written past the packed panels.
template <class T>
void check_pack_a(const GemmConfig<T>& cfg) {
  SCOPED_TRACE(cfg.kernel);
  auto ref = reference_pack_a(cfg);
  ASSERT_NE(ref, nullptr);
  std::mt19937 rng(11);
  const int mr = cfg.mr;
  const T poison = T(-777);
  for (bool col : {false, true})
    for (std::int64_t k : {1, 5, 15, 16, 17, 40, 64})
      for (std::int64_t slack : {0, 3, 16})
        for (std::int64_t m = 1; m <= 2 * mr + 1; ++m) {
          const std::int64_t i0 = 2, p0 = 3, rows = i0 + m, cols = p0 + k;
          const std::int64_t ld = (col ? rows : cols) + slack, off = 7;
          auto src = random_vector<T>(off + ld * (col ? cols : rows), rng);
          portmat::core::HostMatrix a{src.data(), off, rows, cols, ld, col, dtype_of<T>()};
          const std::int64_t size = (m + mr - 1) / mr * mr * k;
          std::vector<T> got(size + 16, poison), want(size + 16, poison);
          cfg.pack_a(a, i0, m, p0, k, got.data());
          ref(a, i0, m, p0, k, want.data());
          ASSERT_EQ(got, want) << "m=" << m << " k=" << k << " ld=" << ld << " col=" << col;
        }
}

// The complex B packer (cfg's tile width) against cfg.pack_b on the B'' that core::complex_b
// writes out, bit for bit: every panel width around nr (odd ones go through the general path),
// B'' rows from odd and even starts, both storage orders of b, slack and an offset, and nothing
// written past the packed panels.
template <class T>
void check_pack_b_complex(const GemmConfig<T>& cfg) {
  SCOPED_TRACE(cfg.kernel);
  const auto packer = portmat::cpu::complex_b_packer<T>(cfg.nr);
  ASSERT_NE(packer, nullptr);
  constexpr DType complex_t = std::is_same_v<T, float> ? DType::c64 : DType::c128;
  std::mt19937 rng(12);
  const int nr = cfg.nr;
  const T poison = T(-777);
  for (bool col : {false, true})
    for (std::int64_t slack : {0, 5}) {
      const std::int64_t K = 23, N = nr + 3, off = 3;  // complex elements
      const std::int64_t ld = (col ? K : N) + slack;
      auto parts = random_vector<T>(2 * (off + ld * (col ? N : K)), rng);
      const MatrixView bv{parts.data() + 2 * off, K, N, col ? 1 : ld, col ? ld : 1, complex_t};
      const portmat::core::Converted b2 = portmat::core::complex_b(bv, 0, 1);
      const auto real_b2 = portmat::core::dense_in_place(b2.view);
      ASSERT_TRUE(real_b2.has_value());
      const portmat::core::HostMatrix b{parts.data(), off, 2 * K, 2 * N, ld, col, dtype_of<T>()};
      for (std::int64_t p0 : {0, 1, 6})
        for (std::int64_t k : {std::int64_t(1), std::int64_t(2), std::int64_t(7), 2 * K - p0})
          for (std::int64_t j0 : {std::int64_t(0), std::int64_t(nr)})
            for (std::int64_t n = 1; n <= 2 * N - j0 && n <= 2 * nr + 1; ++n) {
              const std::int64_t size = (n + nr - 1) / nr * nr * k;
              std::vector<T> got(size + 16, poison), want(size + 16, poison);
              packer(b, p0, k, j0, n, got.data());
              cfg.pack_b(*real_b2, p0, k, j0, n, want.data());
              ASSERT_EQ(got, want) << "p0=" << p0 << " k=" << k << " j0=" << j0 << " n=" << n
                                   << " col=" << col << " slack=" << slack;
            }
    }
}

// c = a @ b through the blocking driver with cfg on `threads` threads; returns the worst error
// ratio against the float64 reference (<= 1 is accurate).
template <class T>
double run_driver(const GemmConfig<T>& cfg, std::int64_t m, std::int64_t k, std::int64_t n,
                  bool a_col, bool b_col, int threads, std::mt19937& rng,
                  double min_flops_per_thread = portmat::cpu::kMinFlopsPerThread, const char* plan = nullptr,
                  std::int64_t lda_set = 0) {
  // Leading dimensions larger than the matrices and a non-zero offset, as slices have (or a's
  // given one, lda_set).
  const std::int64_t lda = lda_set ? lda_set : (a_col ? m : k) + 3, ldb = (b_col ? k : n) + 1, ldc = n + 2;
  const std::int64_t off = 5;
  auto a = random_vector<T>(off + lda * (a_col ? k : m), rng);
  auto b = random_vector<T>(off + ldb * (b_col ? n : k), rng);
  std::vector<T> c(m * ldc, T(NAN));  // every entry of the result must be written
  portmat::core::HostMatrix ha{a.data(), off, m, k, lda, a_col, dtype_of<T>()};
  portmat::core::HostMatrix hb{b.data(), off, k, n, ldb, b_col, dtype_of<T>()};
  if (plan) {  // the plan the caller means to test (a wrong one would test another path)
    const std::string got = portmat::cpu::gemm_plan(cfg, ha, hb, threads, min_flops_per_thread);
    EXPECT_EQ(got, plan) << m << "x" << k << "x" << n << " a_col=" << a_col << " b_col=" << b_col << " ldb=" << ldb;
  }
  portmat::cpu::gemm(cfg, ha, hb, c.data(), ldc, threads, min_flops_per_thread);
  MatrixView va{a.data() + off, m, k, a_col ? 1 : lda, a_col ? lda : 1, dtype_of<T>()};
  MatrixView vb{b.data() + off, k, n, b_col ? 1 : ldb, b_col ? ldb : 1, dtype_of<T>()};
  MatrixView vc{c.data(), m, n, ldc, 1, dtype_of<T>()};
  for (std::int64_t i = 0; i < m; ++i)  // the padding columns of c stay untouched
    for (std::int64_t j = n; j < ldc; ++j)
      if (!std::isnan(c[i * ldc + j])) return std::numeric_limits<double>::infinity();
  return portmat::reference::worst_error_ratio(va, vb, vc);
}

template <class T>
void check_driver(GemmConfig<T> cfg) {
  SCOPED_TRACE(cfg.kernel);
  // Small blocks so every loop of the nest runs several times, with runts at every level.
  cfg.mc = 2 * cfg.mr, cfg.kc = 16, cfg.nc = 2 * cfg.nr;
  std::mt19937 rng(7);
  for (bool a_outer : {false, true}) {  // both loop orders, whichever the table picks
    cfg.a_outer = a_outer;
    // (with A outer and a row-major a, the products of at most 4 B blocks read a in place where
    // the kernel has a direct-A form, gemm_driver.cpp's direct_a; 11 nr columns are 6 blocks)
    for (auto [m, k, n] : {std::tuple{1, 1, 1}, {5, 3, 2}, {2 * cfg.mr + 1, 33, 3 * cfg.nr - 1},
                           {3 * cfg.mr, 48, 5 * cfg.nr + 3}, {2 * cfg.mr + 3, 20, 11 * cfg.nr}, {70, 40, 1}, {1, 50, 90}})
      for (int threads : {1, 2, 3, 4})
        for (bool a_col : {false, true})
          for (bool b_col : {false, true}) {
            // min_flops_per_thread 0: use every thread even for these small products.
            EXPECT_LE(run_driver<T>(cfg, m, k, n, a_col, b_col, threads, rng, 0.0), 1.0)
                << m << "x" << k << "x" << n << " threads=" << threads << " a_col=" << a_col
                << " b_col=" << b_col << " a_outer=" << a_outer;
          }
  }
}

// The integer products (every integer dtype's, core/dtypes.cpp) through the driver: exact,
// wrapping modulo 2^bits, against a plain loop; `narrow` draws values that are sign-extended
// 32-bit ones (the u64_narrow kernels' contract), else any bits.
template <class T>
void check_driver_integers(GemmConfig<T> cfg, bool narrow) {
  SCOPED_TRACE(cfg.kernel);
  cfg.mc = 2 * cfg.mr, cfg.kc = 16, cfg.nc = 2 * cfg.nr;
  std::mt19937_64 rng(11);
  auto draw = [&]() -> T {
    const std::uint64_t x = rng();
    return narrow ? static_cast<T>(static_cast<std::int64_t>(static_cast<std::int32_t>(x))) : static_cast<T>(x);
  };
  const T poison = static_cast<T>(0xDEADBEEFCAFEF00Dull);
  for (bool a_outer : {false, true}) {
    cfg.a_outer = a_outer;
    for (auto [m, k, n] : {std::tuple{1, 1, 1}, {2 * cfg.mr + 1, 33, 3 * cfg.nr - 1}, {70, 40, 1}, {1, 50, 90}})
      for (int threads : {1, 3})
        for (bool a_col : {false, true}) {
          const std::int64_t lda = (a_col ? m : k) + 3, ldc = n + 2;
          std::vector<T> a(lda * (a_col ? k : m)), b(k * n), c(m * ldc, poison);
          for (auto& x : a) x = draw();
          for (auto& x : b) x = draw();
          const auto dt = sizeof(T) == 4 ? portmat::DType::u32 : portmat::DType::u64;
          portmat::core::HostMatrix ha{a.data(), 0, m, k, lda, a_col, dt};
          portmat::core::HostMatrix hb{b.data(), 0, k, n, n, false, dt};
          portmat::cpu::gemm(cfg, ha, hb, c.data(), ldc, threads, 0.0);
          for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < ldc; ++j) {
              T want = poison;  // the padding columns stay untouched
              if (j < n) {
                want = 0;
                for (std::int64_t p = 0; p < k; ++p) want += (a_col ? a[p * lda + i] : a[i * lda + p]) * b[p * n + j];
              }
              ASSERT_EQ(c[i * ldc + j], want) << m << "x" << k << "x" << n << " entry " << i << "," << j
                                              << " threads=" << threads << " a_col=" << a_col;
            }
        }
  }
}

// Random elements: floats as random_vector's, unsigned integers over their whole range (so that
// products wrap around).
template <class T>
std::vector<T> random_elements(std::size_t count, std::mt19937& rng) {
  if constexpr (std::is_floating_point_v<T>) {
    return random_vector<T>(count, rng);
  } else {
    std::vector<T> v(count);
    for (auto& x : v) x = static_cast<T>((std::uint64_t(rng()) << 32) ^ rng());
    return v;
  }
}

// The skinny path (skinny.hpp) on every layout case: few rows with b row- or column-major, few
// columns with a row- or column-major (5-8 of them: taken only by the axpy kernel's layouts; 5-16
// rows of a long K against a row-major b: rows_tiles); padded leading dimensions, offsets, 1-3 threads, a result
// with padding that must stay untouched.
template <class T>
void check_skinny() {
  std::mt19937 rng(5);
  const T poison = T(-7777);
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {1, 37, 300}, {4, 1000, 9}, {3, 5, 2}, {2, 129, 1025},
                         {300, 70, 1}, {513, 64, 4}, {1, 4099, 3},
                         // one or two rows against a row-major b: axpy's steps of 8, 4 and 1 rows
                         {2, 62, 515}, {1, 141, 70},
                         // a long K and fewer row pieces than threads: the threads split K
                         {1, 600001, 1}, {3, 200003, 1}, {1, 200001, 2},
                         // 5-8 rows or columns: only where the layout gives the axpy kernel
                         {5, 300, 700}, {8, 1000, 33}, {7, 64, 1025}, {300, 70, 6}, {1025, 33, 8}, {6, 9, 6},
                         // 5-16 rows against a row-major b at least 1 KiB wide: rows_tiles (every
                         // group of 4 rows full and partial, columns past the last whole tile and
                         // vector, several column blocks between the threads)
                         {5, 400, 21}, {9, 700, 37}, {12, 1000, 16}, {13, 1501, 531}, {16, 803, 1000},
                         {16, 900, 4133}, {11, 650, 5000}, {8, 999, 267}, {14, 777, 270},
                         // ... and a shorter K
                         {16, 40, 3000}, {7, 20, 5003}, {13, 100, 700}, {6, 17, 263}})
    for (bool a_col : {false, true})
      for (bool b_col : {false, true})
        for (int threads : {1, 3}) {
          const std::int64_t lda = (a_col ? m : k) + 2, ldb = (b_col ? k : n) + 3, ldc = n + 1, off = 3;
          auto a = random_elements<T>(off + lda * (a_col ? k : m), rng);
          auto b = random_elements<T>(off + ldb * (b_col ? n : k), rng);
          // Over a long K, float32's bound (K * eps * |a| @ |b|) would pass a sum that lost a
          // stretch of random-sign terms: positive terms make every stretch count.
          if constexpr (std::is_floating_point_v<T>)
            if (k > 100000)
              for (auto* v : {&a, &b})
                for (auto& x : *v) x = std::abs(x);
          std::vector<T> c(m * ldc, poison);
          portmat::core::HostMatrix ha{a.data(), off, m, k, lda, a_col, dtype_of<T>()};
          portmat::core::HostMatrix hb{b.data(), off, k, n, ldb, b_col, dtype_of<T>()};
          const bool axpy_only = m > portmat::cpu::kSkinnyMax && n > portmat::cpu::kSkinnyMax;
          const bool taken = !axpy_only || (m <= portmat::cpu::kSkinnyAxpyMax && !b_col) ||
                             (n <= portmat::cpu::kSkinnyAxpyMax && a_col) ||
                             (!b_col && portmat::cpu::rows_path(m, k, n, sizeof(T)));
          if (m > portmat::cpu::kSkinnyMax && m <= portmat::cpu::kSkinnyRowsMax && k >= 17 &&
              n * sizeof(T) >= 1024)
            ASSERT_EQ(taken, !b_col) << m << "x" << k << "x" << n << ": rows_tiles takes these";
          if (!taken) {
            ASSERT_FALSE(portmat::cpu::skinny_gemm<T>(ha, hb, c.data(), ldc, threads))
                << m << "x" << k << "x" << n << " a_col=" << a_col << " b_col=" << b_col;
            ASSERT_EQ(c[0], poison) << "a product it does not take is not touched";
            continue;
          }
          ASSERT_TRUE(portmat::cpu::skinny_gemm<T>(ha, hb, c.data(), ldc, threads));
          for (std::int64_t i = 0; i < m; ++i) ASSERT_EQ(c[i * ldc + n], poison) << "padding written";
          if constexpr (std::is_integral_v<T>) {  // exact, wrapping around
            for (std::int64_t i = 0; i < m; ++i)
              for (std::int64_t j = 0; j < n; ++j) {
                T want = 0;
                for (std::int64_t q = 0; q < k; ++q)
                  want += a[off + (a_col ? q * lda + i : i * lda + q)] * b[off + (b_col ? j * ldb + q : q * ldb + j)];
                ASSERT_EQ(c[i * ldc + j], want) << m << "x" << k << "x" << n << " a_col=" << a_col
                                                << " b_col=" << b_col << " threads=" << threads << " at " << i << "," << j;
              }
            continue;
          }
          MatrixView va{a.data() + off, m, k, a_col ? 1 : lda, a_col ? lda : 1, dtype_of<T>()};
          MatrixView vb{b.data() + off, k, n, b_col ? 1 : ldb, b_col ? ldb : 1, dtype_of<T>()};
          MatrixView vc{c.data(), m, n, ldc, 1, dtype_of<T>()};
          EXPECT_LE(portmat::reference::worst_error_ratio(va, vb, vc), 1.0)
              << m << "x" << k << "x" << n << " a_col=" << a_col << " b_col=" << b_col << " threads=" << threads;
        }
  // Past kSkinnyAxpyMax on both sides: not taken.
  std::vector<T> x(64 * 64), y(64 * 64);
  portmat::core::HostMatrix h{x.data(), 0, 64, 64, 64, false, dtype_of<T>()};
  EXPECT_FALSE(portmat::cpu::skinny_gemm<T>(h, h, y.data(), 64, 1));
}

// The small path (small.hpp): every remainder of its 6-row tiles and of its column strips (16
// floats, 8 doubles), K from 1 to 300, padded leading dimensions and offsets, a result with
// padding that must stay untouched, on 1 and 3 threads (rows or column strips shared out), and
// past kSmallElements with one strip of columns; refused past it otherwise, for few columns of many
// rows,
// and for column-major operands.
template <class T>
void check_small() {
  std::mt19937 rng(7);
  const T poison = T(-7777);
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {2, 3, 5}, {5, 7, 15}, {6, 16, 16}, {7, 33, 17}, {13, 1, 31},
                         {32, 32, 32}, {47, 64, 9}, {100, 128, 127}, {128, 5, 128}, {1, 256, 255},
                         {2, 100, 200}, {3, 300, 13}, {4, 2, 4},
                         // past kSmallElements, few columns (one strip of b)
                         {700, 300, 7}, {3001, 50, 8}, {64, 3000, 5},
                         // past kSmallElements, a narrow b that fits kSmallBBytes: many blocks of
                         // rows, several strips and a padded last one
                         {3000, 100, 29}, {1500, 300, 20}, {40, 70, 24}, {9, 21, 40}, {256, 256, 8}, {3, 40, 270}, {6, 19, 129}, {20, 50, 96},
                         // two rows past the 6-row tiles, as two tiles of 4 (small.cpp, row_tiles)
                         {8, 40, 70}, {14, 64, 33},
                         // a short k (small.cpp, rows_across): several 4 KiB chunks of columns, a
                         // runt chunk, then the vector and padded-column tails; where the first
                         // row tile copies each chunk for the others (AVX2), a first tile of 6 or 4
                         {7, 16, 2500}, {64, 3, 1100}, {13, 8, 1050}, {2, 5, 1031}, {8, 16, 2100},
                         {14, 4, 1030}, {26, 2, 1500}})
    for (int pad : {0, 3})
    for (int threads : {1, 3}) {
      const std::int64_t lda = k + pad, ldb = n + pad, ldc = n + 1, off = pad;
      auto a = random_vector<T>(off + lda * m, rng);
      auto b = random_vector<T>(off + ldb * k, rng);
      std::vector<T> c(m * ldc, poison);
      portmat::core::HostMatrix ha{a.data(), static_cast<std::size_t>(off), m, k, lda, false, dtype_of<T>()};
      portmat::core::HostMatrix hb{b.data(), static_cast<std::size_t>(off), k, n, ldb, false, dtype_of<T>()};
      ASSERT_TRUE(portmat::cpu::small_gemm<T>(ha, hb, c.data(), ldc, threads));
      for (std::int64_t i = 0; i < m; ++i) ASSERT_EQ(c[i * ldc + n], poison) << "padding written";
      MatrixView va{a.data() + off, m, k, lda, 1, dtype_of<T>()};
      MatrixView vb{b.data() + off, k, n, ldb, 1, dtype_of<T>()};
      MatrixView vc{c.data(), m, n, ldc, 1, dtype_of<T>()};
      EXPECT_LE(portmat::reference::worst_error_ratio(va, vb, vc), 1.0)
          << m << "x" << k << "x" << n << " pad " << pad << " threads " << threads;
    }
  // Every matrix described below holds 1.6M elements at most; those that must be refused are past
  // either size limit (kSmallElementsHalfRate too: 3 x 600^2 elements for the square).
  std::vector<T> x(1600000), y(1600000);
  portmat::core::HostMatrix big{x.data(), 0, 600, 600, 600, false, dtype_of<T>()};
  portmat::core::HostMatrix sq{x.data(), 0, 8, 8, 8, false, dtype_of<T>()};
  portmat::core::HostMatrix col{x.data(), 0, 8, 8, 8, true, dtype_of<T>()};
  portmat::core::HostMatrix tall{x.data(), 0, 64, 8, 8, false, dtype_of<T>()};
  portmat::core::HostMatrix narrow{x.data(), 0, 8, 2, 2, false, dtype_of<T>()};
  EXPECT_FALSE(portmat::cpu::small_gemm<T>(big, big, y.data(), 600));
  // Past the size limit only one strip of columns (64 bytes) or a narrow b (rows of at most
  // narrow_b_bytes(), at most small_b_bytes() in all), and not skinny.hpp's few.
  const std::int64_t row_bytes = portmat::cpu::narrow_b_bytes(), b_bytes = portmat::cpu::small_b_bytes();
  EXPECT_TRUE(row_bytes == portmat::cpu::kNarrowBytes || row_bytes == portmat::cpu::kNarrowBytesWide);
  EXPECT_EQ(b_bytes, row_bytes == portmat::cpu::kNarrowBytes ? portmat::cpu::kSmallBBytes : portmat::cpu::kSmallBBytesWide);
  portmat::core::HostMatrix tall_a{x.data(), 0, 6000, 50, 50, false, dtype_of<T>()};
  const std::int64_t wide = row_bytes / sizeof(T) + 1;
  portmat::core::HostMatrix wide_b{x.data(), 0, 50, wide, wide, false, dtype_of<T>()};
  portmat::core::HostMatrix just_b{x.data(), 0, 50, wide - 1, wide - 1, false, dtype_of<T>()};
  portmat::core::HostMatrix four_b{x.data(), 0, 50, 4, 4, false, dtype_of<T>()};
  // K just past small_b_bytes() for 32 columns, and a's elements past either size limit
  const std::int64_t long_k = b_bytes / (32 * std::int64_t(sizeof(T))) + 1;
  portmat::core::HostMatrix long_a{x.data(), 0, 1200000 / long_k, long_k, long_k, false, dtype_of<T>()};
  portmat::core::HostMatrix long_b{x.data(), 0, long_k, 16, 16, false, dtype_of<T>()};
  portmat::core::HostMatrix long_b32{x.data(), 0, long_k, 32, 32, false, dtype_of<T>()};
  portmat::core::HostMatrix short_b32{x.data(), 0, long_k - 1, 32, 32, false, dtype_of<T>()};
  EXPECT_FALSE(portmat::cpu::small_gemm<T>(tall_a, wide_b, y.data(), wide));
  EXPECT_TRUE(portmat::cpu::small_gemm<T>(tall_a, just_b, y.data(), wide - 1));
  EXPECT_FALSE(portmat::cpu::small_gemm<T>(long_a, long_b32, y.data(), 32));  // b past small_b_bytes()
  portmat::core::HostMatrix long_a_less{x.data(), 0, long_a.rows, long_k - 1, long_k - 1, false, dtype_of<T>()};
  EXPECT_TRUE(portmat::cpu::small_gemm<T>(long_a_less, short_b32, y.data(), 32));
  // 16 columns: one strip of floats; doubles by the narrow rule (half the bytes of 32 columns)
  EXPECT_TRUE(portmat::cpu::small_gemm<T>(long_a, long_b, y.data(), 16));
  EXPECT_FALSE(portmat::cpu::small_gemm<T>(tall_a, four_b, y.data(), 4));
  EXPECT_FALSE(portmat::cpu::small_gemm<T>(tall, narrow, y.data(), 2));  // skinny's dots
  EXPECT_FALSE(portmat::cpu::small_gemm<T>(sq, col, y.data(), 8));
  EXPECT_FALSE(portmat::cpu::small_gemm<T>(col, sq, y.data(), 8));
  // One row stored column-major: its elements are ld apart, so only ld == 1 is a contiguous row.
  portmat::core::HostMatrix row_gaps{x.data(), 0, 1, 8, 2, true, dtype_of<T>()};
  portmat::core::HostMatrix row_dense{x.data(), 0, 1, 8, 1, true, dtype_of<T>()};
  EXPECT_FALSE(portmat::cpu::small_gemm<T>(row_gaps, sq, y.data(), 8));
  portmat::core::HostMatrix column{x.data(), 0, 8, 1, 1, false, dtype_of<T>()};
  EXPECT_FALSE(portmat::cpu::small_gemm<T>(column, row_gaps, y.data(), 8));
  EXPECT_TRUE(portmat::cpu::small_gemm<T>(row_dense, sq, y.data(), 8));
}

// ---- the complex kernels (kernel_table.hpp, c64 / c128) ------------------------------------------

template <class C>
using PartOf = decltype(C::re);
template <class C>
constexpr DType complex_dtype() {
  return sizeof(C) == 8 ? DType::c64 : DType::c128;
}

template <class C>
std::vector<C> random_complex(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<C> v(n);
  for (auto& x : v) x = C{static_cast<PartOf<C>>(u(rng)), static_cast<PartOf<C>>(u(rng))};
  return v;
}

// |got - want| / (2 (K + 1) eps * mag), the complex form of the classical bound: each part of an
// accurate complex product is off by at most (K + 1) eps * sum |a| |b| (the real and imaginary
// sums of K products each, and their combination). want and mag in long double.
template <class C>
double complex_ratio(const C& got, long double want_re, long double want_im, long double mag, std::int64_t k) {
  if (std::isnan(got.re) || std::isnan(got.im)) return std::numeric_limits<double>::infinity();
  const long double err = std::hypot(static_cast<long double>(got.re) - want_re, static_cast<long double>(got.im) - want_im);
  const long double bound = 2.0L * (k + 1) * std::numeric_limits<PartOf<C>>::epsilon() * mag + 1e-300L;
  return static_cast<double>(err / bound);
}

// The complex micro-kernel on every edge tile (m <= mr, n <= nr), k around the unrolling, both
// store modes, against a long double sum; the tile sits in a poisoned matrix whose other
// entries must stay untouched.
template <class C>
void check_complex_micro_kernel(const GemmConfig<C>& cfg) {
  if (!cfg.ukernel) GTEST_SKIP() << "this kernel set has no complex kernels";
  SCOPED_TRACE(cfg.kernel);
  std::mt19937 rng(43);
  const int mr = cfg.mr, nr = cfg.nr;
  const C poison{PartOf<C>(-777), PartOf<C>(-555)};
  for (std::int64_t k : {1, 2, 3, 5, 64, 259}) {
    auto a = random_complex<C>(mr * k, rng), b = random_complex<C>(k * nr, rng);
    for (int m = 1; m <= mr; ++m)
      for (int n = 1; n <= nr; ++n)
        for (bool accumulate : {false, true}) {
          auto ap = a, bp = b;  // zero-padded beyond the edge, as the packers leave them
          for (std::int64_t p = 0; p < k; ++p) {
            for (int i = m; i < mr; ++i) ap[p * mr + i] = C{0, 0};
            for (int j = n; j < nr; ++j) bp[p * nr + j] = C{0, 0};
          }
          const std::int64_t ldc = nr + 5, rows = mr + 2;
          std::vector<C> c(rows * ldc + 8, poison);
          auto init = [](int i, int j) { return C{PartOf<C>(0.5 * (i - j)), PartOf<C>(0.25 * (i + j + 1))}; };
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) c[(i + 1) * ldc + 2 + j] = accumulate ? init(i, j) : C{PartOf<C>(NAN), PartOf<C>(NAN)};
          cfg.ukernel(k, ap.data(), bp.data(), c.data() + ldc + 2, ldc, m, n, accumulate);
          for (std::size_t x = 0; x < c.size(); ++x) {
            const std::int64_t i = static_cast<std::int64_t>(x) / ldc - 1, j = static_cast<std::int64_t>(x) % ldc - 2;
            if (!(i >= 0 && i < m && j >= 0 && j < n)) {
              ASSERT_TRUE(c[x].re == poison.re && c[x].im == poison.im)
                  << "wrote outside the tile at (" << i << ", " << j << ") for m=" << m << " n=" << n << " k=" << k;
              continue;
            }
            long double re = 0, im = 0, mag = 0;
            if (accumulate) {
              const C z = init(static_cast<int>(i), static_cast<int>(j));
              re = z.re, im = z.im, mag = std::hypot(static_cast<long double>(z.re), static_cast<long double>(z.im));
            }
            for (std::int64_t p = 0; p < k; ++p) {
              const C u = ap[p * mr + i], v = bp[p * nr + j];
              re += static_cast<long double>(u.re) * v.re - static_cast<long double>(u.im) * v.im;
              im += static_cast<long double>(u.re) * v.im + static_cast<long double>(u.im) * v.re;
              mag += std::hypot(static_cast<long double>(u.re), static_cast<long double>(u.im)) *
                     std::hypot(static_cast<long double>(v.re), static_cast<long double>(v.im));
            }
            ASSERT_LE(complex_ratio(c[x], re, im, mag, k), 1.0)
                << "m=" << m << " n=" << n << " k=" << k << " acc=" << accumulate << " at (" << i << ", " << j << ")";
          }
        }
  }
}

// c = a @ b through the driver with a complex cfg: a and b row- or column-major with slack and an
// offset, c with padding columns that must stay untouched; the worst error ratio (<= 1: accurate).
template <class C>
double run_complex_driver(const GemmConfig<C>& cfg, std::int64_t m, std::int64_t k, std::int64_t n, bool a_col,
                          bool b_col, int threads, std::mt19937& rng, double min_flops_per_thread) {
  const std::int64_t lda = (a_col ? m : k) + 3, ldb = (b_col ? k : n) + 1, ldc = n + 2, off = 5;
  auto a = random_complex<C>(off + lda * (a_col ? k : m), rng);
  auto b = random_complex<C>(off + ldb * (b_col ? n : k), rng);
  std::vector<C> c(m * ldc, C{PartOf<C>(NAN), PartOf<C>(NAN)});
  portmat::core::HostMatrix ha{a.data(), off, m, k, lda, a_col, complex_dtype<C>()};
  portmat::core::HostMatrix hb{b.data(), off, k, n, ldb, b_col, complex_dtype<C>()};
  portmat::cpu::gemm(cfg, ha, hb, c.data(), ldc, threads, min_flops_per_thread);
  auto modulus = [](const std::vector<C>& v) {
    std::vector<long double> r(v.size());
    for (std::size_t x = 0; x < v.size(); ++x) r[x] = std::hypot(static_cast<long double>(v[x].re), static_cast<long double>(v[x].im));
    return r;
  };
  const auto abs_a = modulus(a), abs_b = modulus(b);
  double worst = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = n; j < ldc; ++j)
      if (!std::isnan(c[i * ldc + j].re)) return std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < n; ++j) {
      long double re = 0, im = 0, mag = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const std::int64_t ia = off + (a_col ? p * lda + i : i * lda + p), ib = off + (b_col ? j * ldb + p : p * ldb + j);
        const C u = a[ia], v = b[ib];
        re += static_cast<long double>(u.re) * v.re - static_cast<long double>(u.im) * v.im;
        im += static_cast<long double>(u.re) * v.im + static_cast<long double>(u.im) * v.re;
        mag += abs_a[ia] * abs_b[ib];
      }
      worst = std::max(worst, complex_ratio(c[i * ldc + j], re, im, mag, k));
    }
  }
  return worst;
}

// The driver on a complex kernel with small blocks (every loop several times, runts at every
// level), both loop orders, every remainder of the tile in M and in N, K across several kc
// blocks, both layouts of a and b, 1-4 threads; then the table's own blocks on products large
// enough for several threads, and split_k's long K.
template <class C>
void check_complex_driver(GemmConfig<C> cfg) {
  if (!cfg.ukernel) GTEST_SKIP() << "this kernel set has no complex kernels";
  SCOPED_TRACE(cfg.kernel);
  std::mt19937 rng(8);
  const GemmConfig<C> table = cfg;
  cfg.mc = 2 * cfg.mr, cfg.kc = 16, cfg.nc = 2 * cfg.nr;
  const int mr = cfg.mr, nr = cfg.nr;
  std::vector<std::tuple<int, int, int>> shapes = {{1, 1, 1}, {5, 3, 2}, {3 * mr, 48, 5 * nr + 3}, {70, 40, 1}, {1, 50, 90}};
  for (int r = 0; r <= mr; ++r) shapes.emplace_back(2 * mr + r, 33, 2 * nr + 1);
  for (int r = 0; r <= nr; ++r) shapes.emplace_back(mr + 1, 17, 2 * nr + r);
  for (bool a_outer : {false, true}) {
    cfg.a_outer = a_outer;
    for (auto [m, k, n] : shapes)
      for (int threads : {1, 2, 3, 4})
        for (bool a_col : {false, true})
          for (bool b_col : {false, true})
            EXPECT_LE(run_complex_driver<C>(cfg, m, k, n, a_col, b_col, threads, rng, 0.0), 1.0)
                << m << "x" << k << "x" << n << " threads=" << threads << " a_col=" << a_col << " b_col=" << b_col
                << " a_outer=" << a_outer;
  }
  for (bool a_outer : {false, true}) {
    cfg = table;
    cfg.a_outer ^= a_outer;
    for (auto [m, k, n] : {std::tuple{301, 517, 263}, {64, 700, 500}})
      EXPECT_LE(run_complex_driver<C>(cfg, m, k, n, false, a_outer, 2, rng, portmat::cpu::kMinFlopsPerThread), 1.0)
          << m << "x" << k << "x" << n << " a_outer=" << cfg.a_outer;
  }
  for (auto [m, k, n] : {std::tuple{30, 3001, 33}, {7, 2000, 17}})  // split_k (M <= mc, N <= nc)
    for (bool b_col : {false, true})
      EXPECT_LE(run_complex_driver<C>(table, m, k, n, false, b_col, 3, rng, 0.0), 1.0)
          << m << "x" << k << "x" << n << " b_col=" << b_col;
}

}  // namespace

// A matrix times a few columns and a few rows times a matrix, the matrix at every element offset
// from a 64-byte line and allocated to its last element (the skinny kernels align their vector
// loops to the lines and read the elements around them as whole vectors: under ASan a read past a
// row's end is reported), against a float64 sum.
template <class T>
void check_skinny_line_offsets() {
  const int lanes = 64 / static_cast<int>(sizeof(T));
  const DType dt = sizeof(T) == 4 ? DType::f32 : DType::f64;
  const std::int64_t M = 37;
  for (int off = 0; off < lanes; ++off)
    for (std::int64_t K : {64, 160, 200, 1024})
      for (std::int64_t ns : {1, 2, 4}) {
        void* raw = nullptr;
        ASSERT_EQ(posix_memalign(&raw, 64, (off + M * K) * sizeof(T)), 0);
        T* L = static_cast<T*>(raw) + off;
        for (std::int64_t i = 0; i < M * K; ++i) L[i] = T((i * 7 % 13) - 6) / T(8);
        std::vector<T> s(K * ns), x(ns * M), c(M * ns), c2(ns * K);
        for (std::int64_t i = 0; i < K * ns; ++i) s[i] = T((i * 5 % 11) - 5) / T(4);
        for (std::int64_t i = 0; i < ns * M; ++i) x[i] = T((i * 3 % 7) - 3) / T(2);
        MatrixView a{L, M, K, K, 1, dt}, b{s.data(), K, ns, ns, 1, dt}, cv{c.data(), M, ns, ns, 1, dt};
        portmat::matmul(a, b, cv, "cpu:0");  // dots along L's rows
        MatrixView xa{x.data(), ns, M, M, 1, dt}, lb{L, M, K, K, 1, dt}, c2v{c2.data(), ns, K, K, 1, dt};
        portmat::matmul(xa, lb, c2v, "cpu:0");  // axpy along L's rows
        // Every product is a multiple of 1/32 and every sum below 2^10 in size: exact in both types.
        for (std::int64_t i = 0; i < M; ++i)
          for (std::int64_t j = 0; j < ns; ++j) {
            double want = 0;
            for (std::int64_t k = 0; k < K; ++k) want += double(L[i * K + k]) * s[k * ns + j];
            ASSERT_EQ(double(c[i * ns + j]), want) << "offset " << off << " K " << K << " ns " << ns;
          }
        for (std::int64_t i = 0; i < ns; ++i)
          for (std::int64_t j = 0; j < K; ++j) {
            double want = 0;
            for (std::int64_t k = 0; k < M; ++k) want += double(x[i * M + k]) * L[k * K + j];
            ASSERT_EQ(double(c2[i * K + j]), want) << "offset " << off << " K " << K << " ns " << ns;
          }
        std::free(raw);
      }
}
TEST(CpuSkinny, EveryLineOffsetFloat32) { check_skinny_line_offsets<float>(); }
TEST(CpuSkinny, EveryLineOffsetFloat64) { check_skinny_line_offsets<double>(); }
TEST(CpuSkinny, EveryLayoutSizeAndThreadCountFloat32) { check_skinny<float>(); }
TEST(CpuSkinny, EveryLayoutSizeAndThreadCountFloat64) { check_skinny<double>(); }
TEST(CpuSkinny, EveryLayoutSizeAndThreadCountUint32) { check_skinny<std::uint32_t>(); }
TEST(CpuSkinny, EveryLayoutSizeAndThreadCountUint64) { check_skinny<std::uint64_t>(); }

// Boolean products (boolean.hpp): every pair of layouts, densities from none to all (so that rows
// stop early, late and never), bytes other than 0 and 1, shapes that reach the rows kernel on c
// and on c^T, the dots kernel and the copies before it, outputs wider than a part; 1 and 3
// threads; the result's padding untouched.
TEST(CpuBoolean, EveryLayoutDensityAndThreadCount) {
  std::mt19937 rng(11);
  const std::uint8_t poison = 0x5a;
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {1, 300, 200}, {3, 100, 70}, {200, 300, 1}, {70, 100, 5},
                         {130, 257, 97}, {5, 1000, 3}, {2, 5000, 300}, {40, 70, 4100}, {4100, 70, 40},
                         {64, 17, 64}, {300, 300, 300}})
    for (double density : {0.0, 0.003, 0.5, 1.0})
      for (bool a_col : {false, true})
        for (bool b_col : {false, true})
          for (int threads : {1, 3}) {
            const std::int64_t lda = (a_col ? m : k) + 2, ldb = (b_col ? k : n) + 3, ldc = n + 1, off = 3;
            // a at `density`, b at its complement's (dense against sparse), bytes 1-255 for true
            auto fill = [&](std::size_t count, double p) {
              std::vector<std::uint8_t> v(count);
              for (auto& x : v) x = (rng() % 1000) < p * 1000 ? static_cast<std::uint8_t>(1 + rng() % 255) : 0;
              return v;
            };
            const auto a = fill(off + lda * (a_col ? k : m), density);
            const auto b = fill(off + ldb * (b_col ? n : k), density == 0.5 ? 0.5 : 1.0 - density);
            std::vector<std::uint8_t> c(m * ldc, poison);
            portmat::core::HostMatrix ha{a.data(), off, m, k, lda, a_col, portmat::DType::boolean};
            portmat::core::HostMatrix hb{b.data(), off, k, n, ldb, b_col, portmat::DType::boolean};
            portmat::cpu::boolean_gemm(ha, hb, c.data(), ldc, threads);
            for (std::int64_t i = 0; i < m; ++i) {
              ASSERT_EQ(c[i * ldc + n], poison) << "padding written";
              for (std::int64_t j = 0; j < n; ++j) {
                std::uint8_t want = 0;
                for (std::int64_t q = 0; q < k && !want; ++q)
                  want = a[off + (a_col ? q * lda + i : i * lda + q)] && b[off + (b_col ? j * ldb + q : q * ldb + j)];
                ASSERT_EQ(c[i * ldc + j], want) << m << "x" << k << "x" << n << " density=" << density
                                                << " a_col=" << a_col << " b_col=" << b_col << " threads=" << threads
                                                << " at " << i << "," << j;
              }
            }
          }
}
// Small products with b at every element offset from a 64-byte line, its rows a whole number of
// vectors long so that they all share the offset: AVX-512's 4-vector strips are then copied to
// aligned memory (small.cpp, kMisalignedCopyMinRows) and read from the copy, the 1- and 2-vector
// ones read in place. Rows that fill one tile, two and many (several parts and blocks), strips of
// 1, 2 and 4 vectors and columns past them, 1-3 threads; b allocated to its last element (ASan
// reports a read past it), exact sums.
template <class T>
void check_small_line_offsets() {
  const int lanes = 64 / static_cast<int>(sizeof(T));
  const DType dt = sizeof(T) == 4 ? DType::f32 : DType::f64;
  for (int off = 0; off < lanes; ++off)
    for (auto [m, k, n] : {std::tuple{12, 40, 64}, {13, 7, 4 * 16}, {40, 64, 128}, {130, 33, 256}, {64, 200, 96},
                           {25, 1, 48}, {200, 100, 64}})
      for (int threads : {1, 2, 3}) {
        const std::int64_t ldb = (n + lanes - 1) / lanes * lanes;  // rows of whole lines
        void* raw = nullptr;
        ASSERT_EQ(posix_memalign(&raw, 64, (off + (k - 1) * ldb + n) * sizeof(T)), 0);
        T* b = static_cast<T*>(raw) + off;
        for (std::int64_t i = 0; i < (k - 1) * ldb + n; ++i) b[i] = T((i * 5 % 11) - 5) / T(4);
        std::vector<T> a(m * k), c(m * n, T(-7));
        for (std::int64_t i = 0; i < m * k; ++i) a[i] = T((i * 7 % 13) - 6) / T(8);
        portmat::core::HostMatrix ha{a.data(), 0, m, k, k, false, dt};
        portmat::core::HostMatrix hb{b, 0, k, n, ldb, false, dt};
        ASSERT_TRUE(portmat::cpu::small_gemm<T>(ha, hb, c.data(), n, threads)) << m << "x" << k << "x" << n;
        // Every product is a multiple of 1/32 and every sum below 2^10 in size: exact in both types.
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j) {
            double want = 0;
            for (std::int64_t q = 0; q < k; ++q) want += double(a[i * k + q]) * b[q * ldb + j];
            ASSERT_EQ(double(c[i * n + j]), want) << m << "x" << k << "x" << n << " offset " << off << " threads "
                                                  << threads << " at " << i << "," << j;
          }
        std::free(raw);
      }
}
TEST(CpuSmall, EveryLineOffsetOfBFloat32) { check_small_line_offsets<float>(); }
TEST(CpuSmall, EveryLineOffsetOfBFloat64) { check_small_line_offsets<double>(); }

// The size limit in use (small.hpp, small_elements): the base one, or the larger one exactly where
// the small path runs AVX-512 tiles on a core with half-rate 512-bit FMAs; products up to it are
// taken (a 256^3 and an oblong one past the base limit, checked against the reference where this
// CPU takes them), products past it are not.
TEST(CpuSmall, SizeLimitFollowsTheCore) {
  const std::int64_t limit = portmat::cpu::small_elements();
  if (!std::getenv("PORTMAT_CPU_SMALL_ELEMENTS")) {
    const bool wide = std::string(portmat::cpu::active_kernel_set().isa) == "avx512";
    EXPECT_EQ(limit, wide && portmat::cpu::wide_fma_at_half_rate() ? portmat::cpu::kSmallElementsHalfRate
                                                                   : portmat::cpu::kSmallElements);
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) EXPECT_FALSE(portmat::cpu::wide_fma_at_half_rate());
#else
  EXPECT_FALSE(portmat::cpu::wide_fma_at_half_rate());
#endif
  // 256^3 float32: by its elements, or by its b (rows of 1 KiB, 256 KiB in all) where b may be wide
  const bool b_fits = 256 * 4 <= portmat::cpu::narrow_b_bytes() && 256 * 256 * 4 <= portmat::cpu::small_b_bytes();
  EXPECT_EQ(portmat::cpu::small_shape(256, 256, 256, 4), limit >= 3 * 256 * 256 || b_fits);
  EXPECT_FALSE(portmat::cpu::small_shape(600, 600, 600, 4));
  // On several threads: never below the one-thread limit, growing with the threads, never past
  // kSmallElementsHalfRate unless set; on full-rate AVX-512 cores 2^17 a thread.
  EXPECT_EQ(portmat::cpu::small_elements(1), limit);
  for (int threads : {2, 3, 8, 16, 64}) {
    const std::int64_t t_limit = portmat::cpu::small_elements(threads);
    EXPECT_GE(t_limit, portmat::cpu::small_elements(threads - 1));
    EXPECT_EQ(portmat::cpu::small_shape(256, 256, 256, 4, threads), t_limit >= 3 * 256 * 256 || b_fits);
    if (std::getenv("PORTMAT_CPU_SMALL_ELEMENTS")) {
      EXPECT_EQ(t_limit, limit);
    } else if (t_limit != limit) {
      EXPECT_EQ(std::string(portmat::cpu::active_kernel_set().isa), "avx512");
      EXPECT_EQ(t_limit, std::min(portmat::cpu::kSmallElementsPerThread * threads, portmat::cpu::kSmallElementsHalfRate));
    }
  }
  EXPECT_FALSE(portmat::cpu::small_shape(600, 600, 600, 4, 64));
  std::mt19937 rng(11);
  for (auto [m, k, n] : {std::tuple{256, 256, 256}, {100, 1000, 170}}) {
    if (m * k + k * n + m * n > limit) continue;
    for (int threads : {1, 2}) {
      auto a = random_vector<float>(m * k, rng);
      auto b = random_vector<float>(k * n, rng);
      std::vector<float> c(m * n);
      portmat::core::HostMatrix ha{a.data(), 0, m, k, k, false, DType::f32};
      portmat::core::HostMatrix hb{b.data(), 0, k, n, n, false, DType::f32};
      ASSERT_TRUE(portmat::cpu::small_gemm<float>(ha, hb, c.data(), n, threads));
      MatrixView va{a.data(), m, k, k, 1, DType::f32};
      MatrixView vb{b.data(), k, n, n, 1, DType::f32};
      MatrixView vc{c.data(), m, n, n, 1, DType::f32};
      EXPECT_LE(portmat::reference::worst_error_ratio(va, vb, vc), 1.0) << m << "x" << k << "x" << n;
    }
  }
}

// Fewer register tiles than threads and a long K: the threads split K into slices (small.cpp,
// small_gemm_sliced). Blocks by rows and by columns, remainders of every kind, both dtypes; within
// the reference's bound on every thread count, and the same bits on a second run.
template <class T>
void check_small_long_k() {
  std::mt19937 rng(17);
  constexpr DType dt = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  int taken = 0;
  for (auto [m, k, n] : {std::tuple{16, 65536, 16}, {5, 4096, 16}, {6, 3001, 7}, {1, 2500, 16}, {13, 2048, 32},
                         {3, 4097, 64}, {7, 2049, 3}}) {
    if (!portmat::cpu::small_shape(m, k, n, sizeof(T))) continue;
    ++taken;
    auto a = random_vector<T>(static_cast<std::size_t>(m) * k, rng);
    auto b = random_vector<T>(static_cast<std::size_t>(k) * n, rng);
    portmat::core::HostMatrix ha{a.data(), 0, m, k, k, false, dt};
    portmat::core::HostMatrix hb{b.data(), 0, k, n, n, false, dt};
    MatrixView va{a.data(), m, k, k, 1, dt};
    MatrixView vb{b.data(), k, n, n, 1, dt};
    for (int threads : {1, 2, 3, 8}) {
      std::vector<T> c(static_cast<std::size_t>(m) * n, T(-7)), again(c.size(), T(-9));
      ASSERT_TRUE(portmat::cpu::small_gemm<T>(ha, hb, c.data(), n, threads));
      ASSERT_TRUE(portmat::cpu::small_gemm<T>(ha, hb, again.data(), n, threads));
      MatrixView vc{c.data(), m, n, n, 1, dt};
      EXPECT_LE(portmat::reference::worst_error_ratio(va, vb, vc), 1.0) << m << "x" << k << "x" << n << " on " << threads;
      EXPECT_EQ(std::memcmp(c.data(), again.data(), c.size() * sizeof(T)), 0) << m << "x" << k << "x" << n;
    }
  }
  EXPECT_GE(taken, 3);  // the slices are exercised, whatever the size limit
}

TEST(CpuSmall, LongKSplitIntoSlicesFloat32) { check_small_long_k<float>(); }
TEST(CpuSmall, LongKSplitIntoSlicesFloat64) { check_small_long_k<double>(); }

TEST(CpuSmall, EveryTileRemainderFloat32) { check_small<float>(); }
TEST(CpuSmall, EveryTileRemainderFloat64) { check_small<double>(); }

class KernelSets : public ::testing::TestWithParam<std::string> {
 protected:
  const KernelSet& set() const {
    for (const auto& s : portmat::cpu::supported_kernel_sets())
      if (GetParam() == s.isa) return s;
    throw std::logic_error("no such kernel set");
  }
};

TEST_P(KernelSets, MicroKernelFloat32EveryEdgeTile) { check_micro_kernel(set().f32); }
TEST_P(KernelSets, MicroKernelFloat64EveryEdgeTile) { check_micro_kernel(set().f64); }
TEST_P(KernelSets, DirectAKernelFloat32) { check_direct_a_kernel(set().f32); }
TEST_P(KernelSets, DirectAKernelFloat64) { check_direct_a_kernel(set().f64); }
TEST_P(KernelSets, PrefetchingKernelsFloat32) { check_prefetching_kernels(set().f32); }
TEST_P(KernelSets, PackAFloat32EveryEdgePanel) { check_pack_a(set().f32); }
TEST_P(KernelSets, PackAFloat64EveryEdgePanel) { check_pack_a(set().f64); }
TEST_P(KernelSets, PackBComplexFloat32IsBDoublePrime) { check_pack_b_complex(set().f32); }
TEST_P(KernelSets, PackBComplexFloat64IsBDoublePrime) { check_pack_b_complex(set().f64); }
TEST_P(KernelSets, DriverIntegers) {
  check_driver_integers(set().u32, false);
  check_driver_integers(set().u64, false);
  check_driver_integers(set().u64, true);
  check_driver_integers(set().u64_narrow, true);  // only for narrow operands
}
TEST_P(KernelSets, ComplexMicroKernelComplex64EveryEdgeTile) { check_complex_micro_kernel(set().c64); }
TEST_P(KernelSets, ComplexMicroKernelComplex128EveryEdgeTile) { check_complex_micro_kernel(set().c128); }
TEST_P(KernelSets, ComplexDriverComplex64) { check_complex_driver(set().c64); }
TEST_P(KernelSets, ComplexDriverComplex128) { check_complex_driver(set().c128); }
TEST_P(KernelSets, DriverFloat32) { check_driver(set().f32); }
TEST_P(KernelSets, DriverFloat64) { check_driver(set().f64); }

TEST_P(KernelSets, DriverThreadsLargeProducts) {
  // Big enough for the driver to use several threads with the table's own block sizes.
  // Both loop orders: the table's, and the other one at the same block sizes.
  std::mt19937 rng(3);
  for (bool flip : {false, true}) {
    auto f32 = set().f32;
    auto f64 = set().f64;
    f32.a_outer ^= flip, f64.a_outer ^= flip;
    for (int threads : {2, 3})
      for (auto [m, k, n] : {std::tuple{301, 517, 263}, {64, 1000, 700}, {700, 300, 40}})
        EXPECT_LE(run_driver<float>(f32, m, k, n, false, false, threads, rng), 1.0)
            << m << "x" << k << "x" << n << " a_outer=" << f32.a_outer;
    EXPECT_LE(run_driver<double>(f64, 257, 400, 300, true, false, 2, rng), 1.0);
  }
}

TEST_P(KernelSets, DriverSplitK) {
  // One block of C (M <= mc, N <= nc), small, and a long K: the driver splits K between threads
  // (split_k), each summing its chunks into a partial sum of its own. Every layout, 2 and 3
  // threads, K not a multiple of kc; N = 200 makes a B block too big to prefetch at AVX-512's kc,
  // so the parts run at half of it (split_k_part_config) there.
  std::mt19937 rng(5);
  for (int threads : {2, 3})
    for (bool a_col : {false, true})
      for (bool b_col : {false, true}) {
        for (auto [m, k, n] : {std::tuple{64, 5000, 100}, {7, 3001, 33}, {1, 4099, 17}, {20, 5000, 200}})
          EXPECT_LE(run_driver<float>(set().f32, m, k, n, a_col, b_col, threads, rng, 0.0, "split_k"), 1.0)
              << m << "x" << k << "x" << n << " threads " << threads << " a_col " << a_col << " b_col " << b_col;
        for (auto [m, k, n] : {std::tuple{30, 4000, 50}, {20, 4000, 200}})
          EXPECT_LE(run_driver<double>(set().f64, m, k, n, a_col, b_col, threads, rng, 0.0, "split_k"), 1.0)
              << m << "x" << k << "x" << n << " threads " << threads << " a_col " << a_col << " b_col " << b_col;
      }
}

template <class T>
void check_driver_split_n(const GemmConfig<T>& table) {
  SCOPED_TRACE(table.kernel);
  std::mt19937 rng(17);
  // Few rows, one kc block of K and a wide b: threads take column chunks, each a single-threaded
  // plan with B blocks in its L2 (split_n). Every layout, 2 and 3 threads, rows and columns off
  // the tiles and chunks, K below kc (where a set's kc is shorter, any plan, checked alike).
  for (bool a_col : {false, true})
    for (bool b_col : {false, true})
      for (auto [m, k, n, threads] : {std::tuple{40, 250, 3500, 2}, {13, 200, 4001, 3}})
        EXPECT_LE(run_driver<T>(table, m, k, n, a_col, b_col, threads, rng, 0.0, table.kc >= k ? "split_n" : nullptr),
                  1.0)
            << m << "x" << k << "x" << n << " threads " << threads << " a_col " << a_col << " b_col " << b_col;
}
TEST_P(KernelSets, DriverSplitNFloat32) { check_driver_split_n(set().f32); }
TEST_P(KernelSets, DriverSplitNFloat64) { check_driver_split_n(set().f64); }

// Plans on one thread with the table's blocks read a row-major a in place where the kernel has a
// direct-A form and A meets few B blocks (gemm_driver.cpp, direct_a): rows off the tile (an edge
// panel packed beside the panels read in place), several kc blocks, a sliced a (offset, padded
// leading dimension), either layout of b; and the parts of split_k and split_n, which are such plans.
template <class T>
void check_driver_direct_a(const GemmConfig<T>& table) {
  SCOPED_TRACE(table.kernel);
  std::mt19937 rng(29);
  for (bool b_col : {false, true}) {
    for (auto [m, k, n] : {std::tuple{300, 1100, 600}, {14, 70, 33}, {29, 513, 1000}})
      EXPECT_LE(run_driver<T>(table, m, k, n, false, b_col, 1, rng), 1.0) << m << "x" << k << "x" << n << " b_col " << b_col;
    EXPECT_LE(run_driver<T>(table, 40, 250, 3500, false, b_col, 2, rng, 0.0), 1.0) << "split_n b_col " << b_col;
    EXPECT_LE(run_driver<T>(table, 64, 9000, 64, false, b_col, 2, rng), 1.0) << "split_k b_col " << b_col;
  }
}
TEST_P(KernelSets, DriverDirectAFloat32) { check_driver_direct_a(set().f32); }
TEST_P(KernelSets, DriverDirectAFloat64) { check_driver_direct_a(set().f64); }

template <class T>
void check_driver_split_m(const GemmConfig<T>& table) {
  SCOPED_TRACE(table.kernel);
  std::mt19937 rng(23);
  // One step (a single block of each operand) and at least 256 rows a thread past the first:
  // threads take halves (thirds) of c's rows, each a single-threaded plan packing all of B
  // (split_m). Every layout, 2 and 3 threads, rows off the tiles. Where a set's blocks make it
  // more than one step, any plan, checked alike.
  for (bool a_col : {false, true})
    for (bool b_col : {false, true})
      for (auto [m, k, n, threads] : {std::tuple{259, 150, 77, 2}, {515, 61, 250, 3}}) {
        const bool one_step = m <= table.mc && k <= table.kc && n <= table.nc;
        EXPECT_LE(run_driver<T>(table, m, k, n, a_col, b_col, threads, rng, 0.0, one_step ? "split_m" : nullptr), 1.0)
            << m << "x" << k << "x" << n << " threads " << threads << " a_col " << a_col << " b_col " << b_col;
      }
  // A short K and a large c, with the default work per thread: threads by c's bytes (make_plan).
  for (auto [m, k, n, threads] : {std::tuple{1024, 2, 1000, 2}, {700, 3, 901, 3}, {300, 1, 2000, 2}})
    EXPECT_LE(run_driver<T>(table, m, k, n, false, false, threads, rng), 1.0) << m << "x" << k << "x" << n;
}
TEST_P(KernelSets, DriverSplitMFloat32) { check_driver_split_m(set().f32); }
TEST_P(KernelSets, DriverSplitMFloat64) { check_driver_split_m(set().f64); }

template <class T>
void check_driver_split_cols(const GemmConfig<T>& table) {
  SCOPED_TRACE(table.kernel);
  std::mt19937 rng(31);
  // A few steps of the table's blocks (two kc blocks of K, three nc blocks of N, one block of
  // rows): where the set reads a row-major a in place (A outer, a direct-A kernel), threads claim
  // column blocks and groups of rows of them (split_cols), an edge panel of rows packed; 2 and 3
  // threads, both layouts of b, a sliced a (run_driver's offset and padded leading dimension). A
  // column-major a, or a set without the direct kernel, runs another plan, checked alike.
  const long m = 10 * table.mr + 5, k = table.kc + table.kc / 2 + 3, n = 2 * table.nc + table.nc / 2 + 7;
  const bool in_place = table.a_outer && table.ukernel_direct_a;
  for (int threads : {2, 3})
    for (bool a_col : {false, true})
      for (bool b_col : {false, true})
        EXPECT_LE(run_driver<T>(table, m, k, n, a_col, b_col, threads, rng, 0.0,
                                in_place && !a_col ? "split_cols" : nullptr),
                  1.0)
            << m << "x" << k << "x" << n << " threads " << threads << " a_col " << a_col << " b_col " << b_col;
  // A few rows of c (at most 8 micro-panels): make_plan widens their B blocks to megabytes, and
  // they stay on the blocked plan, which pipelines them.
  EXPECT_LE(run_driver<T>(table, 5 * table.mr, k, 20 * table.nc, false, false, 2, rng, 0.0, in_place ? "blocked" : nullptr),
            1.0);
}
TEST_P(KernelSets, DriverSplitColsFloat32) { check_driver_split_cols(set().f32); }
TEST_P(KernelSets, DriverSplitColsFloat64) { check_driver_split_cols(set().f64); }

template <class T>
void check_driver_rows_crowding_l1(const GemmConfig<T>& table) {
  SCOPED_TRACE(table.kernel);
  // a's rows 4 KiB apart put all of a direct-A kernel's mr rows in one L1 set: on an 8-way L1
  // (Zen 4's) the driver then packs them (single-thread plans) or copies them a line apart
  // (split_cols); on a 12-way one (the Xeon's) it reads them in place. Both geometries, set as the
  // driver's, on every kernel set: the plans that would read a in place, right either way.
  using portmat::cpu::a_rows_crowd_l1;
  const std::int64_t per_4k = 4096 / static_cast<std::int64_t>(sizeof(T));
  auto crowding_ld = [&](std::int64_t k) { return (k + per_4k - 1) / per_4k * per_4k; };  // >= k
  for (int ways : {8, 12}) {
    portmat::cpu::set_l1_geometry({64, 64, ways});
    const bool crowded = table.mr > ways + 2;
    EXPECT_EQ(a_rows_crowd_l1(per_4k, sizeof(T), table.mr), crowded) << ways << " ways";
    EXPECT_EQ(a_rows_crowd_l1(4 * per_4k, sizeof(T), table.mr), crowded) << ways << " ways";
    EXPECT_FALSE(a_rows_crowd_l1(per_4k + 64 / static_cast<std::int64_t>(sizeof(T)), sizeof(T), table.mr));
    std::mt19937 rng(41 + ways);
    const bool in_place = table.a_outer && table.ukernel_direct_a;
    const long m = 10 * table.mr + 5, k = table.kc + table.kc / 2 + 3, n = 2 * table.nc + table.nc / 2 + 7;
    for (int threads : {2, 3})
      EXPECT_LE(run_driver<T>(table, m, k, n, false, false, threads, rng, 0.0, in_place ? "split_cols" : nullptr,
                              crowding_ld(k)),
                1.0)
          << ways << " ways, threads " << threads;
    // One thread, a few B blocks (Plan::direct_a where a's rows leave room).
    for (std::int64_t k1 : {2 * table.kc + 5, std::int64_t{700}})
      EXPECT_LE(run_driver<T>(table, 3 * table.mr + 2, k1, table.nc + 9, false, k1 == 700, 1, rng, 0.0, nullptr,
                              crowding_ld(k1)),
                1.0)
          << ways << " ways, k " << k1;
  }
  portmat::cpu::set_l1_geometry({0, 0, 0});  // the detected one again
}
TEST_P(KernelSets, DriverRowsCrowdingL1Float32) { check_driver_rows_crowding_l1(set().f32); }
TEST_P(KernelSets, DriverRowsCrowdingL1Float64) { check_driver_rows_crowding_l1(set().f64); }

TEST_P(KernelSets, DriverPipelineFewRowsAndShortK) {
  // One step per outer block with the table's block sizes (few rows against many kc blocks of a
  // wide b, or a short k against several nc blocks): make_plan double-buffers the outer block and
  // the last thread packs the next one while the others compute (Plan::pipeline). Every layout,
  // 2 and 3 threads, rows that fill and do not fill the tiles, runt blocks.
  std::mt19937 rng(11);
  for (int threads : {2, 3})
    for (bool a_col : {false, true})
      for (bool b_col : {false, true}) {
        for (auto [m, k, n] : {std::tuple{16, 1300, 901}, {5, 1027, 333}, {17, 700, 1100}, {64, 40, 30000}})
          EXPECT_LE(run_driver<float>(set().f32, m, k, n, a_col, b_col, threads, rng, 0.0), 1.0)
              << m << "x" << k << "x" << n << " threads " << threads << " a_col " << a_col << " b_col " << b_col;
        for (auto [m, k, n] : {std::tuple{8, 1100, 500}, {13, 30, 40001}})
          EXPECT_LE(run_driver<double>(set().f64, m, k, n, a_col, b_col, threads, rng, 0.0), 1.0)
              << m << "x" << k << "x" << n << " threads " << threads << " a_col " << a_col << " b_col " << b_col;
      }
}

INSTANTIATE_TEST_SUITE_P(Cpu, KernelSets, ::testing::ValuesIn([] {
                           std::vector<std::string> isas;
                           for (const auto& s : portmat::cpu::supported_kernel_sets())
                             isas.push_back(s.isa);
                           return isas;
                         }()),
                         [](const auto& info) { return info.param; });

TEST(CpuThreadPool, HomeRangesRunEveryPartOnce) {
  // run_parts_homed: every part exactly once, whatever the threads (more than the parts, one, more
  // than the CPUs), and from several callers at once (they queue for the pool).
  auto check = [](std::int64_t parts, int threads) {
    std::vector<std::atomic<int>> runs(static_cast<std::size_t>(parts));
    for (auto& r : runs) r.store(0);
    portmat::cpu::run_parts_homed(parts, threads, [&](std::int64_t p) {
      ASSERT_GE(p, 0);
      ASSERT_LT(p, parts);
      runs[static_cast<std::size_t>(p)].fetch_add(1);
    });
    for (std::int64_t p = 0; p < parts; ++p) EXPECT_EQ(runs[static_cast<std::size_t>(p)].load(), 1) << parts << " parts, " << threads << " threads, part " << p;
  };
  for (std::int64_t parts : {0, 1, 2, 3, 7, 64, 1001})
    for (int threads : {1, 2, 3, 8, 33}) check(parts, threads);
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&check, t] {
      for (int r = 0; r < 50; ++r) check(97 + t * 13 + r, 2 + (r + t) % 4);
    });
  for (auto& c : callers) c.join();
}

TEST(CpuThreadPool, HomeRangesOnOneThreadInOrder) {
  std::vector<std::int64_t> order;
  portmat::cpu::run_parts_homed(9, 1, [&](std::int64_t p) { order.push_back(p); });
  EXPECT_EQ(order, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(CpuDevice, IsListedWithItsInfo) {
  const auto info = portmat::find_device("cpu:0");
  EXPECT_EQ(info.backend, "cpu");
  EXPECT_EQ(info.kind, portmat::DeviceKind::cpu);
  EXPECT_TRUE(info.host_unified);
  EXPECT_TRUE(info.supports_f64);
  EXPECT_GT(info.compute_units, 0);
  EXPECT_GT(info.memory_bytes, 0u);
  EXPECT_FALSE(info.name.empty());
  if (std::string(portmat::cpu::active_kernel_set().isa) != "scalar") EXPECT_GT(info.peak_gflops, 0);
  // "cpu" picks the native backend over an OpenCL CPU device.
  EXPECT_EQ(portmat::find_device("cpu").backend, "cpu");
}

TEST(CpuDevice, ThreadSetting) {
  const int before = portmat::num_threads();
  EXPECT_GT(before, 0);
  portmat::set_num_threads(3);
  EXPECT_EQ(portmat::num_threads(), std::min(3, before));  // clamped to the CPUs
  portmat::set_num_threads(1 << 30);
  EXPECT_EQ(portmat::num_threads(), before);
  portmat::set_num_threads(3);
  std::mt19937 rng(1);
  EXPECT_LE(run_driver<float>(portmat::cpu::active_kernel_set().f32, 200, 300, 250, false, true,
                              portmat::num_threads(), rng),
            1.0);
  portmat::set_num_threads(0);  // back to the default
  EXPECT_EQ(portmat::num_threads(), before);
}

TEST(CpuDevice, ConcurrentCallersAndTimeGemm) {
  // Many threads at once through the public API: the pool is shared, results stay right.
  std::vector<std::thread> callers;
  std::vector<double> worst(6, 0.0);
  for (int t = 0; t < 6; ++t)
    callers.emplace_back([t, &worst] {
      std::mt19937 rng(t);
      const std::int64_t m = 150 + 40 * t, k = 220, n = 190 - 10 * t;
      for (int r = 0; r < 3; ++r) {
        auto a = random_vector<float>(m * k, rng), b = random_vector<float>(k * n, rng);
        std::vector<float> c(m * n);
        MatrixView va{a.data(), m, k, k, 1, DType::f32}, vb{b.data(), k, n, n, 1, DType::f32};
        MatrixView vc{c.data(), m, n, n, 1, DType::f32};
        portmat::matmul(va, vb, vc, "cpu:0");
        worst[t] = std::max(worst[t], portmat::reference::worst_error_ratio(va, vb, vc));
      }
    });
  for (auto& c : callers) c.join();
  for (double w : worst) EXPECT_LE(w, 1.0);
  const auto seconds = portmat::time_gemm("cpu:0", 64, 48, 80, DType::f64, 2);
  ASSERT_EQ(seconds.size(), 2u);
  EXPECT_GT(seconds[0], 0.0);
  const auto queued = portmat::time_gemm("cpu:0", 64, 48, 80, DType::f64, 2, 3);  // 3 per run
  ASSERT_EQ(queued.size(), 2u);
  EXPECT_GT(queued[1], 0.0);
  EXPECT_THROW(portmat::time_gemm("cpu:0", 64, 48, 80, DType::f64, 2, 0), std::invalid_argument);
  EXPECT_EQ(portmat::time_gemm("cpu:0", 64, 48, 80, DType::f64, 2, 1, "cr").size(), 2u);
  EXPECT_THROW(portmat::time_gemm("cpu:0", 64, 48, 80, DType::f64, 2, 1, "rx"), std::invalid_argument);
}

// The copy rate that the automatic device choice weighs against a GPU's link: measured once,
// then the same figure.
TEST(CpuDevice, HostCopyRateIsMeasuredOnce) {
  auto d = portmat::core::open_device("cpu");
  const double rate = d->host_bytes_per_s();
  EXPECT_GT(rate, 1e8);   // above 100 MB/s on anything that runs this test
  EXPECT_LT(rate, 1e13);  // below 10 TB/s
  EXPECT_EQ(d->host_bytes_per_s(), rate);
}
