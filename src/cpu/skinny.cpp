// See skinny.hpp. Portable C++ with GCC vector extensions; the kernels are compiled twice, for
// AVX2 + FMA (function target attributes) and for the baseline, and the variant for the CPU at
// hand is chosen once at run time. This file is built with -ffp-contract=fast (cpu.cmake) so that a * b + c
// becomes one FMA where the CPU has it (more accurate, not less).
#include "cpu/skinny.hpp"

#include <algorithm>
#include <atomic>
#include <complex>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/gemm_driver.hpp"
#include "cpu/kernel_table.hpp"
#include "cpu/partial_sums.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/vector_ext.hpp"

namespace portmat::cpu {

namespace {

// The sums of N vectors' lanes (N a power of two, at most the lanes L), out[i] = the sum of v[i]'s
// lanes, as a tree of two-vector shuffles: comb(x, y) with groups of G lanes = the groups' lower
// halves of x and y side by side plus their upper halves, so N vectors become N / 2 with groups of
// half the size, and one vector of N groups at the end (then halved in place down to one lane a
// group). 3 instructions a pair: for 8 vectors of 16 floats 21 + 2 where summing each vector on its
// own (an extract and an add a level) took 64. Through an array on the stack (a store, then scalar
// adds) each sum cost 40-50 cycles, as much as a 256-long row's multiply-adds: (256 x 256) @ (256 x
// 2) and (256 x 4) took 8.6 and 16.5 us against 4.5 for one column (2-core machine, AVX-512; NumPy
// 4.2 and 6.1).
template <class T, int B, int G, bool Upper, int... I>
[[gnu::always_inline]] inline Vec<T, B> halves(const Vec<T, B>& x, const Vec<T, B>& y,
                                               std::integer_sequence<int, I...>) {
  constexpr int L = kLanes<T, B>;
  return __builtin_shufflevector(x, y, ((I / (L / 2)) * L + (I % (L / 2)) / (G / 2) * G + I % (G / 2) +
                                        (Upper ? G / 2 : 0))...);
}
template <class T, int B, int G>
[[gnu::always_inline]] inline Vec<T, B> comb(const Vec<T, B>& x, const Vec<T, B>& y) {
  constexpr auto lanes = std::make_integer_sequence<int, kLanes<T, B>>{};
  return halves<T, B, G, false>(x, y, lanes) + halves<T, B, G, true>(x, y, lanes);
}
template <class T, int B, int N, int G = kLanes<T, B>, int Total = N>
[[gnu::always_inline]] inline void lane_sums(Vec<T, B>* v, T* out) {
  static_assert(N >= 1 && (N & (N - 1)) == 0 && Total <= kLanes<T, B>, "a power of two, at most the lanes");
  if constexpr (N > 1) {
    for (int i = 0; i < N / 2; ++i) v[i] = comb<T, B, G>(v[2 * i], v[2 * i + 1]);
    lane_sums<T, B, N / 2, G / 2, Total>(v, out);
  } else if constexpr (G > 1) {
    v[0] = comb<T, B, G>(v[0], v[0]);
    lane_sums<T, B, 1, G / 2, Total>(v, out);
  } else {
    for (int i = 0; i < Total; ++i) out[i] = v[0][i];
  }
}

// With two short rows or more (an accumulator chain per row and short row, one vector of each
// row of L a step), the loads of L's rows wait on L2: each row of L is prefetched this far ahead
// (AVX-512: a line a step). One thread, rows of L from L2, GB/s of L, without / with: 256 x 512
// floats 46.9-48.1 / 51.2-58.0 for 2 short rows, 512 x 512 46.1 / 57.4 for 2 and 40.6 / 44.6 for 4;
// from L3 (1024 x 1024, 2048 x 2048) both 23-28, and one short row (two vectors a row a step)
// unchanged (61-65 in L2). A complex matrix times a vector is such a product with 2 short rows.
constexpr std::int64_t kDotsPrefetchBytes = 512;

// out[r * ors + s * oss] = sum_k L[r * ldl + k] * S[s * K + k] for rows [r0, r1) and s < ns
// (S holds NS >= ns rows, the extra ones zero). R rows of L at a time share each load of S, and
// U partial sums per (row, short row) keep enough FMA chains in flight (4-cycle latency, two per
// cycle): R * NS * U is at least 8 (16 for 4 x 4 with AVX-512's 32 registers).
//
// Where L's rows do not start on a vector boundary but all at the same offset from one (ldl a
// multiple of the lanes), the vector loop starts h elements in, so that each of its loads of L
// reads one cache line rather than parts of two: NumPy's arrays mostly start 16 bytes past a
// 64-byte line, and with AVX-512 every load then took two lines' turns. The h elements before it
// and the vectors' worth after it are whole vectors too, read where they lie, with the lanes of
// other elements' products dropped (not multiplied by zero: an infinite element would make NaN).
// 2-core Xeon, one thread, a stand-alone copy of the loop, (512 x 256) float32 in L2: 7.45 us
// aligned against 10.42 us at NumPy's offset.
template <class T, int NS, int B>
[[gnu::always_inline]] inline void dots(const T* L, std::int64_t ldl, const T* S, std::int64_t K,
                                        std::int64_t r0, std::int64_t r1, int ns, T* out,
                                        std::int64_t ors, std::int64_t oss) {
  constexpr int V = kLanes<T, B>;
  constexpr int R = NS <= 2 || B >= 64 ? 4 : 2;  // 4 x 4 zmm accumulators fit AVX-512's 32 registers
  constexpr int U = NS * R >= 8 ? 1 : 8 / (NS * R);
  // Elements before the first vector boundary of every row.
  const std::int64_t h = K >= 2 * V * U ? elements_to_boundary<T, B>(L + r0 * ldl, ldl) : 0;
  const std::int64_t kv = h + (K - h) / (V * U) * (V * U);  // the unrolled loop: [h, kv)
  const std::int64_t kw = h + (K - h) / V * V;              // then single vectors: [kv, kw)
  // The lanes' numbers, to keep the head's first h and the tail's last K - kw.
  using LaneInt = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  using Lanes = typename VecOf<LaneInt, B>::type;
  Lanes lane{};
  for (int i = 0; i < V; ++i) lane[i] = i;
  auto rows = [&](auto rc, std::int64_t r) PM_LAMBDA_ALWAYS_INLINE {
    constexpr int RC = decltype(rc)::value;
    Vec<T, B> acc[RC][NS][U];
    for (int q = 0; q < RC; ++q)
      for (int s = 0; s < NS; ++s)
        for (int u = 0; u < U; ++u) acc[q][s][u] = Vec<T, B>{};
    if (h > 0) {  // [0, h) from the row's first vector; with h > 0, K >= 2V
      const Lanes keep = lane < static_cast<LaneInt>(h);
      for (int s = 0; s < NS; ++s) {
        const Vec<T, B> sv = load<T, B>(S + s * K);
        for (int q = 0; q < RC; ++q) acc[q][s][0] += keep ? load<T, B>(L + (r + q) * ldl) * sv : Vec<T, B>{};
      }
    }
    for (std::int64_t k = h; k < kv; k += V * U)
      for (int u = 0; u < U; ++u) {
        Vec<T, B> lv[RC];
        for (int q = 0; q < RC; ++q) {
          if constexpr (NS >= 2 && B >= 64)  // one vector a line: a prefetch a line (kDotsPrefetchBytes)
            __builtin_prefetch(L + (r + q) * ldl + k + u * V + kDotsPrefetchBytes / sizeof(T));
          lv[q] = load<T, B>(L + (r + q) * ldl + k + u * V);
          in_register(lv[q]);
        }
        for (int s = 0; s < NS; ++s) {
          Vec<T, B> sv = load<T, B>(S + s * K + k + u * V);
          in_register(sv);
          for (int q = 0; q < RC; ++q) acc[q][s][u] += lv[q] * sv;
        }
      }
    if (h > 0) {
      for (std::int64_t k = kv; k < kw; k += V)
        for (int s = 0; s < NS; ++s) {
          const Vec<T, B> sv = load<T, B>(S + s * K + k);
          for (int q = 0; q < RC; ++q) acc[q][s][0] += load<T, B>(L + (r + q) * ldl + k) * sv;
        }
      if (kw < K) {  // [kw, K) from the row's last vector
        const Lanes keep = lane >= static_cast<LaneInt>(V - (K - kw));
        for (int s = 0; s < NS; ++s) {
          const Vec<T, B> sv = load<T, B>(S + s * K + K - V);
          for (int q = 0; q < RC; ++q) acc[q][s][0] += keep ? load<T, B>(L + (r + q) * ldl + K - V) * sv : Vec<T, B>{};
        }
      }
    }
    // The RC x NS sums, by lane_sums in groups of at most V vectors.
    constexpr int N = RC * NS, G = N < V ? N : V;
    Vec<T, B> v[N];
    for (int q = 0; q < RC; ++q)
      for (int s = 0; s < NS; ++s) {
        v[q * NS + s] = acc[q][s][0];
        for (int u = 1; u < U; ++u) v[q * NS + s] += acc[q][s][u];
      }
    T sums[N];
    for (int g = 0; g < N; g += G) lane_sums<T, B, G>(v + g, sums + g);
    for (int q = 0; q < RC; ++q)
      for (int s = 0; s < NS; ++s) {  // NS, not ns: constant indices keep acc in registers
        if (s >= ns) break;
        T sum = sums[q * NS + s];
        const T* l = L + (r + q) * ldl;
        for (std::int64_t k = h > 0 ? K : kv; k < K; ++k) sum += l[k] * S[s * K + k];  // h > 0: all in vectors
        out[(r + q) * ors + s * oss] = sum;
      }
  };
  std::int64_t r = r0;
  for (; r + R <= r1; r += R) rows(std::integral_constant<int, R>{}, r);
  for (; r < r1; ++r) rows(std::integral_constant<int, 1>{}, r);
}

// acc[s * W + x] += sum_{k0 <= k < k1} Sk[k * NS + s] * L[k * ldl + x] for x < W, s < NS: a
// thread's rows of L, in blocks of kAxpyRows rows (contiguous memory, streamed in order, then
// held in L2) swept by blocks of columns whose accumulators fit in L1. Threads take whole rows:
// each reads its share of L front to back, the way the hardware prefetchers stream best.
constexpr std::int64_t kAxpyRows = 64;
constexpr std::int64_t kAxpyL1Bytes = 16 << 10;

// Rows of L a step for NS short rows: each row is a stream from memory, and one core's reads
// are bounded by how many it has in flight, so where the multiply-adds are few (one or two short
// rows) a step takes eight. A vector times a matrix, 2-core machine (Zen 4), GFLOP/s, 4 -> 8 rows:
// one thread, 4096^2 float32 11.8 -> 12.9 (OpenBLAS 13.3); two threads, 2048^2 float32 (in L3)
// 51 -> 60 (NumPy 45), float64 15.9 -> 18.5 (16.8), 4096^2 float32 29.9 -> 33.6 (32.6) where
// the machine served it from L3 in part and equal where it streamed all of it from memory;
// (2 x 4096) @ (4096 x 4096) 30.7 -> 34.5. Four short rows: no change (44.2 / 43.6).
template <int NS>
constexpr int kAxpyStep = NS <= 2 ? 8 : 4;

// acc[x] += sum_{q < R} s[q * NS] * l_q[x] for x < w, rows l_q = l0 + q * ldl: R rows of L (1, 4
// or 8), their products summed as a tree of pairs (a fixed order: the same bits every call).
template <class T, int NS, int R>
[[gnu::always_inline]] inline void axpy_step(const T* l0, std::int64_t ldl, const T* s, std::int64_t w, T* acc) {
  const T* l[R];
  T sv[R];
  for (int q = 0; q < R; ++q) l[q] = l0 + q * ldl, sv[q] = s[q * NS];
  if constexpr (R == 1) {
    for (std::int64_t x = 0; x < w; ++x) acc[x] += sv[0] * l[0][x];
  } else if constexpr (R == 4) {
    for (std::int64_t x = 0; x < w; ++x)
      acc[x] += (sv[0] * l[0][x] + sv[1] * l[1][x]) + (sv[2] * l[2][x] + sv[3] * l[3][x]);
  } else {
    static_assert(R == 8, "1, 4 or 8 rows a step");
    for (std::int64_t x = 0; x < w; ++x)
      acc[x] += ((sv[0] * l[0][x] + sv[1] * l[1][x]) + (sv[2] * l[2][x] + sv[3] * l[3][x])) +
                ((sv[4] * l[4][x] + sv[5] * l[5][x]) + (sv[6] * l[6][x] + sv[7] * l[7][x]));
  }
}

// The same for every short row s < NS at once, acc_s = acc + s * W: each element of L's R rows is
// loaded once for all of them, where axpy_step per short row reads the rows NS times (from L1 or
// L2: the block's rows for NS = 2 are 64 KiB). The sums are axpy_step's tree.
template <class T, int NS, int R, int B>
[[gnu::always_inline]] inline void axpy_steps(const T* l0, std::int64_t ldl, const T* s, std::int64_t w, T* acc,
                                              std::int64_t W) {
  static_assert(R == 4 || R == 8, "4 or 8 rows a step");
  constexpr int V = kLanes<T, B>;
  const T* l[R];
  T sv[NS][R];
  for (int q = 0; q < R; ++q) {
    l[q] = l0 + q * ldl;
    for (int t = 0; t < NS; ++t) sv[t][q] = s[q * NS + t];
  }
  auto sum = [&](int t, const auto* v) {
    if constexpr (R == 4)
      return (sv[t][0] * v[0] + sv[t][1] * v[1]) + (sv[t][2] * v[2] + sv[t][3] * v[3]);
    else
      return ((sv[t][0] * v[0] + sv[t][1] * v[1]) + (sv[t][2] * v[2] + sv[t][3] * v[3])) +
             ((sv[t][4] * v[4] + sv[t][5] * v[5]) + (sv[t][6] * v[6] + sv[t][7] * v[7]));
  };
  std::int64_t x = 0;
  for (; x + V <= w; x += V) {
    Vec<T, B> v[R];
    for (int q = 0; q < R; ++q) v[q] = load<T, B>(l[q] + x);
    for (int t = 0; t < NS; ++t) store(acc + t * W + x, load<T, B>(acc + t * W + x) + sum(t, v));
  }
  for (; x < w; ++x) {
    T v[R];
    for (int q = 0; q < R; ++q) v[q] = l[q][x];
    for (int t = 0; t < NS; ++t) acc[t * W + x] += sum(t, v);
  }
}

template <class T, int NS, int B>
[[gnu::always_inline]] inline void axpy(const T* L, std::int64_t ldl, const T* Sk, std::int64_t k0,
                                        std::int64_t k1, std::int64_t W, T* acc) {
  constexpr std::int64_t XB = kAxpyL1Bytes / (NS * sizeof(T));
  constexpr int R = kAxpyStep<NS>;
  // Where L's rows start at one offset from a vector boundary (ldl a multiple of the lanes), the
  // first block of columns ends at the first boundary, so that the others' loads of L read whole
  // cache lines (dots' why: NumPy's arrays mostly start 16 bytes past a 64-byte line).
  constexpr std::int64_t V = kLanes<T, B>;
  const std::int64_t h = W >= 4 * V ? elements_to_boundary<T, B>(L + k0 * ldl, ldl) : 0;
  for (std::int64_t kb = k0; kb < k1; kb += kAxpyRows) {
    const std::int64_t ke = std::min(k1, kb + kAxpyRows);
    for (std::int64_t xb = 0; xb < W; xb = xb == 0 && h > 0 ? h : xb + XB) {
      const std::int64_t w = std::min(xb == 0 && h > 0 ? h : XB, W - xb);
      // Several rows of L a step: as many streams from memory in flight, and a fraction of the
      // accumulator traffic. A vector times a 4096 x 4096 float32 matrix, 2-core machine: one
      // row a step 4.0-4.8 ms, four 2.3 ms (NumPy 1.9-2.2); 4 rows: 7.0-7.6 -> 4.7-5.8 ms.
      std::int64_t k = kb;
      if constexpr (NS > 1)
        for (; k + R <= ke; k += R) axpy_steps<T, NS, R, B>(L + k * ldl + xb, ldl, Sk + k * NS, w, acc + xb, W);
      for (; k + R <= ke; k += R)
        for (int s = 0; s < NS; ++s) axpy_step<T, NS, R>(L + k * ldl + xb, ldl, Sk + k * NS + s, w, acc + s * W + xb);
      if constexpr (R > 4) {
        if constexpr (NS > 1)
          for (; k + 4 <= ke; k += 4) axpy_steps<T, NS, 4, B>(L + k * ldl + xb, ldl, Sk + k * NS, w, acc + xb, W);
        for (; k + 4 <= ke; k += 4)
          for (int s = 0; s < NS; ++s) axpy_step<T, NS, 4>(L + k * ldl + xb, ldl, Sk + k * NS + s, w, acc + s * W + xb);
      }
      for (; k < ke; ++k)
        for (int s = 0; s < NS; ++s) axpy_step<T, NS, 1>(L + k * ldl + xb, ldl, Sk + k * NS + s, w, acc + s * W + xb);
    }
  }
}

// P[s * ldp + x] (+)= sum_{k0 <= k < k1} Sk[k * NS + s] * L[k * ldl + x] for x in [x0, x1), s < NS
// (NS a multiple of R; with `fresh` P's old values are not read, so it need not be zeroed): tiles of
// R short rows by C vectors of L's columns in registers over a chunk of kb rows of L, then added
// onto the partial sums P. Unlike axpy, which loads and stores its accumulators for every 4 rows of
// L and reads each vector of L once per short row, the accumulators are loaded once per kb rows and
// a vector of L once per R short rows (from L1 after the first). The tile in use is 4 x 2 (a cache
// line of floats, 8 accumulators): 8 rows by one vector broadcast an element of a per multiply-add
// and ran at half the rate (docs/cpu.md); 2 x 4 lost too.
// One column tile of rows_tiles: short rows [0, NS) in groups of R, C vectors of columns at x, over
// L's rows [k, ke).
template <class T, int NS, int R, int C, int B>
[[gnu::always_inline]] inline void rows_tile(const T* L, std::int64_t ldl, const T* Sk, std::int64_t k,
                                             std::int64_t ke, std::int64_t x, bool init, T* P, std::int64_t ldp) {
  constexpr int V = kLanes<T, B>;
#pragma GCC unroll 8
  for (int g = 0; g < NS; g += R) {
    T* p = P + g * ldp + x;
    Vec<T, B> acc[R][C];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < C; ++j) acc[i][j] = init ? Vec<T, B>{} : load<T, B>(p + i * ldp + j * V);
    for (std::int64_t q = k; q < ke; ++q) {
      Vec<T, B> l[C];
#pragma GCC unroll 8
      for (int j = 0; j < C; ++j) l[j] = load<T, B>(L + q * ldl + x + j * V);
      const T* s = Sk + q * NS + g;
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const T si = s[i];
#pragma GCC unroll 8
        for (int j = 0; j < C; ++j) acc[i][j] += si * l[j];
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < C; ++j) store(p + i * ldp + j * V, acc[i][j]);
  }
}

template <class T, int NS, int R, int B>
[[gnu::always_inline]] inline void rows_tiles(const T* L, std::int64_t ldl, const T* Sk, std::int64_t k0,
                                              std::int64_t k1, std::int64_t x0, std::int64_t x1,
                                              std::int64_t kb, bool fresh, T* P, std::int64_t ldp) {
  constexpr int V = kLanes<T, B>;
  static_assert(NS % R == 0, "whole groups of R short rows");
  for (std::int64_t k = k0; k < k1; k += kb) {
    const std::int64_t ke = std::min(k1, k + kb);
    const bool init = fresh && k == k0;
    std::int64_t x = x0;
    for (; x + 2 * V <= x1; x += 2 * V) rows_tile<T, NS, R, 2, B>(L, ldl, Sk, k, ke, x, init, P, ldp);
    for (; x + V <= x1; x += V) rows_tile<T, NS, R, 1, B>(L, ldl, Sk, k, ke, x, init, P, ldp);
    for (; x < x1; ++x)
      for (int i = 0; i < NS; ++i) {
        T sum = init ? T(0) : P[i * ldp + x];
        for (std::int64_t q = k; q < ke; ++q) sum += Sk[q * NS + i] * L[q * ldl + x];
        P[i * ldp + x] = sum;
      }
  }
}

// The entry points the loader picks a clone of. NS, the padded count of short rows, is one of
// 1, 2, 4 or 8 (axpy only) so that every accumulator array has a compile-time size. The switches stay in
// the cloned functions themselves (always-inline helpers, no lambdas: a lambda is a function of
// its own, compiled for the baseline only). B: the vector's bytes.
template <class T, int B>
[[gnu::always_inline]] inline void dots_any(const T* L, std::int64_t ldl, const T* S, std::int64_t K,
                                            std::int64_t r0, std::int64_t r1, int ns, int NS, T* out,
                                            std::int64_t ors, std::int64_t oss) {
  switch (NS) {
    case 1: return dots<T, 1, B>(L, ldl, S, K, r0, r1, ns, out, ors, oss);
    case 2: return dots<T, 2, B>(L, ldl, S, K, r0, r1, ns, out, ors, oss);
    default: return dots<T, 4, B>(L, ldl, S, K, r0, r1, ns, out, ors, oss);
  }
}
template <class T, int B>
[[gnu::always_inline]] inline void axpy_any(const T* L, std::int64_t ldl, const T* Sk, std::int64_t k0,
                                            std::int64_t k1, std::int64_t W, int NS, T* acc) {
  switch (NS) {
    case 1: return axpy<T, 1, B>(L, ldl, Sk, k0, k1, W, acc);
    case 2: return axpy<T, 2, B>(L, ldl, Sk, k0, k1, W, acc);
    case 4: return axpy<T, 4, B>(L, ldl, Sk, k0, k1, W, acc);
    default: return axpy<T, 8, B>(L, ldl, Sk, k0, k1, W, acc);
  }
}

template <class T, int B>
[[gnu::always_inline]] inline void rows_any(const T* L, std::int64_t ldl, const T* Sk, std::int64_t k0,
                                            std::int64_t k1, std::int64_t x0, std::int64_t x1, std::int64_t kb,
                                            bool fresh, int NS, T* P, std::int64_t ldp) {
  switch (NS) {
    case 8: return rows_tiles<T, 8, 4, B>(L, ldl, Sk, k0, k1, x0, x1, kb, fresh, P, ldp);
    case 12: return rows_tiles<T, 12, 4, B>(L, ldl, Sk, k0, k1, x0, x1, kb, fresh, P, ldp);
    default: return rows_tiles<T, 16, 4, B>(L, ldl, Sk, k0, k1, x0, x1, kb, fresh, P, ldp);
  }
}

template <class T>
using DotsFn = void (*)(const T*, std::int64_t, const T*, std::int64_t, std::int64_t, std::int64_t, int, int, T*,
                        std::int64_t, std::int64_t);
template <class T>
using AxpyFn = void (*)(const T*, std::int64_t, const T*, std::int64_t, std::int64_t, std::int64_t, int, T*);
template <class T>
using RowsFn = void (*)(const T*, std::int64_t, const T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                        std::int64_t, bool, int, T*, std::int64_t);

// One clone set: the entry points, one per dtype and kernel, compiled with ATTR (a target
// attribute, or nothing for the baseline) and B-byte vectors, the templates above inlined into each.
#define PM_SKINNY_CLONE_T(T, TN, SUFFIX, ATTR, B)                                                                \
  ATTR void dots_##TN##_##SUFFIX(const T* L, std::int64_t ldl, const T* S, std::int64_t K, std::int64_t r0,    \
                                 std::int64_t r1, int ns, int NS, T* out, std::int64_t ors, std::int64_t oss) { \
    dots_any<T, B>(L, ldl, S, K, r0, r1, ns, NS, out, ors, oss);                                               \
  }                                                                                                            \
  ATTR void axpy_##TN##_##SUFFIX(const T* L, std::int64_t ldl, const T* Sk, std::int64_t k0, std::int64_t k1,  \
                                 std::int64_t W, int NS, T* acc) {                                             \
    axpy_any<T, B>(L, ldl, Sk, k0, k1, W, NS, acc);                                                             \
  }                                                                                                            \
  ATTR void rows_##TN##_##SUFFIX(const T* L, std::int64_t ldl, const T* Sk, std::int64_t k0, std::int64_t k1,  \
                                 std::int64_t x0, std::int64_t x1, std::int64_t kb, bool fresh, int NS, T* P,  \
                                 std::int64_t ldp) {                                                           \
    rows_any<T, B>(L, ldl, Sk, k0, k1, x0, x1, kb, fresh, NS, P, ldp);                                         \
  }
#define PM_SKINNY_CLONES(SUFFIX, ATTR, B)                  \
  PM_SKINNY_CLONE_T(float, f32, SUFFIX, ATTR, B)           \
  PM_SKINNY_CLONE_T(double, f64, SUFFIX, ATTR, B)          \
  PM_SKINNY_CLONE_T(std::uint32_t, u32, SUFFIX, ATTR, B)   \
  PM_SKINNY_CLONE_T(std::uint64_t, u64, SUFFIX, ATTR, B)
// The SkinnyKernels of a clone set.
#define PM_SKINNY_SET(SUFFIX, B)                                                                                \
  {{dots_f32_##SUFFIX, axpy_f32_##SUFFIX, rows_f32_##SUFFIX}, {dots_f64_##SUFFIX, axpy_f64_##SUFFIX, rows_f64_##SUFFIX}, \
   {dots_u32_##SUFFIX, axpy_u32_##SUFFIX, rows_u32_##SUFFIX}, {dots_u64_##SUFFIX, axpy_u64_##SUFFIX, rows_u64_##SUFFIX}, B}

// The baseline in registers of its own width (SSE2's 16 bytes on x86-64, so that in_register holds).
#ifdef __x86_64__
PM_SKINNY_CLONES(base, , 16)
#define PM_SKINNY_BASE_BYTES 16
#else
PM_SKINNY_CLONES(base, , 32)
#define PM_SKINNY_BASE_BYTES 32
#endif
#ifdef PM_CPU_AVX2_CLONES
PM_SKINNY_CLONES(avx2, PM_TARGET_AVX2, 32)
PM_SKINNY_CLONES(avx512, PM_TARGET_AVX512, 64)
#endif

// The three kernels of one element type.
template <class T>
struct SkinnyOf {
  DotsFn<T> dots;
  AxpyFn<T> axpy;
  RowsFn<T> rows;
};

struct SkinnyKernels {
  SkinnyOf<float> f32;
  SkinnyOf<double> f64;
  SkinnyOf<std::uint32_t> u32;  // the integers' wrap-around products (cpu_backend.cpp)
  SkinnyOf<std::uint64_t> u64;
  int vector_bytes;  // rows_tiles' tile is two vectors wide

  template <class T>
  const SkinnyOf<T>& of() const {
    if constexpr (std::is_same_v<T, float>) return f32;
    else if constexpr (std::is_same_v<T, double>) return f64;
    else if constexpr (std::is_same_v<T, std::uint32_t>) return u32;
    else return u64;
  }
};

// The clones of the ISA the packed GEMM runs (kernel_table.cpp's choice, PORTMAT_CPU_ISA
// included), as small.cpp's: AVX-512 where it runs AVX-512.
const SkinnyKernels& skinny_kernels() {
  static const SkinnyKernels chosen = [] {
    SkinnyKernels k = PM_SKINNY_SET(base, PM_SKINNY_BASE_BYTES);
#ifdef PM_CPU_AVX2_CLONES
    const std::string isa = active_kernel_set().isa;  // "avx2" only where the CPU has AVX2 and FMA
    if (isa == "avx512")
      k = PM_SKINNY_SET(avx512, 64);
    else if (isa == "avx2")
      k = PM_SKINNY_SET(avx2, 32);
#endif
    return k;
  }();
  return chosen;
}

template <class T>
void dots_kernel(const T* L, std::int64_t ldl, const T* S, std::int64_t K, std::int64_t r0, std::int64_t r1,
                 int ns, int NS, T* out, std::int64_t ors, std::int64_t oss) {
  skinny_kernels().of<T>().dots(L, ldl, S, K, r0, r1, ns, NS, out, ors, oss);
}
template <class T>
void axpy_kernel(const T* L, std::int64_t ldl, const T* Sk, std::int64_t k0, std::int64_t k1, std::int64_t W,
                 int NS, T* acc) {
  skinny_kernels().of<T>().axpy(L, ldl, Sk, k0, k1, W, NS, acc);
}

template <class T>
void rows_kernel(const T* L, std::int64_t ldl, const T* Sk, std::int64_t k0, std::int64_t k1, std::int64_t x0,
                 std::int64_t x1, std::int64_t kb, bool fresh, int NS, T* P, std::int64_t ldp) {
  skinny_kernels().of<T>().rows(L, ldl, Sk, k0, k1, x0, x1, kb, fresh, NS, P, ldp);
}

// The dots kernel's rows of L a part when threads share them (skinny_gemm, complex_dots).
constexpr std::int64_t kDotsPieceRows = 64;

// out (as dots_kernel's) for all `span` rows of L, in pieces of kDotsPieceRows claimed by up to
// `threads` threads, each from its home range first: a loop of products with one L of a few MiB
// then finds each thread's rows in its own core's L2 (docs/cpu.md, "Home ranges for the dots").
template <class T>
void dots_pieces(const T* L, std::int64_t ldl, const T* S, std::int64_t K, std::int64_t span, int ns, int NS,
                 T* out, std::int64_t ors, std::int64_t oss, int threads) {
  run_parts_homed((span + kDotsPieceRows - 1) / kDotsPieceRows, threads, [&](std::int64_t p) {
    const std::int64_t r0 = p * kDotsPieceRows;
    dots_kernel<T>(L, ldl, S, K, r0, std::min(span, r0 + kDotsPieceRows), ns, NS, out, ors, oss);
  });
}

// Bytes of the long operand per thread when a dot-product kernel splits K (skinny_gemm).
constexpr std::int64_t kDotsSplitBytes = 1 << 20;

template <class T>
T at(const core::HostMatrix& m, std::int64_t i, std::int64_t j) {
  const T* p = static_cast<const T*>(m.data) + m.offset;
  return m.col_major ? p[j * m.ld + i] : p[i * m.ld + j];
}

// PORTMAT_CPU_ROWS=0 sends 5-16 rows back to axpy (5-8) and the packed GEMM (9-16), for A/B
// measurements (read once per process).
bool rows_enabled() {
  static const bool on = !switched_off("PORTMAT_CPU_ROWS");
  return on;
}

// rows_tiles' chunk of L's rows. Where L's rows are a multiple of 4 KiB apart (N = 4096 floats), a
// chunk's rows at one column all fall in one L1 set, and past its 8 ways the tiles' later passes
// over them (the next groups of short rows, the line's other half) missed: 2-core machine, 8 x 4096
// @ 4096 x 4096, 3.0 / 4.4 / 5.3 ms with chunks of 8 / 12 / 16 rows, 16 rows 5.3 / 9.1 / 10.6 ms.
constexpr std::int64_t kRowsChunk = 8;
// A thread's block of columns: at most this many bytes of sums (NS rows of it), which stay in L2
// beside the chunks of b streaming through. 2-core machine, ms, column blocks of at most 32 / 64 /
// 128 KiB of sums (each thread one half of c where that fits): 8 x 4096 @ 4096 x 4096 2.7 / 2.4-2.9
// / 2.5, 16 rows 5.8-5.9 / 5.3-6.1 / 4.5-4.6, 12 rows 4.2-4.3 / 5.0 / 3.5.
constexpr std::int64_t kRowsPartBytes = 128 << 10;
// Taken (rows_path) from K = 2 chunks on (K <= 16 with at most 64 rows is small.cpp's), for a b of
// at least 1 KiB rows: the last columns (under a vector) are scalar code.
constexpr std::int64_t kRowsMinK = 2 * kRowsChunk;
constexpr std::int64_t kRowsMinWidthBytes = 1024;

int rows_ns(std::int64_t M) { return M <= 8 ? 8 : M <= 12 ? 12 : 16; }

// Threads for a product that streams its long operand (long_bytes of it): enough work for each
// (kMinFlopsPerThread) or enough of that operand (kMinStreamBytesPerThread); no more than asked.
int streaming_threads(double flops, double long_bytes, int threads) {
  return static_cast<int>(std::max<double>(
      1, std::min<double>(threads, std::max(flops / kMinFlopsPerThread, long_bytes / kMinStreamBytesPerThread))));
}

// 5-16 rows of a against a row-major b: a's panel (K x NS, k-major, rows past M zero), then threads
// take blocks of c's columns (one each where kRowsPartBytes allows), each summed over all of K by
// rows_tiles into a buffer of its own in L2 (rows one line longer than the block and 64-byte
// aligned, so that a tile's two vectors are one line and its rows do not share b's L1 set), then
// copied into c.
template <class T>
void rows_gemm(const core::HostMatrix& a, const core::HostMatrix& b, T* c, std::int64_t ldc, int threads) {
  const std::int64_t M = a.rows, K = a.cols, N = b.cols;
  const int NS = rows_ns(M);
  const int use = streaming_threads(2.0 * M * N * K, static_cast<double>(N) * K * sizeof(T), threads);
  const std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));
  const std::size_t panel_bytes = static_cast<std::size_t>(NS * K) * sizeof(T);
  Scratch once;
  T* S = kept_panel<T>(panel_bytes, once);  // a's panel
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t s = 0; s < NS; ++s) S[k * NS + s] = s < M ? at<T>(a, s, k) : T(0);
  const std::int64_t tile = 2 * skinny_kernels().vector_bytes / static_cast<std::int64_t>(sizeof(T));
  const std::int64_t w_max = std::max<std::int64_t>(tile, kRowsPartBytes / (NS * static_cast<std::int64_t>(sizeof(T))) / tile * tile);
  const std::int64_t w = std::min(w_max, ((N + use - 1) / use + tile - 1) / tile * tile);
  const std::int64_t parts = (N + w - 1) / w, ldw = w + line;
  const T* L = static_cast<const T*>(b.data) + b.offset;
  run_parts(parts, use, [&](std::int64_t p) {
    thread_local Scratch sums;
    T* P = static_cast<T*>(sums.get(static_cast<std::size_t>(NS * ldw) * sizeof(T)));
    const std::int64_t x0 = p * w, x1 = std::min(N, x0 + w);
    rows_kernel<T>(L + x0, b.ld, S, 0, K, 0, x1 - x0, kRowsChunk, true, NS, P, ldw);
    for (std::int64_t s = 0; s < M; ++s)
      std::memcpy(c + s * ldc + x0, P + s * ldw, static_cast<std::size_t>(x1 - x0) * sizeof(T));
  });
}

}  // namespace

bool rows_path(std::int64_t M, std::int64_t K, std::int64_t N, std::size_t elem) {
  if (M <= kSkinnyMax || M > kSkinnyRowsMax || !rows_enabled()) return false;
  return N * static_cast<std::int64_t>(elem) >= kRowsMinWidthBytes && K >= kRowsMinK;
}

template <class T>
bool skinny_gemm(const core::HostMatrix& a, const core::HostMatrix& b, T* c, std::int64_t ldc,
                 int threads) {
  const std::int64_t M = a.rows, K = a.cols, N = b.cols;
  if (!b.col_major && rows_path(M, K, N, sizeof(T))) {
    rows_gemm<T>(a, b, c, ldc, threads);
    return true;
  }
  bool few_rows;
  if (M <= kSkinnyMax || N <= kSkinnyMax) {
    // Few rows, unless there are few columns too and only that view gives the dots kernel (the
    // long operand's rows contiguous along k): a dot product of two vectors, say, as a @ b with a
    // row-major, rather than K rows of b one element wide.
    few_rows = M <= kSkinnyMax && !(N <= kSkinnyMax && !a.col_major && !b.col_major);
  } else if (M <= kSkinnyAxpyMax && !b.col_major) {  // axpy only: b's rows streamed once
    few_rows = true;
  } else if (N <= kSkinnyAxpyMax && a.col_major) {  // axpy only: a's columns streamed once
    few_rows = false;
  } else {
    return false;
  }
  const int ns = static_cast<int>(few_rows ? M : N);
  const int NS = ns <= 1 ? 1 : ns <= 2 ? 2 : ns <= 4 ? 4 : 8;
  // The long operand L is read where it is, row by row: b (few rows of a) or a (few columns of
  // b), transposed where its storage is. The kernel follows from L's layout:
  //   few rows, b row-major:      axpy, L = b,   S = a,   out (s = i, x = j)
  //   few rows, b column-major:   dots, L = b^T, S = a,   out (r = j, s = i)
  //   few columns, a row-major:   dots, L = a,   S = b^T, out (r = i, s = j)
  //   few columns, a col-major:   axpy, L = a^T, S = b^T, out (s = j, x = i)
  const core::HostMatrix& long_op = few_rows ? b : a;
  const bool use_dots = few_rows ? long_op.col_major : !long_op.col_major;
  const T* L = static_cast<const T*>(long_op.data) + long_op.offset;
  const std::int64_t ldl = long_op.ld;
  const std::int64_t span = few_rows ? N : M;  // the long dimension: rows (dots) or columns (axpy)
  // The short operand, copied small and contiguous: NS x K rows for dots, K x NS (k-major) for
  // axpy; the padding rows stay zero.
  // Where the short operand already is that panel (one vector contiguous along k, as the
  // second operand of a dot product), it is read in place.
  const core::HostMatrix& short_op = few_rows ? a : b;
  const bool k_unit = few_rows ? (short_op.col_major ? short_op.ld == 1 || K == 1 : true)
                               : (short_op.col_major ? true : short_op.ld == 1 || K == 1);
  const bool in_place = use_dots && ns == 1 && NS == 1 && k_unit;
  // Copied with the strides resolved once: element (s, k) of the short operand (a(s, k) or
  // b(k, s)) is at src[s * s_step + k * k_step]. (Per element, through the layout test, the copy
  // of a 2 x 256 operand took as long as the (256 x 256) @ (256 x 2) product's multiply-adds.)
  const T* src = static_cast<const T*>(short_op.data) + short_op.offset;
  const std::int64_t along_rows = short_op.col_major ? 1 : short_op.ld, along_cols = short_op.col_major ? short_op.ld : 1;
  const std::int64_t s_step = few_rows ? along_rows : along_cols, k_step = few_rows ? along_cols : along_rows;
  const std::size_t panel_bytes = static_cast<std::size_t>(NS * K) * sizeof(T);
  Scratch once;
  T* S = in_place ? nullptr : kept_panel<T>(panel_bytes, once);
  if (!in_place && use_dots) {
    for (int s = 0; s < NS; ++s) {
      T* row = S + s * K;
      if (s >= ns)
        std::fill(row, row + K, T(0));
      else if (k_step == 1)
        std::memcpy(row, src + s * s_step, static_cast<std::size_t>(K) * sizeof(T));
      else
        for (std::int64_t k = 0; k < K; ++k) row[k] = src[s * s_step + k * k_step];
    }
  } else if (!in_place) {
    for (std::int64_t k = 0; k < K; ++k) {
      T* row = S + k * NS;
      int s = 0;
      for (; s < ns; ++s) row[s] = src[s * s_step + k * k_step];
      for (; s < NS; ++s) row[s] = T(0);
    }
  }
  const T* Sp = in_place ? src : S;
  // Output strides: along the long dimension, and along the short one.
  const std::int64_t o_long = few_rows ? 1 : ldc, o_short = few_rows ? ldc : 1;
  const int use =
      streaming_threads(2.0 * M * N * K, static_cast<double>(few_rows ? N : M) * static_cast<double>(K) * sizeof(T), threads);
  if (use_dots) {  // pieces of kDotsPieceRows rows of L
    const std::int64_t pieces = (span + kDotsPieceRows - 1) / kDotsPieceRows;
    // Fewer pieces than threads and a long K (a dot product of two long vectors; a few long rows
    // times a vector): the threads split K instead, each summing its stretch of every row into
    // partial sums of its own, added up here. Such a product streams memory, so the threads are
    // counted by its bytes (kDotsSplitBytes each), not its flops: a dot product of two 2^20-float
    // vectors ran on one thread at 0.85x NumPy (OpenBLAS's sdot uses both cores).
    const std::int64_t bytes = span * K * static_cast<std::int64_t>(sizeof(T));
    const int k_parts = NS == 1 && pieces < threads
                            ? static_cast<int>(std::clamp<std::int64_t>(bytes / kDotsSplitBytes, 1, threads))
                            : 1;
    if (k_parts > 1) {
      const std::int64_t share = (K + k_parts - 1) / k_parts;
      std::vector<T> partial(static_cast<std::size_t>(k_parts * span));
      run_parts(k_parts, k_parts, [&](std::int64_t p) {
        const std::int64_t k0 = p * share, k = std::min(K, k0 + share) - k0;
        T* out = partial.data() + p * span;
        if (k <= 0) {
          std::fill(out, out + span, T(0));
          return;
        }
        dots_kernel<T>(L + k0, ldl, Sp + k0, k, 0, span, 1, 1, out, 1, span);
      });
      add_parts_rows(partial.data(), span, 0, k_parts, 1, span, c, o_long, 0, k_parts);
      return true;
    }
    dots_pieces<T>(L, ldl, Sp, K, span, ns, NS, c, o_long, o_short, use);
    return true;
  }
  // axpy: each thread a contiguous share of L's K rows into partial sums of its own, added up
  // here (NS x span each: small beside L).
  const std::int64_t share = (K + use - 1) / use;
  // Each thread clears its own sums (NS x span), where it then adds into them.
  Scratch sums;
  T* partial = static_cast<T*>(sums.get(static_cast<std::size_t>(use * NS * span) * sizeof(T)));
  run_parts(use, use, [&](std::int64_t p) {
    const std::int64_t k0 = p * share, k1 = std::min(K, k0 + share);
    T* own = partial + p * NS * span;
    std::fill(own, own + NS * span, T(0));
    if (k0 < k1) axpy_kernel<T>(L, ldl, Sp, k0, k1, span, NS, own);
  });
  add_parts_rows(partial, NS * span, span, use, ns, span, c, o_long, o_short, use);
  return true;
}

template <class T>
bool complex_dots(const core::HostMatrix& a, const core::HostMatrix& b, T* c, std::int64_t ldc, int threads) {
  const std::int64_t M = a.rows, K2 = a.cols, N = b.cols;
  // Few rows too (M <= kSkinnyMax) stay with the core's complex_few_rows, which reads b in place: the
  // panel here is twice b's bytes, a pass that pays only where a is the long operand.
  if (a.col_major || N < 1 || N > kComplexDotsMax || M <= kSkinnyMax || K2 < 2 || K2 % 2 || b.rows != K2 / 2)
    return false;
  const std::int64_t K = K2 / 2;
  const int NS = static_cast<int>(2 * N);  // 2 or 4: dots' panel sizes
  Scratch once;
  T* S = kept_panel<T>(static_cast<std::size_t>(NS * K2) * sizeof(T), once);
  // b's element (k, j) at src[k * k_step + j * j_step]: the layout resolved once, not per element.
  const auto* src = static_cast<const std::complex<T>*>(b.data) + b.offset;
  const std::int64_t k_step = b.col_major ? 1 : b.ld, j_step = b.col_major ? b.ld : 1;
  for (std::int64_t j = 0; j < N; ++j) {
    T* re = S + (2 * j) * K2;  // c's real part: re a * re b - im a * im b
    T* im = re + K2;           // its imaginary part: re a * im b + im a * re b
    for (std::int64_t k = 0; k < K; ++k) {
      const std::complex<T> z = src[k * k_step + j * j_step];
      re[2 * k] = z.real(), re[2 * k + 1] = -z.imag();
      im[2 * k] = z.imag(), im[2 * k + 1] = z.real();
    }
  }
  const T* L = static_cast<const T*>(a.data) + a.offset;
  const int use = streaming_threads(8.0 * M * N * K, static_cast<double>(M) * K2 * sizeof(T), threads);
  dots_pieces<T>(L, a.ld, S, K2, M, NS, NS, c, ldc, 1, use);
  return true;
}

template bool complex_dots<float>(const core::HostMatrix&, const core::HostMatrix&, float*, std::int64_t, int);
template bool complex_dots<double>(const core::HostMatrix&, const core::HostMatrix&, double*, std::int64_t, int);

template bool skinny_gemm<float>(const core::HostMatrix&, const core::HostMatrix&, float*, std::int64_t, int);
template bool skinny_gemm<double>(const core::HostMatrix&, const core::HostMatrix&, double*, std::int64_t, int);
template bool skinny_gemm<std::uint32_t>(const core::HostMatrix&, const core::HostMatrix&, std::uint32_t*,
                                         std::int64_t, int);
template bool skinny_gemm<std::uint64_t>(const core::HostMatrix&, const core::HostMatrix&, std::uint64_t*,
                                         std::int64_t, int);

}  // namespace portmat::cpu
