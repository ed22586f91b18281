// AVX2 + FMA complex micro-kernels: complex64 and complex128 products computed as complex
// products (contract: ukernel.hpp, Complex64 / Complex128), not as the real product a @ B'' of
// twice b's size (core/batch.hpp, complex_b) that the other kernel sets run.
//
// Why: through B'' a complex product costs the real kernel's time for the same flops plus
// packing B'' (twice b's bytes) from b; here B's micro-panels are b's own complex elements
// (K x NR, the bytes of b), packed by the driver's plain packers with a complex element type.
//
// How: complex_tile.hpp (re a and im a broadcast apart into two accumulator sets, combined at the
// store). Each part of c is a sum of K products plus one of K more (acc_i's swapped lane), as
// NumPy's (OpenBLAS's) cgemm / zgemm sum them: the same error bound.
// Tile 3 x 2 vectors: 12 accumulators + 2 B vectors + a broadcast = 15 of the 16 ymm registers,
// 12 independent FMA chains (the real 6 x 16 kernel's count) and 2 + 6 loads per 12 FMAs.
//
// Compiled with -mavx2 -mfma (cpu.cmake), called only after kernel_table.cpp's run-time check.
#include <immintrin.h>

#include <cstdint>

#include "cpu/kernels/complex_tile.hpp"
#include "cpu/kernels/float_traits_avx2.hpp"
#include "cpu/kernels/ukernel.hpp"

namespace portmat::cpu {

namespace {

// ---- tunables -----------------------------------------------------------------------------------
// Tiles: rows of A x vectors of B (4 complex64 / 2 complex128 a vector); blocks in complex
// elements (gemm_driver.hpp): the B micro-panel kc x nr in L1 (24 / 16 KiB of Zen 3's 32), the
// A block mc x kc in L2 (216 / 144 KiB of 512), the B block kc x nc in L3. kernel_table.cpp has
// packers for rows 2-4 or 7 and 4, 6, 8, 12 or 16 columns.
// Measured on the 2-core Zen 3 machine, n = 1024, GFLOP/s (medians of 3-6 alternating rounds,
// one process each; PORTMAT_CPU_BLOCKS="c64:mc,kc,nc,a_outer"): complex64 on one thread
// kc 384 97.0-97.3 against kc 256 96.3-96.8 and kc 192 95.5, on two 183-186 against 183; the
// tile 2 x 12 (2 x 3 vectors) 93.3 against 92.7 (one thread) and 165 against 170 (two, noisy):
// no better; A outer (mc 1200, kc 256-512, nc 64-128) within 1% below; a software prefetch of
// the A panel 8-16 k steps ahead 1% slower. complex128: kc 384 0-3% slower than 256.
constexpr int kC64Rows = 3, kC64Vectors = 2;   // 3 x 8 complex64
constexpr std::int64_t kC64Mc = 3 * 24, kC64Kc = 384, kC64Nc = 2048;
constexpr bool kC64AOuter = false;
constexpr int kC128Rows = 3, kC128Vectors = 2;  // 3 x 4 complex128
constexpr std::int64_t kC128Mc = 3 * 12, kC128Kc = 256, kC128Nc = 1024;
constexpr bool kC128AOuter = false;

// float_traits_avx2.hpp's traits, and the combine at the store: r + (i with each (re, im) pair
// swapped and its real lane negated).
struct C32 : F32 {
  static V combine(V r, V i) { return _mm256_addsub_ps(r, _mm256_permute_ps(i, 0xB1)); }
};
struct C64 : F64 {
  static V combine(V r, V i) { return _mm256_addsub_pd(r, _mm256_permute_pd(i, 0x5)); }
};

void gemm_avx2_c64(std::int64_t k, const Complex64* a, const Complex64* b, Complex64* c,
                   std::int64_t ldc, int m, int n, bool accumulate) {
  complex_tile<C32, kC64Rows, kC64Vectors, 16>(k, &a->re, &b->re, &c->re, 2 * ldc, m, 2 * n, accumulate);
}

void gemm_avx2_c128(std::int64_t k, const Complex128* a, const Complex128* b, Complex128* c,
                    std::int64_t ldc, int m, int n, bool accumulate) {
  complex_tile<C64, kC128Rows, kC128Vectors, 16>(k, &a->re, &b->re, &c->re, 2 * ldc, m, 2 * n, accumulate);
}

}  // namespace

extern const ComplexKernel<Complex64> kComplexAvx2C64 = {
    "gemm_avx2_c64", kC64Rows, kC64Vectors * F32::lanes / 2, kC64Mc, kC64Kc, kC64Nc, kC64AOuter,
    gemm_avx2_c64};
extern const ComplexKernel<Complex128> kComplexAvx2C128 = {
    "gemm_avx2_c128", kC128Rows, kC128Vectors * F64::lanes / 2, kC128Mc, kC128Kc, kC128Nc, kC128AOuter,
    gemm_avx2_c128};

}  // namespace portmat::cpu
