// AVX-512 complex micro-kernels: complex64 and complex128 products as complex products
// (contract: ukernel.hpp, Complex64 / Complex128), the AVX2 ones (gemm_complex_avx2.cpp, the
// why) on 512-bit vectors: the same body (complex_tile.hpp), these traits and tunables.
//
// Run and tested on the H200 machine's 16-core Xeon (session 19: the C++ suite's complex tests
// and tests/python/test_complex_kernel.py pass; complex64 1.21x / 1.42x NumPy at n = 1024 / 2048,
// complex128 1.27x / 1.51x, docs/cpu.md); the 2-core development machine has no AVX-512. The
// blocks copy the footprints of the float32 / float64 AVX-512 kernels, untuned
// (kernel_table.cpp: A outer, a 28 KiB A micro-panel in L1, a 512 KiB B block in L2, an 8.6 MiB
// A block).
// Tile 7 x 2 vectors: 28 accumulators + 2 B vectors + a broadcast = 31 of the 32 zmm registers,
// 28 independent FMA chains and 2 + 14 loads per 28 FMAs, as the 14 x 32 real kernel.
//
// Compiled with -mavx512f -mfma (cpu.cmake), called only after kernel_table.cpp's run-time check.
#include <immintrin.h>

#include <cstdint>

#include "cpu/kernels/complex_tile.hpp"
#include "cpu/kernels/float_traits_avx512.hpp"
#include "cpu/kernels/ukernel.hpp"

namespace portmat::cpu {

namespace {

// ---- tunables (complex elements; see gemm_complex_avx2.cpp) ---------------------------------------
constexpr int kC64Rows = 7, kC64Vectors = 2;    // 7 x 16 complex64
constexpr std::int64_t kC64Mc = 7 * 300, kC64Kc = 512, kC64Nc = 128;
constexpr bool kC64AOuter = true;
constexpr int kC128Rows = 7, kC128Vectors = 2;  // 7 x 8 complex128
constexpr std::int64_t kC128Mc = 7 * 300, kC128Kc = 256, kC128Nc = 128;
constexpr bool kC128AOuter = true;

// GCC 12's _mm512_permute_ps starts from _mm512_undefined_ps(), which -Wuninitialized reports as
// a use of an uninitialised value; it is not one (gemm_avx512.cpp's packer, likewise).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// float_traits_avx512.hpp's traits, and the combine at the store: r + (i with each (re, im) pair
// swapped and its real lane negated) as r * 1 -+ swapped, the product exact, so one rounding as
// AVX2's addsub.
struct C32 : F32 {
  static V combine(V r, V i) { return _mm512_fmaddsub_ps(r, _mm512_set1_ps(1.0f), _mm512_permute_ps(i, 0xB1)); }
};
struct C64 : F64 {
  static V combine(V r, V i) { return _mm512_fmaddsub_pd(r, _mm512_set1_pd(1.0), _mm512_permute_pd(i, 0x55)); }
};

void gemm_avx512_c64(std::int64_t k, const Complex64* a, const Complex64* b, Complex64* c,
                     std::int64_t ldc, int m, int n, bool accumulate) {
  complex_tile<C32, kC64Rows, kC64Vectors, 32>(k, &a->re, &b->re, &c->re, 2 * ldc, m, 2 * n, accumulate);
}

void gemm_avx512_c128(std::int64_t k, const Complex128* a, const Complex128* b, Complex128* c,
                      std::int64_t ldc, int m, int n, bool accumulate) {
  complex_tile<C64, kC128Rows, kC128Vectors, 32>(k, &a->re, &b->re, &c->re, 2 * ldc, m, 2 * n, accumulate);
}

}  // namespace

#pragma GCC diagnostic pop

extern const ComplexKernel<Complex64> kComplexAvx512C64 = {
    "gemm_avx512_c64", kC64Rows, kC64Vectors * F32::lanes / 2, kC64Mc, kC64Kc, kC64Nc, kC64AOuter,
    gemm_avx512_c64};
extern const ComplexKernel<Complex128> kComplexAvx512C128 = {
    "gemm_avx512_c128", kC128Rows, kC128Vectors * F64::lanes / 2, kC128Mc, kC128Kc, kC128Nc, kC128AOuter,
    gemm_avx512_c128};

}  // namespace portmat::cpu
