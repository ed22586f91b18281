// NEON (AdvSIMD) micro-kernels for AArch64: gemm_neon_f32_8x12 and gemm_neon_f64_8x6
// (contract: ukernel.hpp).
//
// NEON is mandatory on AArch64, so this file needs no ISA flags and no run-time check
// (kernel_table.cpp registers it for every __aarch64__ build). Registers are 32 x 128 bits.
// Shape: C tile of MR rows x NV vectors (4 floats / 2 doubles each). Per k step the kernel loads
// NV vectors of B (one row of the B micro-panel) and the MR elements of A's column as MR/lanes
// vectors, then issues MR*NV independent by-element FMAs (fmla v.4s, v.4s, v.s[l]) into register
// accumulators: no broadcasts needed. The BLIS armv8a float32 shape:
//   float32 8 x 12: 8 x 3 = 24 accumulators + 3 B vectors + 2 A vectors = 29 of 32 registers;
//   float64 8 x 6:  8 x 3 = 24 accumulators + 3 B vectors + 4 A vectors = 31 of 32 registers.
// 24 independent chains cover FMA latency (4 cycles) times two to four FMA pipes (Cortex-A7x,
// Neoverse N1/V1/V2); 5 (float32) or 7 (float64) 16-byte loads per 24 FMAs stay under the load
// ports. Edge tiles skip rows below m and store partial vectors lane by lane: nothing outside
// the m x n tile is read or written.
#if defined(__aarch64__)  // the same guard as the table entry in kernel_table.cpp
#include <arm_neon.h>

#include <cstdint>
#include <utility>

#include "cpu/kernels/tile_common.hpp"
#include "cpu/kernels/ukernel.hpp"

namespace portmat::cpu {

namespace {

struct F32 {
  using T = float;
  using V = float32x4_t;
  static constexpr int lanes = 4;
  static V zero() { return vdupq_n_f32(0.0f); }
  static V load(const T* p) { return vld1q_f32(p); }
  static V bcast(const T* p) { return vld1q_dup_f32(p); }  // bcast and fma: for fma_chains
  static V fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }
  // acc + b * a[L]: one fmla by element.
  template <int L>
  static V fma_lane(V acc, V b, V a) { return vfmaq_laneq_f32(acc, b, a, L); }
  static V add(V a, V b) { return vaddq_f32(a, b); }
  static void store(T* p, V v) { vst1q_f32(p, v); }
  // The first n (1..3) lanes; lanes n.. of the loaded vector are zero.
  static V load_part(const T* p, int n) {
    if (n == 1) return vld1q_lane_f32(p, zero(), 0);
    const V lo = vcombine_f32(vld1_f32(p), vdup_n_f32(0.0f));
    return n == 2 ? lo : vld1q_lane_f32(p + 2, lo, 2);
  }
  static void store_part(T* p, V v, int n) {
    if (n == 1) return vst1q_lane_f32(p, v, 0);
    vst1_f32(p, vget_low_f32(v));
    if (n == 3) vst1q_lane_f32(p + 2, v, 2);
  }
};

struct F64 {
  using T = double;
  using V = float64x2_t;
  static constexpr int lanes = 2;
  static V zero() { return vdupq_n_f64(0.0); }
  static V load(const T* p) { return vld1q_f64(p); }
  template <int L>
  static V fma_lane(V acc, V b, V a) { return vfmaq_laneq_f64(acc, b, a, L); }
  static V add(V a, V b) { return vaddq_f64(a, b); }
  static void store(T* p, V v) { vst1q_f64(p, v); }
  // A partial vector of doubles is always one lane.
  static V load_part(const T* p, int) { return vld1q_lane_f64(p, zero(), 0); }
  static void store_part(T* p, V v, int) { vst1q_lane_f64(p, v, 0); }
};

template <class S, int MR, int NV>
[[gnu::always_inline]] inline void gemm_tile(std::int64_t k, const typename S::T* a,
                                             const typename S::T* b, typename S::T* c,
                                             std::int64_t ldc, int m, int n, bool accumulate) {
  using V = typename S::V;
  constexpr int NR = NV * S::lanes;
  constexpr int AV = MR / S::lanes;  // A column as vectors
  static_assert(MR >= 1 && NV >= 1, "empty tile");
  static_assert(MR % S::lanes == 0, "A's column is loaded as whole vectors");
  static_assert(MR * NV + NV + AV <= 32, "accumulators, B row and A column must fit 32 registers");

  // Bring the C tile towards L1 while the k loop runs (it is touched only at the end).
  for (int i = 0; i < m; ++i) {
    __builtin_prefetch(c + i * ldc, 1, 3);
    __builtin_prefetch(c + i * ldc + NR - 1, 1, 3);
  }

  V acc[MR][NV];
  unroll<MR>([&](auto i) { unroll<NV>([&](auto j) { acc[i][j] = S::zero(); }); });

#pragma GCC unroll 4
  for (std::int64_t p = 0; p < k; ++p) {
    V bv[NV], av[AV];
    unroll<NV>([&](auto j) { bv[j] = S::load(b + j * S::lanes); });
    unroll<AV>([&](auto q) { av[q] = S::load(a + q * S::lanes); });
    unroll<MR>([&](auto i) {
      constexpr int q = decltype(i)::value / S::lanes, l = decltype(i)::value % S::lanes;
      unroll<NV>([&](auto j) { acc[i][j] = S::template fma_lane<l>(acc[i][j], bv[j], av[q]); });
    });
    a += MR;
    b += NR;
  }

  store_tile<S, MR, NV>(acc, c, ldc, m, n, accumulate);  // edge columns lane by lane
}

}  // namespace

void gemm_neon_f32_8x12(std::int64_t k, const float* a, const float* b, float* c,
                        std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<F32, 8, 3>(k, a, b, c, ldc, m, n, accumulate);
}

void gemm_neon_f64_8x6(std::int64_t k, const double* a, const double* b, double* c,
                       std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_tile<F64, 8, 3>(k, a, b, c, ldc, m, n, accumulate);
}

float fma_loop_neon_f32(long iters) { return fma_chains<F32>(iters); }

}  // namespace portmat::cpu
#endif  // __aarch64__
