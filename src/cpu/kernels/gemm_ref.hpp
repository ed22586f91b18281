// The scalar reference micro-kernel: the fallback on CPUs without a SIMD kernel (and on CPUs that
// are neither x86-64 nor AArch64) and the test oracle for every ISA kernel, at any tile shape.
//
// Plain C++ compiled without ISA flags: it follows the contract in ukernel.hpp exactly (packed,
// zero-padded panels; edge tiles write only m x n) and accumulates in T, in the same order as the
// SIMD kernels (one k step at a time), so tests can hold them to a tight bound.
#pragma once

#include <cstdint>

namespace portmat::cpu {

template <class T, int MR, int NR>
void gemm_ref(std::int64_t k, const T* a, const T* b, T* c, std::int64_t ldc, int m, int n,
              bool accumulate) {
  static_assert(MR >= 1 && NR >= 1, "empty tile");
  static_assert(MR * NR <= 1024, "the accumulator tile lives on the stack; keep it small");
  T acc[MR][NR] = {};
  for (std::int64_t p = 0; p < k; ++p, a += MR, b += NR)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += a[i] * b[j];
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : T(0)) + acc[i][j];
}

// The shapes the scalar fallback uses (kernel_table.cpp): 4 x 8 float32 and 4 x 4 float64 keep
// the tile in the 16 SSE registers of baseline x86-64 (and in NEON's 32) once vectorised.
inline void gemm_ref_f32_4x8(std::int64_t k, const float* a, const float* b, float* c,
                             std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_ref<float, 4, 8>(k, a, b, c, ldc, m, n, accumulate);
}
inline void gemm_ref_f64_4x4(std::int64_t k, const double* a, const double* b, double* c,
                             std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_ref<double, 4, 4>(k, a, b, c, ldc, m, n, accumulate);
}

// Integer products (wrap-around): the scalar fallback's, and the NEON builds' until they have
// SIMD ones.
inline void gemm_ref_u32_4x8(std::int64_t k, const std::uint32_t* a, const std::uint32_t* b,
                             std::uint32_t* c, std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_ref<std::uint32_t, 4, 8>(k, a, b, c, ldc, m, n, accumulate);
}
inline void gemm_ref_u64_4x4(std::int64_t k, const std::uint64_t* a, const std::uint64_t* b,
                             std::uint64_t* c, std::int64_t ldc, int m, int n, bool accumulate) {
  gemm_ref<std::uint64_t, 4, 4>(k, a, b, c, ldc, m, n, accumulate);
}

}  // namespace portmat::cpu
