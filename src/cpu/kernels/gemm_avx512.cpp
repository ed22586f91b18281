// AVX-512 micro-kernels: gemm_avx512_f32_14x32 and gemm_avx512_f64_14x16 (contract: ukernel.hpp),
// their direct-A forms (A read in place from a row-major a), the float32 kernels' forms that
// prefetch a stream of lines as they run (_pf), and the float32 A packer for their 14-row panels
// (pack_a_avx512_f32_14).
//
// Compiled with -mavx512f -mfma (cpu.cmake) and only ever called after a run-time check, so the
// same build runs on CPUs without AVX-512. Everything here has internal linkage except the named
// kernels, so no AVX-512 code can leak into inline functions shared with other files.
//
// Shape: C tile of MR rows x NV vectors. Per k step the kernel loads NV vectors of B (one row of
// the B micro-panel), broadcasts the MR elements of A's column and issues MR*NV independent FMAs
// into register accumulators. 14 x 2 = 28 accumulators + 2 B vectors + broadcast temporaries fill
// the 32 zmm registers; 28 independent chains cover the FMA latency (4 cycles) times two FMA
// ports with room to spare, and 16 loads per 28 FMAs stay under the two-to-three loads per cycle.
#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "cpu/kernels/float_traits_avx512.hpp"
#include "cpu/kernels/tile_common.hpp"
#include "cpu/kernels/ukernel.hpp"

namespace portmat::cpu {

namespace {

// A C tile of m x n (m <= MR, n <= NV vectors) around a k loop `run(acc, tail, before_tail)`
// (tile_common.hpp's accumulate_broadcast*): C's prefetches, then the store.
template <class S, int MR, int NV, bool EarlyC, class Loop>
[[gnu::always_inline]] inline void tile_around(Loop&& run, typename S::T* c, std::int64_t ldc, int m, int n,
                                               bool accumulate) {
  constexpr int NR = NV * S::lanes;
  static_assert(MR >= 1 && NV >= 1, "empty tile");
  static_assert(MR * NV + NV + 1 <= 32, "accumulators, B row and a broadcast must fit 32 zmm");

  // Bring the C tile into L1 while the last kPrefetchTail k steps run: earlier, the A and B
  // panels streaming through L1 would evict it again before the store.
  constexpr std::int64_t kPrefetchTail = 32;
  typename S::V acc[MR][NV];
  auto prefetch_c = [&](auto hint) PM_LAMBDA_ALWAYS_INLINE {  // hint: a std::integral_constant
    for (int i = 0; i < m; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), static_cast<_mm_hint>(decltype(hint)::value));
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + NR - 1), static_cast<_mm_hint>(decltype(hint)::value));
    }
  };
  // EarlyC: also ask for the tile into L2 before the k loop, thousands of cycles ahead, so the
  // tail prefetch finds it there even when C comes from memory (a big C, or a C tile whose
  // previous pc pass is long gone). Worth 1-3% in float32 products of 2048-4096 on the
  // Sapphire Rapids VM of kernel_table.cpp.
  if constexpr (EarlyC) prefetch_c(std::integral_constant<int, _MM_HINT_T1>{});
  run(acc, kPrefetchTail, [&] { prefetch_c(std::integral_constant<int, _MM_HINT_T0>{}); });
  store_tile<S, MR, NV>(acc, c, ldc, m, n, accumulate);  // edge columns through masked stores
}

// `each` runs once a k step (NoStep, or PrefetchEach below).
template <class S, int MR, int NV, bool EarlyC = false, class Each = NoStep>
[[gnu::always_inline]] inline void gemm_tile(std::int64_t k, const typename S::T* a,
                                             const typename S::T* b, typename S::T* c,
                                             std::int64_t ldc, int m, int n, bool accumulate, Each each = {}) {
  tile_around<S, MR, NV, EarlyC>(
      [&](auto& acc, std::int64_t tail, auto&& before_tail) PM_LAMBDA_ALWAYS_INLINE {
        accumulate_broadcast<S, MR, NV>(k, a, b, acc, tail, before_tail, each);
      },
      c, ldc, m, n, accumulate);
}

// The same tile with A read in place from a row-major a (ukernel.hpp, GemmUkernelDirectA): all
// MR rows real.
template <class S, int MR, int NV, bool EarlyC = false, class Each = NoStep>
[[gnu::always_inline]] inline void gemm_tile_direct_a(std::int64_t k, const typename S::T* a,
                                                      std::int64_t lda, const typename S::T* b,
                                                      typename S::T* c, std::int64_t ldc, int n,
                                                      bool accumulate, Each each = {}) {
  tile_around<S, MR, NV, EarlyC>(
      [&](auto& acc, std::int64_t tail, auto&& before_tail) PM_LAMBDA_ALWAYS_INLINE {
        accumulate_broadcast_direct_a<S, MR, NV>(k, a, lda, b, acc, tail, before_tail, each);
      },
      c, ldc, MR, n, accumulate);
}

// One line of pf a k step (PrefetchLines), to L2.
struct PrefetchEach {
  PrefetchLines& pf;
  [[gnu::always_inline]] void operator()() const {
    if (pf.left > 0) {
      _mm_prefetch(pf.row + 64 * pf.line, _MM_HINT_T1);
      --pf.left;
      if (++pf.line == pf.lines) pf.line = 0, pf.row += pf.ld;
    }
  }
};

}  // namespace

// The float32 kernels' prefetching forms (ukernel.hpp, PrefetchLines; the driver's run_thread).
// The stream is copied in and out so that its fields can live in registers.
void gemm_avx512_f32_14x32_direct_a_pf(std::int64_t k, const float* a, std::int64_t lda, const float* b, float* c,
                                       std::int64_t ldc, int n, bool accumulate, PrefetchLines* pf) {
  PrefetchLines p = *pf;
  gemm_tile_direct_a<F32, 14, 2, true>(k, a, lda, b, c, ldc, n, accumulate, PrefetchEach{p});
  *pf = p;
}

void gemm_avx512_f32_14x32_pf(std::int64_t k, const float* a, const float* b, float* c, std::int64_t ldc, int m,
                              int n, bool accumulate, PrefetchLines* pf) {
  PrefetchLines p = *pf;
  gemm_tile<F32, 14, 2, true>(k, a, b, c, ldc, m, n, accumulate, PrefetchEach{p});
  *pf = p;
}

void gemm_avx512_f32_14x32_direct_a(std::int64_t k, const float* a, std::int64_t lda, const float* b,
                                    float* c, std::int64_t ldc, int n, bool accumulate) {
  gemm_tile_direct_a<F32, 14, 2, true>(k, a, lda, b, c, ldc, n, accumulate);
}

void gemm_avx512_f64_14x16_direct_a(std::int64_t k, const double* a, std::int64_t lda, const double* b,
                                    double* c, std::int64_t ldc, int n, bool accumulate) {
  gemm_tile_direct_a<F64, 14, 2>(k, a, lda, b, c, ldc, n, accumulate);
}

void gemm_avx512_f32_14x32(std::int64_t k, const float* a, const float* b, float* c,
                           std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<F32, 14, 2, true>(k, a, b, c, ldc, m, n, accumulate);
}

void gemm_avx512_f64_14x16(std::int64_t k, const double* a, const double* b, double* c,
                           std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<F64, 14, 2>(k, a, b, c, ldc, m, n, accumulate);
}

// One 14-row A micro-panel (contract: ukernel.hpp). Row-major A, the common case, is a transpose:
// 16 k columns at a time, the 14 rows (2 zero rows pad them to 16) go through a 16x16 in-register
// transpose (64 shuffles) and out as 16 k steps of 14 elements, about 4 cycles per k step against
// 28 scalar moves. A k tail (< 16 columns) uses masked loads, rows below `rows` are zeros that are
// never read, so no element outside the panel is touched. Column-major A is a copy per k step.
// GCC 12's unpack intrinsics start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports as a use of an uninitialised value; it is not one.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
void pack_a_avx512_f32_14(const float* a, std::int64_t lda, bool col_major, int rows,
                          std::int64_t k, float* dst) {
  constexpr int MR = 14;
  const __mmask16 out_mask = (1u << MR) - 1;
  if (col_major) {
    const __mmask16 in_mask = static_cast<__mmask16>((1u << rows) - 1);
    for (std::int64_t p = 0; p < k; ++p)
      _mm512_mask_storeu_ps(dst + p * MR, out_mask, _mm512_maskz_loadu_ps(in_mask, a + p * lda));
    return;
  }
  for (std::int64_t p = 0; p < k; p += 16) {
    const int cols = static_cast<int>(k - p < 16 ? k - p : 16);
    const __mmask16 in_mask = static_cast<__mmask16>(cols == 16 ? 0xFFFFu : (1u << cols) - 1);
    __m512 r[16];
    unroll<16>([&](auto i) {
      r[i] = i < rows ? _mm512_maskz_loadu_ps(in_mask, a + i * lda + p) : _mm512_setzero_ps();
    });
    // 32-bit then 64-bit interleaves: u[4g + c] holds, in each 128-bit lane L, column 4L + c of
    // rows 4g .. 4g+3.
    __m512 t[16], u[16];
    unroll<8>([&](auto i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    });
    unroll<4>([&](auto g) {
      const __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
      const __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
      u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
      u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
      u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
      u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    });
    // 128-bit lane shuffles gather lane L of the four row groups: column 4L + c, rows 0 .. 15.
    float* d = dst + p * MR;
    unroll<4>([&](auto c) {
      const __m512 w0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
      const __m512 w1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
      const __m512 w2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
      const __m512 w3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
      const __m512 col[4] = {
          _mm512_shuffle_f32x4(w0, w2, 0x88), _mm512_shuffle_f32x4(w0, w2, 0xDD),
          _mm512_shuffle_f32x4(w1, w3, 0x88), _mm512_shuffle_f32x4(w1, w3, 0xDD)};
      unroll<4>([&](auto l) {
        const int j = 4 * l + c;
        if (j < cols) _mm512_mask_storeu_ps(d + j * MR, out_mask, col[l]);
      });
    });
  }
}

#pragma GCC diagnostic pop

float fma_loop_avx512_f32(long iters) { return fma_chains<F32>(iters); }

}  // namespace portmat::cpu
