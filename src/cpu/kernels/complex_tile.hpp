// The complex micro-kernel's body, shared by the ISA files (gemm_complex_avx2.cpp,
// gemm_complex_avx512.cpp), which give it their vector traits and register count: one copy of
// the arithmetic, so that the AVX-512 kernels, which the 2-core development machine cannot run,
// are the AVX2 ones (tested there) with wider vectors.
//
// Per k step: one row of the B micro-panel (NV vectors of [re, im, re, im, ...]); for each of the
// MR rows of A, re a and im a broadcast separately into two sets of accumulators,
//   acc_r += re a * [re b, im b, ...]       acc_i += im a * [re b, im b, ...];
// at the store c = S::combine(acc_r, acc_i) = acc_r + (acc_i with each pair swapped and its real
// lane negated) = [re a re b - im a im b, re a im b + im a re b], then the real kernels' store
// (tile_common.hpp, store_tile: store or accumulate, partial vectors at the edges).
//
// Traits S: tile_common.hpp's, plus combine(r, i). Internal linkage, as tile_common.hpp.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/kernels/tile_common.hpp"

namespace portmat::cpu {
namespace {

// The tile in reals: a, b, c point at parts (2 per complex element), ldc and n count parts.
template <class S, int MR, int NV, int Registers>
[[gnu::always_inline]] inline void complex_tile(std::int64_t k, const typename S::T* a,
                                                const typename S::T* b, typename S::T* c,
                                                std::int64_t ldc, int m, int n, bool accumulate) {
  using V = typename S::V;
  constexpr int NR = NV * S::lanes;  // parts
  static_assert(2 * MR * NV + NV + 1 <= Registers, "accumulators, B row and a broadcast must fit the registers");
  for (int i = 0; i < m; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + NR - 1), _MM_HINT_T0);
  }
  V acc_r[MR][NV], acc_i[MR][NV];
  unroll<MR>([&](auto i) {
    unroll<NV>([&](auto j) { acc_r[i][j] = S::zero(), acc_i[i][j] = S::zero(); });
  });
#pragma GCC unroll 4
  for (std::int64_t p = 0; p < k; ++p) {
    V bv[NV];
    unroll<NV>([&](auto j) { bv[j] = S::load(b + j * S::lanes); });
    unroll<MR>([&](auto i) {
      const V re = S::bcast(a + 2 * i);
      unroll<NV>([&](auto j) { acc_r[i][j] = S::fma(re, bv[j], acc_r[i][j]); });
      const V im = S::bcast(a + 2 * i + 1);
      unroll<NV>([&](auto j) { acc_i[i][j] = S::fma(im, bv[j], acc_i[i][j]); });
    });
    a += 2 * MR;
    b += NR;
  }
  V out[MR][NV];
  unroll<MR>([&](auto i) { unroll<NV>([&](auto j) { out[i][j] = S::combine(acc_r[i][j], acc_i[i][j]); }); });
  store_tile<S, MR, NV>(out, c, ldc, m, n, accumulate);
}

}  // namespace
}  // namespace portmat::cpu
