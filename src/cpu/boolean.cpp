// See boolean.hpp. GCC vector extensions, compiled for AVX-512 (64-byte vectors; byte compares
// need AVX512BW), AVX2 and the baseline, the clone picked once at run time as skinny.cpp's are.
#include "cpu/boolean.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/kernel_table.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/vector_ext.hpp"

namespace portmat::cpu {

namespace {

#ifdef PM_CPU_AVX2_CLONES
#define PM_TARGET_AVX512BW __attribute__((target("avx512f,avx512bw,avx2")))
#endif

// Vectors of the rows kernel's register block: 4 (a 256-byte stretch of a row of c with AVX-512).
constexpr int kRowVectors = 4;
// Rows of L OR-ed in between two checks whether the block is all true already.
constexpr int kCheckEvery = 8;
// S's row is scanned for its nonzero k this many at a time, as the rows kernel needs them.
constexpr std::int64_t kScanStep = 64;

template <int B>
using Bytes = Vec<std::uint8_t, B>;

// A thread's scratch (the hit list, a's bits) is kept for its next product up to this many bytes,
// and freed past it: a row of a long k that never fills c's row lists every k (4 bytes each).
constexpr std::size_t kKeepScratchBytes = std::size_t(4) << 20;
template <class T>
void release_if_large(std::vector<T>& v) {
  if (v.capacity() * sizeof(T) > kKeepScratchBytes) std::vector<T>().swap(v);
}

template <int B>
[[gnu::always_inline]] inline bool any_lane(const Bytes<B>& v) {
  Vec<std::uint64_t, B> w;
  std::memcpy(&w, &v, sizeof w);
  std::uint64_t r = 0;
  for (int i = 0; i < B / 8; ++i) r |= w[i];
  return r != 0;
}
template <int B>
[[gnu::always_inline]] inline Bytes<B> nonzero(const Bytes<B>& v) {  // 0xff where v is nonzero
  return reinterpret_cast<Bytes<B>>(v != 0);
}

// The nonzero k of one row of S (S[k * sk], k < K), found kScanStep at a time.
struct Hits {
  const std::uint8_t* s;
  std::int64_t sk, K;
  std::vector<std::uint32_t>& list;  // the k found so far, in order
  std::int64_t found = 0, scanned = 0;

  // Scans the next kScanStep k (branch-free appends); false when all of S's row was scanned.
  bool more() {
    if (scanned >= K) return false;
    const std::int64_t end = std::min(K, scanned + kScanStep);
    if (static_cast<std::int64_t>(list.size()) < found + kScanStep) list.resize(static_cast<std::size_t>(found + kScanStep));
    std::uint32_t* out = list.data() + found;
    std::int64_t n = 0;
    for (std::int64_t k = scanned; k < end; ++k) {
      out[n] = static_cast<std::uint32_t>(k);
      n += s[k * sk] != 0;
    }
    found += n, scanned = end;
    return true;
  }

  // Whether hit h exists, scanning as far as it takes.
  bool has(std::int64_t h) {
    while (h == found)
      if (!more()) return false;
    return true;
  }
};

// out[x * ox] for x < W (W = C vectors, or fewer columns for the scalar tail): OR over the hits of
// L[k * ldl + x], stopped once every column is set.
template <int B, int C>
[[gnu::always_inline]] inline void rows_block(const std::uint8_t* L, std::int64_t ldl, Hits& hits,
                                              std::uint8_t* out, std::int64_t ox) {
  constexpr int V = B;
  Bytes<B> acc[C];
  for (int c = 0; c < C; ++c) acc[c] = Bytes<B>{};
  std::int64_t h = 0;
  int since = 0;
  while (hits.has(h)) {
    const std::uint8_t* row = L + static_cast<std::int64_t>(hits.list[static_cast<std::size_t>(h++)]) * ldl;
    for (int c = 0; c < C; ++c) acc[c] |= load<std::uint8_t, B>(row + c * V);
    if (++since == kCheckEvery) {  // done once no lane is zero
      since = 0;
      Bytes<B> zero = reinterpret_cast<Bytes<B>>(acc[0] == 0);
      for (int c = 1; c < C; ++c) zero |= reinterpret_cast<Bytes<B>>(acc[c] == 0);
      if (!any_lane<B>(zero)) break;
    }
  }
  for (int c = 0; c < C; ++c) {
    const Bytes<B> one = nonzero<B>(acc[c]) & 1;
    if (ox == 1) {
      store(out + c * V, one);
    } else {
      for (int l = 0; l < V; ++l) out[(c * V + l) * ox] = one[l];
    }
  }
}

// The rows kernel for one row of out (r) and its columns [x0, x1).
template <int B>
[[gnu::always_inline]] inline void rows_range(const std::uint8_t* L, std::int64_t ldl, Hits& hits, std::int64_t x0,
                                              std::int64_t x1, std::uint8_t* out, std::int64_t ox) {
  constexpr int V = B;
  std::int64_t x = x0;
  for (; x + kRowVectors * V <= x1; x += kRowVectors * V) rows_block<B, kRowVectors>(L + x, ldl, hits, out + x * ox, ox);
  for (; x + V <= x1; x += V) rows_block<B, 1>(L + x, ldl, hits, out + x * ox, ox);
  for (; x < x1; ++x) {  // the last columns, one at a time
    std::uint8_t v = 0;
    for (std::int64_t h = 0; !v && hits.has(h); ++h)
      v = L[static_cast<std::int64_t>(hits.list[static_cast<std::size_t>(h)]) * ldl + x] != 0;
    out[x * ox] = v;
  }
}

// out[r * or_ + x * ox] for rows [r0, r1), columns [x0, x1): OR over k of S[r * sr + k * sk] and
// L[k * ldl + x].
template <int B>
[[gnu::always_inline]] inline void rows_kernel(const std::uint8_t* S, std::int64_t sr, std::int64_t sk, std::int64_t K,
                                               const std::uint8_t* L, std::int64_t ldl, std::int64_t r0,
                                               std::int64_t r1, std::int64_t x0, std::int64_t x1, std::uint8_t* out,
                                               std::int64_t or_, std::int64_t ox) {
  thread_local std::vector<std::uint32_t> list;
  for (std::int64_t r = r0; r < r1; ++r) {
    Hits hits{S + r * sr, sk, K, list};
    rows_range<B>(L, ldl, hits, x0, x1, out + r * or_, ox);
  }
  release_if_large(list);
}

// out[i * ldc + j] for rows [i0, i1), every j < N: whether a's row i and b's column j (both
// contiguous along k: A + i * lda, Bt + j * ldb) are both nonzero at some k.
template <int B>
[[gnu::always_inline]] inline void dots_kernel(const std::uint8_t* A, std::int64_t lda, const std::uint8_t* Bt,
                                               std::int64_t ldb, std::int64_t K, std::int64_t N, std::int64_t i0,
                                               std::int64_t i1, std::uint8_t* c, std::int64_t ldc) {
  constexpr int V = B;
  for (std::int64_t i = i0; i < i1; ++i) {
    const std::uint8_t* ai = A + i * lda;
    for (std::int64_t j = 0; j < N; ++j) {
      const std::uint8_t* bj = Bt + j * ldb;
      // The first 16 bytes alone (on random inputs the hit is there: one line of each, where a
      // whole vector may straddle two), then four vectors at a time.
      bool hit = false;
      std::int64_t k = 0;
      if (K >= 16) hit = any_lane<16>(nonzero<16>(load<std::uint8_t, 16>(ai)) & nonzero<16>(load<std::uint8_t, 16>(bj))), k = 16;
      for (; k + 4 * V <= K && !hit; k += 4 * V) {
        Bytes<B> m = nonzero<B>(load<std::uint8_t, B>(ai + k)) & nonzero<B>(load<std::uint8_t, B>(bj + k));
        for (int u = 1; u < 4; ++u)
          m |= nonzero<B>(load<std::uint8_t, B>(ai + k + u * V)) & nonzero<B>(load<std::uint8_t, B>(bj + k + u * V));
        hit = any_lane<B>(m);
      }
      for (; k + V <= K && !hit; k += V)
        hit = any_lane<B>(nonzero<B>(load<std::uint8_t, B>(ai + k)) & nonzero<B>(load<std::uint8_t, B>(bj + k)));
      for (; k < K && !hit; ++k) hit = ai[k] != 0 && bj[k] != 0;
      c[i * ldc + j] = hit;
    }
  }
}

using RowsFn = void (*)(const std::uint8_t*, std::int64_t, std::int64_t, std::int64_t, const std::uint8_t*,
                        std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::uint8_t*,
                        std::int64_t, std::int64_t);
using DotsFn = void (*)(const std::uint8_t*, std::int64_t, const std::uint8_t*, std::int64_t, std::int64_t,
                        std::int64_t, std::int64_t, std::int64_t, std::uint8_t*, std::int64_t);

#define PM_BOOLEAN_CLONES(SUFFIX, ATTR, B)                                                                     \
  ATTR void rows_##SUFFIX(const std::uint8_t* S, std::int64_t sr, std::int64_t sk, std::int64_t K,            \
                          const std::uint8_t* L, std::int64_t ldl, std::int64_t r0, std::int64_t r1,          \
                          std::int64_t x0, std::int64_t x1, std::uint8_t* out, std::int64_t or_,              \
                          std::int64_t ox) {                                                                  \
    rows_kernel<B>(S, sr, sk, K, L, ldl, r0, r1, x0, x1, out, or_, ox);                                       \
  }                                                                                                           \
  ATTR void dots_##SUFFIX(const std::uint8_t* A, std::int64_t lda, const std::uint8_t* Bt, std::int64_t ldb,  \
                          std::int64_t K, std::int64_t N, std::int64_t i0, std::int64_t i1, std::uint8_t* c,  \
                          std::int64_t ldc) {                                                                 \
    dots_kernel<B>(A, lda, Bt, ldb, K, N, i0, i1, c, ldc);                                                    \
  }

PM_BOOLEAN_CLONES(base, , 16)
#ifdef PM_CPU_AVX2_CLONES
PM_BOOLEAN_CLONES(avx2, PM_TARGET_AVX2, 32)
PM_BOOLEAN_CLONES(avx512, PM_TARGET_AVX512BW, 64)
#endif

struct BooleanKernels {
  RowsFn rows;
  DotsFn dots;
  std::int64_t vector_bytes;
};

// The packed GEMM's ISA (PORTMAT_CPU_ISA included), as skinny.cpp's; AVX-512 only with AVX512BW.
const BooleanKernels& boolean_kernels() {
  static const BooleanKernels chosen = [] {
    BooleanKernels k{rows_base, dots_base, 16};
#ifdef PM_CPU_AVX2_CLONES
    const std::string isa = active_kernel_set().isa;
    __builtin_cpu_init();
    if (isa == "avx512" && __builtin_cpu_supports("avx512bw"))
      k = {rows_avx512, dots_avx512, 64};
    else if (isa == "avx512" || isa == "avx2")
      k = {rows_avx2, dots_avx2, 32};
#endif
    return k;
  }();
  return chosen;
}

// Below this many vector operations at worst (no early stop) a product runs on one thread.
constexpr double kOneThreadVectorOps = 1 << 18;
// The rows kernel runs where a row of its output has at least this many columns (bytes): below,
// it would OR single bytes (2-core Xeon, random inputs, (2048 x 2048) @ (2048 x 4): 382 us on
// the rows kernel, NumPy 238).
constexpr std::int64_t kRowsMinColumns = 64;
// A part of the rows kernel: one row of out and up to this many of its columns.
constexpr std::int64_t kRowsPartColumns = 4096;

// ---- bits: short k ----------------------------------------------------------------------------
// Where k is short the dots kernel's early stop saves little and its byte compares cost each pair
// ~20 ns ((32 x 32) @ (32 x 32): 22 us): a's rows and b's columns packed into words of 64 bits (k
// along the bits) make a pair one AND a word.

// The nonzero bytes of x as 8 bits (byte i -> bit i): each byte's top bit set where it is nonzero,
// then the top bits gathered by one multiply.
inline std::uint64_t nonzero_bits8(std::uint64_t x) {
  const std::uint64_t t = (((x & 0x7f7f7f7f7f7f7f7fULL) + 0x7f7f7f7f7f7f7f7fULL) | x) & 0x8080808080808080ULL;
  return ((t >> 7) * 0x0102040810204080ULL) >> 56;
}

// out[r * W + k / 64] bit k % 64 = (p[r * rs + k * ks] != 0) for r < R, k < K (W = ceil(K / 64)).
void pack_bits(const std::uint8_t* p, std::int64_t rs, std::int64_t ks, std::int64_t R, std::int64_t K,
               std::int64_t W, std::uint64_t* out) {
  if (ks == 1) {  // rows of contiguous bytes: 8 at a time
    for (std::int64_t r = 0; r < R; ++r) {
      const std::uint8_t* row = p + r * rs;
      for (std::int64_t w = 0, k = 0; w < W; ++w) {
        std::uint64_t word = 0;
        if (k + 64 <= K) {
          for (int q = 0; q < 8; ++q, k += 8) {
            std::uint64_t x;
            std::memcpy(&x, row + k, 8);
            word |= nonzero_bits8(x) << (8 * q);
          }
        } else {
          for (int q = 0; k < K; ++k, ++q) word |= std::uint64_t(row[k] != 0) << q;
        }
        out[r * W + w] = word;
      }
    }
    return;
  }
  std::fill(out, out + R * W, std::uint64_t(0));
  for (std::int64_t k = 0; k < K; ++k)  // along memory where the rows are its columns
    for (std::int64_t r = 0; r < R; ++r) out[r * W + (k >> 6)] |= std::uint64_t(p[r * rs + k * ks] != 0) << (k & 63);
}

// Past this k the dots kernel's early stop wins over packing every bit first.
constexpr std::int64_t kBitsMaxK = 256;

// Rows of a part: eight parts a thread (threads claim them from one counter: a part a row cost
// a contended atomic a row, ~100 ns, where a row that stops at its first vector takes ~10).
std::int64_t rows_a_part(std::int64_t rows, int threads) {
  return threads <= 1 ? rows : std::max<std::int64_t>(1, rows / (8 * static_cast<std::int64_t>(threads)));
}

}  // namespace

void boolean_gemm(const core::HostMatrix& a, const core::HostMatrix& b, std::uint8_t* c, std::int64_t ldc,
                  int threads) {
  const std::int64_t M = a.rows, K = a.cols, N = b.cols;
  const auto* pa = static_cast<const std::uint8_t*>(a.data) + a.offset;
  const auto* pb = static_cast<const std::uint8_t*>(b.data) + b.offset;
  const BooleanKernels& kern = boolean_kernels();
  const double worst = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) /
                       static_cast<double>(kern.vector_bytes);
  const int use = worst < kOneThreadVectorOps ? 1 : threads;
  // a's element (i, k) at pa[i * ai + k * ak], b's (k, j) at pb[k * bk + j * bj].
  std::int64_t ai = a.col_major ? 1 : a.ld, ak = a.col_major ? a.ld : 1;
  std::int64_t bk = b.col_major ? 1 : b.ld, bj = b.col_major ? b.ld : 1;
  // The rows kernel where a row of its output is long enough for vectors: on c where b's rows are
  // contiguous (X = N), on c^T = b^T a^T where a's columns are (X = M); the longer where both.
  const std::int64_t x_c = bj == 1 || N == 1 ? N : 0, x_t = ai == 1 || M == 1 ? M : 0;
  if (std::max(x_c, x_t) >= kRowsMinColumns) {
    const bool on_c = x_c >= x_t;
    const std::uint8_t* S = on_c ? pa : pb;
    const std::int64_t sr = on_c ? ai : bj, sk = on_c ? ak : bk;
    const std::uint8_t* L = on_c ? pb : pa;
    const std::int64_t ldl = on_c ? bk : ak;
    const std::int64_t R = on_c ? M : N, X = on_c ? N : M;
    const std::int64_t or_ = on_c ? ldc : 1, ox = on_c ? 1 : ldc;
    const std::int64_t chunks = (X + kRowsPartColumns - 1) / kRowsPartColumns, step = rows_a_part(R, use);
    const std::int64_t blocks = (R + step - 1) / step;
    run_parts(blocks * chunks, use, [&](std::int64_t p) {
      const std::int64_t r = p / chunks * step, x0 = (p % chunks) * kRowsPartColumns;
      kern.rows(S, sr, sk, K, L, ldl, r, std::min(R, r + step), x0, std::min(X, x0 + kRowsPartColumns), c, or_, ox);
    });
    return;
  }
  if (K <= kBitsMaxK) {  // bits: b's columns packed once, a's rows by each part
    const std::int64_t W = std::max<std::int64_t>(1, (K + 63) / 64);
    std::vector<std::uint64_t> b_bits(static_cast<std::size_t>(N * W));
    pack_bits(pb, bj, bk, N, K, W, b_bits.data());
    const std::int64_t step = rows_a_part(M, use);
    run_parts((M + step - 1) / step, use, [&](std::int64_t p) {
      const std::int64_t i0 = p * step, i1 = std::min(M, i0 + step);
      thread_local std::vector<std::uint64_t> a_bits;
      a_bits.resize(static_cast<std::size_t>((i1 - i0) * W));
      pack_bits(pa + i0 * ai, ai, ak, i1 - i0, K, W, a_bits.data());
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::uint64_t* x = a_bits.data() + (i - i0) * W;
        std::uint8_t* ci = c + i * ldc;
        if (W == 1) {
          const std::uint64_t x0 = x[0];
          for (std::int64_t j = 0; j < N; ++j) ci[j] = (x0 & b_bits[static_cast<std::size_t>(j)]) != 0;
          continue;
        }
        for (std::int64_t j = 0; j < N; ++j) {
          const std::uint64_t* y = b_bits.data() + j * W;
          std::uint64_t hit = x[0] & y[0];
          for (std::int64_t w = 1; w < W && !hit; ++w) hit = x[w] & y[w];
          ci[j] = hit != 0;
        }
      }
      release_if_large(a_bits);
    });
    return;
  }
  // The dots kernel, on a's rows and b's columns contiguous along k: where they are not, that
  // operand has fewer than kRowsMinColumns rows (a) or columns (b) and is copied so.
  std::vector<std::uint8_t> a_rows, b_cols;
  if (ak != 1 && K > 1) {
    a_rows.resize(static_cast<std::size_t>(M * K));
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t i = 0; i < M; ++i) a_rows[static_cast<std::size_t>(i * K + k)] = pa[i * ai + k * ak];
    pa = a_rows.data(), ai = K, ak = 1;
  }
  if (bk != 1 && K > 1) {
    b_cols.resize(static_cast<std::size_t>(K * N));
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t j = 0; j < N; ++j) b_cols[static_cast<std::size_t>(j * K + k)] = pb[k * bk + j * bj];
    pb = b_cols.data(), bj = K, bk = 1;
  }
  const std::int64_t step = rows_a_part(M, use);
  run_parts((M + step - 1) / step, use,
            [&](std::int64_t p) { kern.dots(pa, ai, pb, bj, K, N, p * step, std::min(M, (p + 1) * step), c, ldc); });
}

}  // namespace portmat::cpu
