// AVX2 + FMA micro-kernels: gemm_avx2_f32_6x16, gemm_avx2_f64_6x8, and the integer products
// gemm_avx2_u32_6x16 and gemm_avx2_u64_6x8 (contract: ukernel.hpp); the float32 A packer of
// their 6-row panels (pack_a_avx2_f32_6).
//
// Compiled with -mavx2 -mfma (cpu.cmake), called only after a run-time check. The classic
// Haswell shape (BLIS, OpenBLAS): 6 rows x 2 ymm vectors = 12 accumulators + 2 B vectors + one
// broadcast = 15 of the 16 ymm registers; 12 independent chains cover FMA latency x 2 ports.
// Edge columns go through a small stack buffer (AVX2 has no cheap masked stores of any width).
#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "cpu/kernels/float_traits_avx2.hpp"
#include "cpu/kernels/tile_common.hpp"
#include "cpu/kernels/ukernel.hpp"

namespace portmat::cpu {

namespace {

// The integer products (core/dtypes.cpp): wrap-around 32- and 64-bit multiply-adds. AVX2 has no
// 64-bit multiply, so U64 builds one from three 32 x 32 -> 64-bit ones (the high halves' product
// falls out modulo 2^64).
struct U32 {
  using T = std::uint32_t;
  using V = __m256i;
  static constexpr int lanes = 8;
  static V zero() { return _mm256_setzero_si256(); }
  static V load(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static V bcast(const T* p) { return _mm256_set1_epi32(static_cast<int>(*p)); }
  static V fma(V a, V b, V c) { return _mm256_add_epi32(_mm256_mullo_epi32(a, b), c); }
  static V add(V a, V b) { return _mm256_add_epi32(a, b); }
  static void store(T* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static V load_part(const T* p, int n) { return load_part_via_stack<U32>(p, n); }
  static void store_part(T* p, V v, int n) { store_part_via_stack<U32>(p, v, n); }
};

struct U64 {
  using T = std::uint64_t;
  using V = __m256i;
  static constexpr int lanes = 4;
  static V zero() { return _mm256_setzero_si256(); }
  static V load(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static V bcast(const T* p) { return _mm256_set1_epi64x(static_cast<long long>(*p)); }
  static V mul(V a, V b) {  // a * b mod 2^64 = lo*lo + ((hi_a*lo_b + lo_a*hi_b) << 32)
    const V lo = _mm256_mul_epu32(a, b);
    const V cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                     _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
    return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
  }
  static V fma(V a, V b, V c) { return _mm256_add_epi64(mul(a, b), c); }
  static V add(V a, V b) { return _mm256_add_epi64(a, b); }
  static void store(T* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static V load_part(const T* p, int n) { return load_part_via_stack<U64>(p, n); }
  static void store_part(T* p, V v, int n) { store_part_via_stack<U64>(p, v, n); }
};

// U64 for operands whose every 64-bit value is a sign-extended 32-bit one (v == int32(v), the
// usual int64 array): vpmuldq multiplies the low halves as signed 32-bit numbers into exact
// 64-bit products, one instruction for four, and the sum wraps modulo 2^64 like U64's. Modular
// arithmetic makes it right for uint64 bits too (such a value is congruent to its int32).
struct U64Narrow : U64 {
  static V fma(V a, V b, V c) { return _mm256_add_epi64(_mm256_mul_epi32(a, b), c); }
};

template <class S, int MR, int NV>
[[gnu::always_inline]] inline void gemm_tile(std::int64_t k, const typename S::T* a,
                                             const typename S::T* b, typename S::T* c,
                                             std::int64_t ldc, int m, int n, bool accumulate) {
  constexpr int NR = NV * S::lanes;
  static_assert(MR >= 1 && NV >= 1, "empty tile");
  static_assert(MR * NV + NV + 1 <= 16, "accumulators, B row and a broadcast must fit 16 ymm");

  for (int i = 0; i < m; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + NR - 1), _MM_HINT_T0);
  }
  typename S::V acc[MR][NV];
  accumulate_broadcast<S, MR, NV>(k, a, b, acc, 0, [] {});
  store_tile<S, MR, NV>(acc, c, ldc, m, n, accumulate);
}

}  // namespace

void gemm_avx2_f32_6x16(std::int64_t k, const float* a, const float* b, float* c,
                        std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<F32, 6, 2>(k, a, b, c, ldc, m, n, accumulate);
}

void gemm_avx2_f64_6x8(std::int64_t k, const double* a, const double* b, double* c,
                       std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<F64, 6, 2>(k, a, b, c, ldc, m, n, accumulate);
}

void gemm_avx2_u32_6x16(std::int64_t k, const std::uint32_t* a, const std::uint32_t* b,
                        std::uint32_t* c, std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<U32, 6, 2>(k, a, b, c, ldc, m, n, accumulate);
}

void gemm_avx2_u64_6x8(std::int64_t k, const std::uint64_t* a, const std::uint64_t* b,
                       std::uint64_t* c, std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<U64, 6, 2>(k, a, b, c, ldc, m, n, accumulate);
}

void gemm_avx2_u64n_6x8(std::int64_t k, const std::uint64_t* a, const std::uint64_t* b,
                        std::uint64_t* c, std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<U64Narrow, 6, 2>(k, a, b, c, ldc, m, n, accumulate);
}

// Six rows of a row-major a, eight columns at a time: the 6 x 8 block is transposed in registers
// (the usual 8 x 8 unpack / shuffle transpose on rows 0-3, pairs of rows 4-5) and written as eight
// k steps of six floats. Replaces pack_a_panels<float, 6>'s element-by-element copy: 12% of a
// 256 x 256 x 256 product on the 2-core machine (perf, three times the B packer's share), 9% with
// this one, whose time is in its stores (the panels it overwrites sit in both cores' caches).
void pack_a_avx2_f32_6(const float* a, std::int64_t lda, std::int64_t k, float* dst) {
  std::int64_t p = 0;
  for (; p + 8 <= k; p += 8, dst += 48) {
    const float* r = a + p;
    const __m256 r0 = _mm256_loadu_ps(r), r1 = _mm256_loadu_ps(r + lda), r2 = _mm256_loadu_ps(r + 2 * lda),
                 r3 = _mm256_loadu_ps(r + 3 * lda), r4 = _mm256_loadu_ps(r + 4 * lda),
                 r5 = _mm256_loadu_ps(r + 5 * lda);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);  // cols 0 1 | 4 5, 2 3 | 6 7
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);  // (r4, r5) pairs
    const __m256 s[4] = {_mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),   // rows 0-3 of col 0 | 4
                         _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),   // col 1 | 5
                         _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),   // col 2 | 6
                         _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2))};  // col 3 | 7
    const __m128 pairs[4] = {_mm256_castps256_ps128(t4), _mm256_castps256_ps128(t5), _mm256_extractf128_ps(t4, 1),
                             _mm256_extractf128_ps(t5, 1)};  // (r4, r5) of cols 0 1, 2 3, 4 5, 6 7
    for (int c = 0; c < 4; ++c) {
      _mm_storeu_ps(dst + 6 * c, _mm256_castps256_ps128(s[c]));
      _mm_storeu_ps(dst + 6 * (c + 4), _mm256_extractf128_ps(s[c], 1));
    }
    for (int h = 0; h < 4; ++h) {
      _mm_storel_pi(reinterpret_cast<__m64*>(dst + 6 * (2 * h) + 4), pairs[h]);
      _mm_storeh_pi(reinterpret_cast<__m64*>(dst + 6 * (2 * h + 1) + 4), pairs[h]);
    }
  }
  for (; p < k; ++p, dst += 6)
    for (int i = 0; i < 6; ++i) dst[i] = a[i * lda + p];
}

float fma_loop_avx2_f32(long iters) { return fma_chains<F32>(iters); }

}  // namespace portmat::cpu
