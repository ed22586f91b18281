// See small.hpp. Portable C++ with GCC vector extensions, compiled three times (AVX-512 with
// 64-byte vectors and AVX2 + FMA with 32-byte ones, through function target attributes, and the
// baseline), the variant chosen once at run time with the packed GEMM's ISA. Built with
// -ffp-contract=fast (cpu.cmake) so that acc + a * b becomes one FMA where the CPU has it.
#include "cpu/small.hpp"
#include "cpu/kernel_table.hpp"
#include "cpu/partial_sums.hpp"
#include "cpu/skinny.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/vector_ext.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

namespace portmat::cpu {

namespace {

constexpr int kRows = 6;  // rows of c per register tile

// The first `cols` columns of `rows` rows of a tile, ld apart, into c. Out of line, so that only
// a partial tile's accumulators go through memory: where both kinds of store were inline, GCC
// spilled every tile's accumulators to the stack and copied them out from there.
template <class T>
[[gnu::noinline]] void copy_columns(const T* tile, int ld, int rows, int cols, T* c, std::int64_t ldc) {
  for (int r = 0; r < rows; ++r) std::memcpy(c + r * ldc, tile + r * ld, cols * sizeof(T));
}

// c[r][x] = sum_k a[r][k] * b[k][x] for r < R, x < W = V * lanes: b's rows `ldb` apart, the
// tile's columns all inside b (the caller pads the last strip); `cols` of them stored. V, the
// vectors of c per tile row: 2 (12 accumulators, 2 b loads, 1 broadcast), or 1 when c has at most
// one vector of columns (8 floats, 4 doubles), so that a narrow b is read where it is rather than
// copied into a padded strip, or 8 for one or two rows (a vector times a matrix: with 2 vectors a
// row, each k step waited for the FMA latency of the last), or 4 with AVX-512's 32 registers (24
// accumulators, 4 b loads and 6 broadcasts a k step for 24 multiply-adds, where 2 vectors a row
// need 8 loads for 12). 2-core machine, float32 GFLOP/s, 2 -> 4 vectors: (4 x 256) @ (256 x 256)
// 48 -> 61, 3 rows 26 -> 34, 6 rows 80 -> 91, 96^3 118 -> 137, (16384 x 256) @ (256 x 64) 124 ->
// 171 (NumPy 63, 31, 59, 95, 127); 128^3, 160^3 and 192^3 unchanged. With Copy, b's vectors are
// also stored at `copy` (rows copy_ld apart) for the next tiles to read (kShortKCopySkewBytes).
template <class T, int R, int V, int B, bool Copy = false>
[[gnu::always_inline]] inline void tile(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,
                                        std::int64_t ldc, std::int64_t K, int cols, T* copy = nullptr,
                                        std::int64_t copy_ld = 0) {
  constexpr int L = kLanes<T, B>;
  // k = 0 sets the accumulators (K >= 1): zeroing them first made GCC clear a stack copy of all
  // R x V of them with `rep stos` on every tile, a fifth of a 32x32 product's time.
  Vec<T, B> acc[R][V];
  {
    Vec<T, B> bv[V];
    for (int v = 0; v < V; ++v) bv[v] = load<T, B>(b + v * L);
    if constexpr (Copy)
      for (int v = 0; v < V; ++v) store(copy + v * L, bv[v]);
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = a[r * lda] * bv[v];
  }
  for (std::int64_t k = 1; k < K; ++k) {
    Vec<T, B> bv[V];
    for (int v = 0; v < V; ++v) bv[v] = load<T, B>(b + k * ldb + v * L);
    if constexpr (Copy)
      for (int v = 0; v < V; ++v) store(copy + k * copy_ld + v * L, bv[v]);
    for (int r = 0; r < R; ++r) {
      const T x = a[r * lda + k];
      for (int v = 0; v < V; ++v) acc[r][v] += x * bv[v];
    }
  }
  if (cols == V * L) {
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) store(c + r * ldc + v * L, acc[r][v]);
  } else {
    alignas(B) T part[R][V * L];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) store(part[r] + v * L, acc[r][v]);
    copy_columns(&part[0][0], V * L, R, cols, c, ldc);
  }
}

// f(rows, i) for each register tile of m rows, rows (an integral_constant) of them from row i: tiles
// of kRows, except that two rows left over go with the last six as two tiles of 4, whose 8 (AVX2)
// or 16 (AVX-512) accumulators keep the multiply-adds busy where a 2-row tile's 4 or 8 waited on
// their latency. 2-core Zen 4, float32 GFLOP/s, a process per variant, medians of 3 alternating
// rounds, 6 + 2 / 4 + 4 rows: AVX-512 (8 x 256) @ (256 x 256) 142 / 177, (8 x 512) @ (512 x 512)
// 155 / 202, (20 x 128) @ (128 x 1024) 171 / 206, (8 x 16) @ (16 x 65536) 125 / 156, (14 x 16) @
// (16 x 65536) 146 / 168; AVX2 (8 x 256) @ (256 x 256) 149 / 164. (One row left over stays a tile
// of its own: 4 + 3 for 7 rows lost, (7 x 8) @ (8 x 65536) 107 / 93 on AVX-512.)
template <class F>
[[gnu::always_inline]] inline void row_tiles(std::int64_t m, F&& f) {
  using Six = std::integral_constant<int, kRows>;
  using Four = std::integral_constant<int, 4>;
  const bool fours = m % kRows == 2 && m > kRows;
  std::int64_t i = 0;
  for (; i + kRows <= m - (fours ? kRows : 0); i += kRows) f(Six{}, i);
  if (fours) {
    f(Four{}, i);
    i += 4;
  }
  switch (m - i) {
    case 5: f(std::integral_constant<int, 5>{}, i); break;
    case 4: f(Four{}, i); break;
    case 3: f(std::integral_constant<int, 3>{}, i); break;
    case 2: f(std::integral_constant<int, 2>{}, i); break;
    case 1: f(std::integral_constant<int, 1>{}, i); break;
    default: break;
  }
}

// The row tiles of rows [i, i + m) against one strip of b (bs, lds apart), into c's columns
// [j, j + cols). With `copy`, the first row tile also copies the strip there (rows W apart) and
// the others read the copy (kPackedStripsMinBlocks); only the Copying instantiation has that tile.
template <class T, int V, int B, bool Copying = false>
[[gnu::always_inline]] inline void strip_rows(const T* a, std::int64_t lda, const T* bs, std::int64_t lds, T* c,
                                              std::int64_t ldc, std::int64_t m, std::int64_t K, int cols,
                                              T* copy = nullptr) {
  row_tiles(m, [&](auto rows, std::int64_t i) PM_LAMBDA_ALWAYS_INLINE {
    constexpr int R = decltype(rows)::value;
    if constexpr (Copying && (R == kRows || R == 4)) {  // the first tile of 6 rows or more
      if (copy && i == 0) {
        tile<T, R, V, B, true>(a, lda, bs, lds, c, ldc, K, cols, copy, V * kLanes<T, B>);
        bs = copy;
        lds = V * kLanes<T, B>;
        return;
      }
    }
    tile<T, R, V, B>(a + i * lda, lda, bs, lds, c + i * ldc, ldc, K, cols);
  });
}

// The row tiles of rows [i, i + m) against `ncols` columns of b (whole strips of W = V vectors),
// row tiles outside, strips inside: each tile row of c is written as one stretch of ncols. With
// `copy`, the first row tile also copies those columns of b there (rows copy_ld apart) and the
// others read the copy (kShortKCopySkewBytes); only the Copying instantiation has that tile.
template <class T, int V, int B, bool Copying = false>
[[gnu::always_inline]] inline void rows_across(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,
                                               std::int64_t ldc, std::int64_t m, std::int64_t K, std::int64_t ncols,
                                               T* copy = nullptr, std::int64_t copy_ld = 0) {
  constexpr int W = V * kLanes<T, B>;
  row_tiles(m, [&](auto rows, std::int64_t i) PM_LAMBDA_ALWAYS_INLINE {
    constexpr int R = decltype(rows)::value;
    if constexpr (Copying && (R == kRows || R == 4)) {  // the first of several tiles has 6 or 4 rows
      if (copy && i == 0 && m > R) {
        for (std::int64_t j = 0; j < ncols; j += W)
          tile<T, R, V, B, true>(a, lda, b + j, ldb, c + j, ldc, K, W, copy + j, copy_ld);
        b = copy;
        ldb = copy_ld;
        return;
      }
    }
    for (std::int64_t j = 0; j < ncols; j += W)
      tile<T, R, V, B>(a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, K, W);
  });
}

// A short k (at most one strip's worth: kShortKRows' products) writes c, as large as b or more, at
// up to 4 results per multiply-add: strip by strip, c's rows (16-64 of them, far apart) were as many
// write streams at once, 64 bytes each per strip. Across chunks of kShortKChunkBytes of b's rows,
// the tiles go along c's rows instead: 6 write streams of a chunk's length, b's chunk in L1.
constexpr std::int64_t kShortKChunkBytes = 4096;

// Every 6 rows of c read a chunk of b again. Where b's rows lie a multiple of 4 KiB apart (N =
// 65536: 256 KiB), a column's K rows fall into one set of L1 (and of L2), 16 lines for 8 ways, and
// each pass read the chunk from L3 again. With AVX2's tiles (one line of a row a k step) the first
// pass copies the chunk into rows kShortKCopySkewBytes longer than the chunk's, whose lines spread
// over the sets, and the other passes read the copy. 2-core Zen 4 as an AVX2 machine
// (PORTMAT_CPU_ISA=avx2; NumPy with OPENBLAS_CORETYPE=Haswell), float32 GFLOP/s, a process per
// variant, medians of 5 alternating rounds, without / with: (16 x 16) @ (16 x 65536) 98 / 133,
// (64 x 16) @ (16 x 65536) 104 / 171, (8 x 16) @ (16 x 65536) 63 / 91 (NumPy 102, 128, 114).
// AVX-512's tiles (4 lines of a row a k step) lost with it: 178 / 155, 203 / 184, 136 / 120.
constexpr std::int64_t kShortKCopySkewBytes = 128;

// Blocks of rows of a (about kRowBlockBytes of them) outside, b's strips inside: a block is read
// from memory once and from L1/L2 for every further strip, and b (small, or one strip) stays in
// L2. (Strips outside read all of a once per strip: 4 times over for 64 columns.)
constexpr std::int64_t kRowBlockBytes = 64 << 10;

// With AVX2's tiles a strip of b is one line of each of its rows, and rows 256 bytes apart (b of
// 64 floats) or more use a quarter of L1's sets or fewer: a strip of 256 rows did not stay in L1
// from one row tile to the next. Where the row blocks are many, the first block's first row tile
// copies each strip into contiguous panels (K x W) and every later tile reads those. 2-core Zen 4
// with PORTMAT_CPU_ISA=avx2, float32 GFLOP/s, a process per variant, medians of 3 alternating
// rounds, without / with (NumPy with OpenBLAS's Haswell kernels): (16384 x 256) @ (256 x 64) 145 /
// 187 (153), (4096 x 256) @ (256 x 64) 217 / 220 (202), (1024 x 128) @ (128 x 64) 221 / 223 (199).
// A product of one or two row blocks gained nothing and lost where a separate pass made the copy
// (128^3 175 / 161, 64^3 95 / 90); AVX-512's tiles, 4 lines of each row, lost or tied with it.
constexpr std::int64_t kPackedStripsMinBlocks = 3;

// AVX-512's tiles read a strip as 4 vectors of a row, each a whole cache line where b's rows start
// on one. Where they all start at one offset past a line (NumPy's arrays mostly start 16 bytes
// past one), every load reads parts of two lines, and (256 x 256) @ (256 x 256) float32 took
// 134 us against 113 with a line-aligned b (2-core Xeon, two threads). From this many rows of c
// on (two row tiles), the first tile of each strip also copies it to line-aligned memory (the
// kPackedStripsMinBlocks copy, at a cost of one store a load for one tile) and the others read
// the copy.
constexpr std::int64_t kMisalignedCopyMinRows = 2 * kRows;
// Whether b's rows are all at one offset past a 64-byte line (PORTMAT_CPU_SMALL_COPY=0: read in
// place all the same, for A/B measurements; read once per process).
template <class T>
bool copies_misaligned_b(const T* b, std::int64_t ldb) {
  static const bool on = !switched_off("PORTMAT_CPU_SMALL_COPY");
  return on && elements_to_boundary<T, 64>(b, ldb) > 0;
}

template <class T, int V, int B, bool ShortK>
[[gnu::always_inline]] inline void small_strips(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,
                                                std::int64_t ldc, std::int64_t M, std::int64_t N, std::int64_t K) {
  constexpr int L = kLanes<T, B>;
  constexpr int W = V * L;
  // Columns past the last whole strip: whole vectors read in place by one-vector tiles, then the
  // last few columns (fewer than a vector) from a zero-padded copy one vector wide. (All of them
  // padded to a whole strip cost a copy of b's columns and tiles of twice the width: 24 x 24 and
  // 48 x 48 products, whose last 8 columns went that way, ran at 0.67x and 0.82x NumPy where 16 x 16
  // and 32 x 32 ran at 1.2-1.4x.)
  const std::int64_t j_strips = N / W * W;        // whole strips end here
  const std::int64_t j_vectors = N / L * L;       // whole vectors after them end here
  const int last_cols = static_cast<int>(N - j_vectors);
  constexpr std::int64_t kStackK = 8192 / B;  // 8 KiB of stack whatever the vector
  alignas(B) T stack_strip[kStackK * L];  // the last columns of b, zero-padded to a vector
  std::vector<T> heap_strip;               // the same where K is longer
  T* strip = stack_strip;
  if (last_cols > 0) {
    if (K > kStackK) {
      heap_strip.resize(static_cast<std::size_t>(K * L));
      strip = heap_strip.data();
    }
    for (std::int64_t k = 0; k < K; ++k) {
      std::memcpy(strip + k * L, b + k * ldb + j_vectors, last_cols * sizeof(T));
      std::memset(strip + k * L + last_cols, 0, (L - last_cols) * sizeof(T));
    }
  }
  const std::int64_t rows_per_block =
      std::max<std::int64_t>(kRows, kRowBlockBytes / (K * std::int64_t(sizeof(T))) / kRows * kRows);
  const std::int64_t chunk = std::max<std::int64_t>(W, kShortKChunkBytes / std::int64_t(sizeof(T)) / W * W);
  // The copies are optional, and this may run on a pool worker, where an exception cannot go:
  // without the memory for one, b is read in place.
  // (AVX-512 copies only its 4-vector strips: every form that copies doubles its code, and the
  // small path's function grew from 95 to 147 KiB when all of them did.)
  constexpr bool kCopies = !ShortK && (B < 64 || V == 4);
  Scratch once;
  T* packed_b = nullptr;  // see kPackedStripsMinBlocks and kMisalignedCopyMinRows
  if constexpr (kCopies) {
    const bool copy = B < 64 ? M >= kPackedStripsMinBlocks * rows_per_block && rows_per_block >= 2 * kRows
                             : M >= kMisalignedCopyMinRows && copies_misaligned_b(b, ldb);
    if (copy && j_strips > 0) try {
        packed_b = kept_panel<T>(static_cast<std::size_t>(K * j_strips) * sizeof(T), once);
      } catch (const std::bad_alloc&) {
      }
  }
  std::unique_ptr<T[]> chunk_copy;  // see kShortKCopySkewBytes
  const std::int64_t copy_ld = chunk + kShortKCopySkewBytes / std::int64_t(sizeof(T));
  if constexpr (ShortK && B < 64)
    if (M > kRows && j_strips >= chunk) chunk_copy.reset(new (std::nothrow) T[K * copy_ld]);
  for (std::int64_t i0 = 0; i0 < M; i0 += rows_per_block) {
    const std::int64_t m = std::min(rows_per_block, M - i0);
    if constexpr (ShortK) {
      for (std::int64_t j = 0; j < j_strips; j += chunk) {
        const std::int64_t w = std::min(chunk, j_strips - j);
        rows_across<T, V, B, (B < 64)>(a + i0 * lda, lda, b + j, ldb, c + i0 * ldc + j, ldc, m, K, w, chunk_copy.get(),
                                       copy_ld);
      }
    } else if (!packed_b) {
      for (std::int64_t j = 0; j < j_strips; j += W)
        strip_rows<T, V, B>(a + i0 * lda, lda, b + j, ldb, c + i0 * ldc + j, ldc, m, K, W);
    } else if constexpr (kCopies) {
      for (std::int64_t j = 0; j < j_strips; j += W)
        if (i0 == 0)  // the first block's first tile packs the strip
          strip_rows<T, V, B, true>(a, lda, b + j, ldb, c + j, ldc, m, K, W, packed_b + j * K);
        else
          strip_rows<T, V, B>(a + i0 * lda, lda, packed_b + j * K, W, c + i0 * ldc + j, ldc, m, K, W);
    }
    std::int64_t j_pairs = j_strips;  // whole two-vector strips after wider ones end here
    if constexpr (V > 2) {
      for (; j_pairs + 2 * L <= j_vectors; j_pairs += 2 * L)
        strip_rows<T, 2, B>(a + i0 * lda, lda, b + j_pairs, ldb, c + i0 * ldc + j_pairs, ldc, m, K, 2 * L);
    }
    for (std::int64_t j = j_pairs; j < j_vectors; j += L)
      strip_rows<T, 1, B>(a + i0 * lda, lda, b + j, ldb, c + i0 * ldc + j, ldc, m, K, L);
    if (last_cols > 0) strip_rows<T, 1, B>(a + i0 * lda, lda, strip, L, c + i0 * ldc + j_vectors, ldc, m, K, last_cols);
  }
}

template <class T, int B, bool ShortK>
[[gnu::always_inline]] inline void small_vectors(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,
                                                 std::int64_t ldc, std::int64_t M, std::int64_t N, std::int64_t K) {
  if (N <= kLanes<T, B>)
    small_strips<T, 1, B, ShortK>(a, lda, b, ldb, c, ldc, M, N, K);
  else if (M <= 2 && N >= 8 * kLanes<T, B>)  // a vector (or two) times a matrix: 8 FMA chains a row
    small_strips<T, 8, B, ShortK>(a, lda, b, ldb, c, ldc, M, N, K);
  else if (B >= 64 && N >= 4 * kLanes<T, B>)  // 4 zmm a row where AVX-512's 32 registers hold them (see tile)
    small_strips<T, 4, B, ShortK>(a, lda, b, ldb, c, ldc, M, N, K);
  else
    small_strips<T, 2, B, ShortK>(a, lda, b, ldb, c, ldc, M, N, K);
}

template <class T, int B, bool ShortK>
[[gnu::always_inline]] inline void small_any_k(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,
                                               std::int64_t ldc, std::int64_t M, std::int64_t N, std::int64_t K) {
  if constexpr (B > 32) {
    // Columns past the last whole wide vector that fit a 32-byte one (at most 8 floats, 4
    // doubles) go by 32-byte tiles, read in place where they fill one: a zero-padded 64-byte
    // strip spent half of every multiply-add on zeros (2-core machine, AVX-512, 256 x 256 @ 256 x
    // 8: 57 GFLOP/s against 73 with the AVX2 tiles, NumPy 77).
    const std::int64_t tail = N % kLanes<T, B>;
    if (tail > 0 && tail <= kLanes<T, 32>) {
      if (N > tail) small_vectors<T, B, ShortK>(a, lda, b, ldb, c, ldc, M, N - tail, K);
      small_strips<T, 1, 32, ShortK>(a, lda, b + (N - tail), ldb, c + (N - tail), ldc, M, tail, K);
      return;
    }
  }
  small_vectors<T, B, ShortK>(a, lda, b, ldb, c, ldc, M, N, K);
}

template <class T>
using SmallFn = void (*)(const T*, std::int64_t, const T*, std::int64_t, T*, std::int64_t, std::int64_t,
                         std::int64_t, std::int64_t);

// One clone set: the entry points of a dtype compiled with ATTR (a target attribute, or nothing
// for the baseline) and B-byte vectors. AVX-512 uses 64-byte vectors (6 x 32 floats, 6 x 16
// doubles), where the packed GEMM runs its AVX-512 kernels (kernel_table.cpp; PORTMAT_CPU_ISA
// chooses for both). The short-k order is compiled into entry points of its own (short_f32,
// short_f64): in the same function as the other loop nests, even as a separate instantiation, it
// made GCC's code for them slower (16384 x 256 @ 256 x 64: 3.5-3.9 ms before, 4.2-4.5 after).
#define PM_SMALL_CLONE_T(T, TN, SUFFIX, ATTR, B)                                                                  \
  ATTR void small_##TN##_##SUFFIX(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,               \
                                  std::int64_t ldc, std::int64_t M, std::int64_t N, std::int64_t K) {           \
    small_any_k<T, B, false>(a, lda, b, ldb, c, ldc, M, N, K);                                                   \
  }                                                                                                              \
  ATTR void short_##TN##_##SUFFIX(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,               \
                                  std::int64_t ldc, std::int64_t M, std::int64_t N, std::int64_t K) {           \
    small_any_k<T, B, true>(a, lda, b, ldb, c, ldc, M, N, K);                                                    \
  }
#define PM_SMALL_CLONES(SUFFIX, ATTR, B)          \
  PM_SMALL_CLONE_T(float, f32, SUFFIX, ATTR, B)   \
  PM_SMALL_CLONE_T(double, f64, SUFFIX, ATTR, B)
// The SmallKernels of a clone set.
#define PM_SMALL_SET(SUFFIX, B) {small_f32_##SUFFIX, small_f64_##SUFFIX, short_f32_##SUFFIX, short_f64_##SUFFIX, B}

PM_SMALL_CLONES(base, , 32)
#ifdef PM_CPU_AVX2_CLONES
PM_SMALL_CLONES(avx2, PM_TARGET_AVX2, 32)
PM_SMALL_CLONES(avx512, PM_TARGET_AVX512, 64)
#endif

struct SmallKernels {
  SmallFn<float> f32 = small_f32_base;
  SmallFn<double> f64 = small_f64_base;
  SmallFn<float> short_f32 = short_f32_base;  // a k of at most kStripBytes
  SmallFn<double> short_f64 = short_f64_base;
  int vector_bytes = 32;  // a tile's strip is two vectors wide
};

// The clones of the ISA the packed GEMM runs (kernel_table.cpp's choice, PORTMAT_CPU_ISA included).
const SmallKernels& small_kernels() {
  static const SmallKernels chosen = [] {
    SmallKernels k;
#ifdef PM_CPU_AVX2_CLONES
    const std::string isa = active_kernel_set().isa;  // "avx2" only where the CPU has AVX2 and FMA
    if (isa == "avx512")
      k = PM_SMALL_SET(avx512, 64);
    else if (isa == "avx2")
      k = PM_SMALL_SET(avx2, 32);
#endif
    return k;
  }();
  return chosen;
}

}  // namespace

namespace {
// $PORTMAT_CPU_SMALL_ELEMENTS as a positive count, else 0.
std::int64_t small_elements_set() {
  static const std::int64_t set = [] {
    if (const char* e = std::getenv("PORTMAT_CPU_SMALL_ELEMENTS"); e && *e) {
      char* end = nullptr;
      const long long v = std::strtoll(e, &end, 10);
      if (end != e && *end == '\0' && v > 0) return static_cast<std::int64_t>(v);
    }
    return std::int64_t(0);
  }();
  return set;
}
}  // namespace

std::int64_t small_elements() {
  static const std::int64_t limit = [] {
    if (const std::int64_t set = small_elements_set()) return set;
    return small_kernels().vector_bytes == 64 && wide_fma_at_half_rate() ? kSmallElementsHalfRate : kSmallElements;
  }();
  return limit;
}

std::int64_t small_elements(int threads) {
  const std::int64_t one = small_elements();
  if (threads <= 1 || small_elements_set() || small_kernels().vector_bytes != 64) return one;
  return std::max(one, std::min(kSmallElementsPerThread * threads, kSmallElementsHalfRate));
}

namespace {
bool wide_b_rule() {
  static const bool wide = [] {
    const std::string isa = active_kernel_set().isa;
    return isa == "avx2" || (isa == "avx512" && wide_fma_at_half_rate());
  }();
  return wide;
}
}  // namespace

std::int64_t narrow_b_bytes() { return wide_b_rule() ? kNarrowBytesWide : kNarrowBytes; }
std::int64_t small_b_bytes() { return wide_b_rule() ? kSmallBBytesWide : kSmallBBytes; }

bool small_shape(std::int64_t M, std::int64_t K, std::int64_t N, std::size_t size, int threads) {
  const auto bytes = static_cast<std::int64_t>(size);
  if (M <= 0 || N <= 0 || K <= 0) return false;
  if (N <= kSkinnyMax && M > kSkinnyMax) return false;  // skinny.hpp's dots: one pass over a
  if (M * K + K * N + M * N <= small_elements(threads)) return true;  // small
  if (N <= kSkinnyMax) return false;
  // A short k (one strip's worth) and few rows: c, as large as b or more, is written once from the
  // tiles, and b is read once; the packed GEMM packs all of b first for at most 64 multiply-adds
  // an element. 2-core machine, float32, against NumPy, packed / here: 16 x 16 @ 16 x 65536
  // 0.50x / 0.85-0.88x, 64 x 16 @ 16 x 65536 0.53x / 0.80-0.86x, 16 x 8 @ 8 x 65536 0.46x / 0.86x,
  // 16 x 16 @ 16 x 4096 0.60x / 1.11x, 8 x 8 @ 8 x 8192 0.53x / 1.11x. (Streaming stores for the
  // results past the caches lost: 64 rows of 64-byte pieces are more write streams than the
  // write-combining buffers hold, 2.5 -> 5.4 ms.)
  if (K * bytes <= kStripBytes && M <= kShortKRows) return true;
  // Few columns (one strip of b) of any size, past skinny.hpp's few; or a b that stays in L2.
  return N * bytes <= kStripBytes || (M > kSkinnyMax && N * bytes <= narrow_b_bytes() && K * N * bytes <= small_b_bytes());
}

// Fewer register tiles than threads and a long K ((16 x 65536) @ (65536 x 16): three 6-row tiles
// of one strip): the tiles alone kept three threads busy, each reading all of b, and on the H200's
// 16-core host the product took 335 us on 4, 8 or 16 threads alike (the GPU, with its transfers,
// 218). So the threads also split K: blocks of `bm` rows x `bn` columns of c by slices of K, each
// product of a block and a slice into partial sums of its own, added up in slice order (the same
// bits on every run with the same thread count).
constexpr std::int64_t kSmallSliceK = 1024;
template <class T>
void small_gemm_sliced(const T* pa, std::int64_t lda, const T* pb, std::int64_t ldb, T* c, std::int64_t ldc,
                       std::int64_t M, std::int64_t N, std::int64_t K, std::int64_t bm, std::int64_t bn,
                       int threads) {
  const std::int64_t blocks_m = (M + bm - 1) / bm, blocks_n = (N + bn - 1) / bn, blocks = blocks_m * blocks_n;
  // About two pieces a thread, each slice at least kSmallSliceK deep.
  const std::int64_t slices =
      std::clamp<std::int64_t>((2 * threads + blocks - 1) / blocks, 1, K / kSmallSliceK);
  const std::int64_t depth = (K + slices - 1) / slices;
  std::vector<T> partial(static_cast<std::size_t>(slices * M * N));
  run_parts(blocks * slices, threads, [&](std::int64_t p) {
    const std::int64_t q = p / blocks, blk = p % blocks;
    const std::int64_t i0 = blk / blocks_n * bm, j0 = blk % blocks_n * bn, k0 = q * depth;
    const std::int64_t m = std::min(bm, M - i0), n = std::min(bn, N - j0), k = std::min(depth, K - k0);
    T* out = partial.data() + q * M * N + i0 * N + j0;
    if constexpr (std::is_same_v<T, float>)
      small_kernels().f32(pa + i0 * lda + k0, lda, pb + k0 * ldb + j0, ldb, out, N, m, n, k);
    else
      small_kernels().f64(pa + i0 * lda + k0, lda, pb + k0 * ldb + j0, ldb, out, N, m, n, k);
  });
  add_parts_rows(partial.data(), M * N, N, static_cast<int>(slices), static_cast<int>(M), N, c, 1, ldc, threads);
}

template <class T>
bool small_gemm(const core::HostMatrix& a, const core::HostMatrix& b, T* c, std::int64_t ldc, int threads) {
  // PORTMAT_CPU_SMALL=0: every product to skinny.hpp or the packed GEMM (A/B measurements; read
  // once per process).
  static const bool enabled = [] {
    const char* e = std::getenv("PORTMAT_CPU_SMALL");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  const std::int64_t M = a.rows, K = a.cols, N = b.cols;
  if (!enabled || !small_shape(M, K, N, sizeof(T), threads)) return false;
  // Rows must be contiguous: a column-major matrix qualifies only as one row of adjacent columns.
  if ((a.col_major && (M > 1 || a.ld != 1)) || (b.col_major && (K > 1 || b.ld != 1))) return false;
  const T* pa = static_cast<const T*>(a.data) + a.offset;
  const T* pb = static_cast<const T*>(b.data) + b.offset;
  const std::int64_t lda = M > 1 ? a.ld : K, ldb = K > 1 ? b.ld : N;
  const bool short_k = K * static_cast<std::int64_t>(sizeof(T)) <= kStripBytes;
  auto run = [&](const T* a0, const T* b0, T* c0, std::int64_t m, std::int64_t n) {
    if constexpr (std::is_same_v<T, float>)
      (short_k ? small_kernels().short_f32 : small_kernels().f32)(a0, lda, b0, ldb, c0, ldc, m, n, K);
    else
      (short_k ? small_kernels().short_f64 : small_kernels().f64)(a0, lda, b0, ldb, c0, ldc, m, n, K);
  };
  // Threads take whole register tiles: blocks of 6-row tiles, or of 2-vector column strips where
  // c has more of those; two parts a thread, claimed as they finish.
  const std::int64_t W = 2 * small_kernels().vector_bytes / static_cast<std::int64_t>(sizeof(T));
  const std::int64_t row_tiles = (M + kRows - 1) / kRows, col_strips = (N + W - 1) / W;
  const std::int64_t tiles = std::max(row_tiles, col_strips);
  if (threads > 1 && tiles < threads && K >= 2 * kSmallSliceK) {
    const bool by_rows = row_tiles >= col_strips;
    small_gemm_sliced<T>(pa, lda, pb, ldb, c, ldc, M, N, K, by_rows ? kRows : M, by_rows ? N : W, threads);
    return true;
  }
  // Two parts a thread, so that a thread that starts late takes fewer; one where each part copies
  // all of b's strips (kMisalignedCopyMinRows): (256 x 256) @ (256 x 256) float32 with b 16 bytes
  // past a line, 2-core Xeon, 130 us in place, 122 with 4 copies, 114 with 2 (113 line-aligned).
  const bool copies_b = !short_k && small_kernels().vector_bytes == 64 && M >= threads * kMisalignedCopyMinRows &&
                        N >= 4 * kLanes<T, 64> && copies_misaligned_b(pb, ldb);
  const std::int64_t parts = std::min<std::int64_t>((copies_b ? 1 : 2) * threads, tiles);
  if (threads <= 1 || parts <= 1) {
    run(pa, pb, c, M, N);
    return true;
  }
  if (row_tiles >= col_strips) {
    const std::int64_t per = (row_tiles + parts - 1) / parts * kRows;
    run_parts((M + per - 1) / per, threads, [&](std::int64_t p) {
      const std::int64_t r0 = p * per;
      run(pa + r0 * lda, pb, c + r0 * ldc, std::min(per, M - r0), N);
    });
  } else {
    const std::int64_t per = (col_strips + parts - 1) / parts * W;
    run_parts((N + per - 1) / per, threads, [&](std::int64_t p) {
      const std::int64_t j0 = p * per;
      run(pa, pb + j0, c + j0, M, std::min(per, N - j0));
    });
  }
  return true;
}

template bool small_gemm<float>(const core::HostMatrix&, const core::HostMatrix&, float*, std::int64_t, int);
template bool small_gemm<double>(const core::HostMatrix&, const core::HostMatrix&, double*, std::int64_t, int);

}  // namespace portmat::cpu
