// AVX-512 integer micro-kernels: gemm_avx512_u32_14x32 and gemm_avx512_u64_14x16 (contract:
// ukernel.hpp), the products of every integer dtype (core/dtypes.cpp: 8/16-bit integers and
// booleans widen to 32 bits, signed types use the same bits, and everything wraps modulo 2^bits
// as NumPy's integer matmul does).
//
// Compiled with -mavx512f -mavx512dq (cpu.cmake; vpmullq, the 64-bit multiply, is AVX512DQ) and
// called only where kernel_table.cpp found both. The shapes are the float kernels': 14 rows x 2
// vectors, 28 accumulators. An integer multiply-add is two instructions (vpmulld / vpmullq, then
// vpaddd / vpaddq) and the multiply is the bottleneck (vpmulld: one per cycle, vpmullq: one per
// 1.5 cycles on Sapphire Rapids), so 28 independent chains keep it busy.
#include <immintrin.h>

#include <cstdint>

#include "cpu/kernels/tile_common.hpp"
#include "cpu/kernels/ukernel.hpp"

namespace portmat::cpu {

namespace {

struct U32 {
  using T = std::uint32_t;
  using V = __m512i;
  static constexpr int lanes = 16;
  static V zero() { return _mm512_setzero_si512(); }
  static V load(const T* p) { return _mm512_loadu_si512(p); }
  static V bcast(const T* p) { return _mm512_set1_epi32(static_cast<int>(*p)); }
  static V fma(V a, V b, V c) { return _mm512_add_epi32(_mm512_mullo_epi32(a, b), c); }
  static V add(V a, V b) { return _mm512_add_epi32(a, b); }
  static void store(T* p, V v) { _mm512_storeu_si512(p, v); }
  static V load_part(const T* p, int n) { return _mm512_maskz_loadu_epi32(mask(n), p); }
  static void store_part(T* p, V v, int n) { _mm512_mask_storeu_epi32(p, mask(n), v); }
  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }  // n < 16
};

struct U64 {
  using T = std::uint64_t;
  using V = __m512i;
  static constexpr int lanes = 8;
  static V zero() { return _mm512_setzero_si512(); }
  static V load(const T* p) { return _mm512_loadu_si512(p); }
  static V bcast(const T* p) { return _mm512_set1_epi64(static_cast<long long>(*p)); }
  static V fma(V a, V b, V c) { return _mm512_add_epi64(_mm512_mullo_epi64(a, b), c); }
  static V add(V a, V b) { return _mm512_add_epi64(a, b); }
  static void store(T* p, V v) { _mm512_storeu_si512(p, v); }
  static V load_part(const T* p, int n) { return _mm512_maskz_loadu_epi64(mask(n), p); }
  static void store_part(T* p, V v, int n) { _mm512_mask_storeu_epi64(p, mask(n), v); }
  static __mmask8 mask(int n) { return static_cast<__mmask8>((1u << n) - 1); }  // n < 8
};

template <class S, int MR, int NV>
[[gnu::always_inline]] inline void gemm_tile(std::int64_t k, const typename S::T* a,
                                             const typename S::T* b, typename S::T* c,
                                             std::int64_t ldc, int m, int n, bool accumulate) {
  constexpr int NR = NV * S::lanes;
  static_assert(MR * NV + NV + 2 <= 32, "accumulators, B row, a broadcast and a product in 32 zmm");
  typename S::V acc[MR][NV];
  // The C tile into L1 during the last k steps (as the float kernels do).
  accumulate_broadcast<S, MR, NV>(k, a, b, acc, 32, [&] {
    for (int i = 0; i < m; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + NR - 1), _MM_HINT_T0);
    }
  });
  store_tile<S, MR, NV>(acc, c, ldc, m, n, accumulate);
}

}  // namespace

void gemm_avx512_u32_14x32(std::int64_t k, const std::uint32_t* a, const std::uint32_t* b,
                           std::uint32_t* c, std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<U32, 14, 2>(k, a, b, c, ldc, m, n, accumulate);
}

void gemm_avx512_u64_14x16(std::int64_t k, const std::uint64_t* a, const std::uint64_t* b,
                           std::uint64_t* c, std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<U64, 14, 2>(k, a, b, c, ldc, m, n, accumulate);
}

}  // namespace portmat::cpu
