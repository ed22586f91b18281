// What the SIMD micro-kernels (gemm_avx512.cpp, gemm_avx2.cpp, gemm_neon.cpp) share: compile-time
// unrolling, the broadcast k loop of the x86 kernels, and the store of a finished C tile (full
// tiles as whole vectors, edge tiles through each ISA's partial load/store).
//
// Included only by those files, each compiled with its own ISA flags. Everything here has
// internal linkage (anonymous namespace), so every file gets its own copy built for its own ISA
// and no AVX-512 instruction can reach code that a CPU without it runs.
//
// An ISA's traits S provide: T (element), V (vector), lanes, zero(), load(p), add(a, b),
// store(p, v), and load_part(p, n) / store_part(p, v, n) for the first n < lanes elements
// (load_part zeroes the rest; neither touches memory past p[n-1]). The x86 loop and fma_chains
// also use bcast(p) and fma(a, b, c) = a * b + c.
#pragma once

#include <cstdint>
#include <utility>

#include "cpu/always_inline.hpp"

namespace portmat::cpu {
namespace {

// f(std::integral_constant<int, I>) for I = 0 .. N-1, so register arrays see only constant indices.
template <class F, int... I>
[[gnu::always_inline]] inline void unroll_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
[[gnu::always_inline]] inline void unroll(F&& f) {
  unroll_impl(f, std::make_integer_sequence<int, N>{});
}

// acc = sum over k steps of (A column, broadcast element by element) x (B row as NV vectors):
// MR*NV independent FMA chains per step, the x86 kernels' inner loop. a_row(i) is the address of
// row i's element at the current step (i a std::integral_constant) and a_step() moves A on a step.
// `before_tail()` runs when `tail` steps are left (or at once when k <= tail): the place to
// prefetch the C tile, late enough that the A and B streams do not evict it again before the store.
template <class S, int MR, int NV, class ARow, class AStep, class Hook>
[[gnu::always_inline]] inline void accumulate_broadcast_rows(std::int64_t k, ARow&& a_row, AStep&& a_step,
                                                             const typename S::T* b,
                                                             typename S::V (&acc)[MR][NV],
                                                             std::int64_t tail, Hook&& before_tail) {
  using V = typename S::V;
  constexpr int NR = NV * S::lanes;
  unroll<MR>([&](auto i) { unroll<NV>([&](auto j) { acc[i][j] = S::zero(); }); });
  // Forced inline: called twice, GCC at -O2 keeps the lambda out of line, and the accumulators
  // then live in memory (a third of the speed, measured on the AVX-512 kernel).
  auto steps = [&](std::int64_t count) PM_LAMBDA_ALWAYS_INLINE {
#pragma GCC unroll 4
    for (std::int64_t p = 0; p < count; ++p) {
      V bv[NV];
      unroll<NV>([&](auto j) { bv[j] = S::load(b + j * S::lanes); });
      unroll<MR>([&](auto i) {
        const V ai = S::bcast(a_row(i));
        unroll<NV>([&](auto j) { acc[i][j] = S::fma(ai, bv[j], acc[i][j]); });
      });
      a_step();
      b += NR;
    }
  };
  const std::int64_t head = k > tail ? k - tail : 0;
  steps(head);
  before_tail();
  steps(k - head);
}

// The packed kernels' loop: A a k-major micro-panel (ukernel.hpp), MR elements a step.
// The packed and direct-A loops call `each()` once a k step, after moving A: nothing by default,
// a prefetch of the next line of a stream in the AVX-512 kernels' _pf forms (gemm_avx512.cpp).
struct NoStep {
  void operator()() const {}
};
template <class S, int MR, int NV, class Hook, class Each = NoStep>
[[gnu::always_inline]] inline void accumulate_broadcast(std::int64_t k, const typename S::T* a,
                                                        const typename S::T* b,
                                                        typename S::V (&acc)[MR][NV],
                                                        std::int64_t tail, Hook&& before_tail, Each&& each = {}) {
  accumulate_broadcast_rows<S, MR, NV>(
      k, [&](auto i) PM_LAMBDA_ALWAYS_INLINE { return a + i; },
      [&]() PM_LAMBDA_ALWAYS_INLINE { a += MR; each(); }, b, acc, tail, before_tail);
}

// The direct-A kernels' loop: row i of the tile is a row-major a's row at a + i * lda (k
// contiguous), every one of the MR rows real (the driver packs an edge panel). The rows are
// reached as two bases (rows 0 and MR/2 on) plus the same MR/2 offsets, so that the k loop
// advances two pointers and addresses every row as base + offset: no row pointer spills.
template <class S, int MR, int NV, class Hook, class Each = NoStep>
[[gnu::always_inline]] inline void accumulate_broadcast_direct_a(
    std::int64_t k, const typename S::T* a, std::int64_t lda, const typename S::T* b,
    typename S::V (&acc)[MR][NV], std::int64_t tail, Hook&& before_tail, Each&& each = {}) {
  using T = typename S::T;
  constexpr int H = (MR + 1) / 2;  // rows per base
  std::intptr_t off[H];            // byte offsets of the rows below each base
  unroll<H>([&](auto i) { off[i] = static_cast<std::intptr_t>(i * lda * std::int64_t(sizeof(T))); });
  const char* lo = reinterpret_cast<const char*>(a);
  const char* hi = reinterpret_cast<const char*>(a + H * lda);
  accumulate_broadcast_rows<S, MR, NV>(
      k,
      [&](auto i) PM_LAMBDA_ALWAYS_INLINE {
        if constexpr (i < H)
          return reinterpret_cast<const T*>(lo + off[i]);
        else
          return reinterpret_cast<const T*>(hi + off[i - H]);
      },
      [&]() PM_LAMBDA_ALWAYS_INLINE {
        lo += sizeof(T);
        hi += sizeof(T);
        each();
      },
      b, acc, tail, before_tail);
}

// `iters` rounds of 12 independent FMA chains on whole vectors, for the core-peak estimate of
// kernel_table.cpp (12 * lanes * 2 flops per round): returns a value that depends on every FMA,
// so none is optimised away.
template <class S>
[[gnu::always_inline]] inline typename S::T fma_chains(long iters) {
  using T = typename S::T;
  using V = typename S::V;
  const T mul_s = T(0.999999f), add_s = T(1e-7f);
  V x[12];
  unroll<12>([&](auto i) {
    const T v = T(0.001f * (i + 1));
    x[i] = S::bcast(&v);
  });
  const V mul = S::bcast(&mul_s), add = S::bcast(&add_s);
  for (long it = 0; it < iters; ++it) unroll<12>([&](auto i) { x[i] = S::fma(x[i], mul, add); });
  V s = x[0];
  unroll<11>([&](auto i) { s = S::add(s, x[i + 1]); });
  alignas(64) T out[S::lanes];  // a store and a scalar sum: GCC 12's reduce intrinsics trip
  S::store(out, s);             // -Wuninitialized
  T sum = 0;
  for (T v : out) sum += v;
  return sum;
}

// c = (accumulate ? c : 0) + acc on the m x n tile at c: whole vectors for a full tile; for an
// edge tile rows below m are skipped and columns past n left alone (partial vectors).
template <class S, int MR, int NV>
[[gnu::always_inline]] inline void store_tile(const typename S::V (&acc)[MR][NV], typename S::T* c,
                                              std::int64_t ldc, int m, int n, bool accumulate) {
  using T = typename S::T;
  if (m == MR && n == NV * S::lanes) {
    unroll<MR>([&](auto i) {
      unroll<NV>([&](auto j) {
        T* cij = c + i * ldc + j * S::lanes;
        S::store(cij, accumulate ? S::add(S::load(cij), acc[i][j]) : acc[i][j]);
      });
    });
    return;
  }
  unroll<MR>([&](auto i) {
    if (i >= m) return;
    unroll<NV>([&](auto j) {
      const int left = n - j * S::lanes;  // columns of this vector inside the tile
      if (left <= 0) return;
      T* cij = c + i * ldc + j * S::lanes;
      if (left >= S::lanes) {
        S::store(cij, accumulate ? S::add(S::load(cij), acc[i][j]) : acc[i][j]);
      } else {
        S::store_part(cij, accumulate ? S::add(S::load_part(cij, left), acc[i][j]) : acc[i][j],
                      left);
      }
    });
  });
}

}  // namespace
}  // namespace portmat::cpu
