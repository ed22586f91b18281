// Small products, unpacked: c = a @ b where all three matrices are small (kSmallElements), or c
// has one strip of columns (kStripBytes), on one thread, or a few for the larger ones. The CPU
// backend runs single small products this way and each matrix of a stack of small products
// (np.matmul's batches: a thread per matrix).
//
// Why: the packed GEMM (gemm_driver.hpp) copies a and b into panels before it multiplies. For a
// 32x32 product that copy, the driver's blocking and its thread hand-off cost more than the 32K
// multiply-adds: a stack of 10000 such products ran at 1.4x NumPy on 2 cores; unpacked, at 3.3x
// (0.96 us a 32x32 product on one core, about 85% of its peak). Here register tiles of c (6 rows x
// 2 vectors: 6x16 floats, 6x8 doubles) accumulate over all of K, reading a's elements (broadcast)
// and b's row segments where they are; the operands of a small product sit in L1/L2 anyway.
// Compiled for AVX-512 (64-byte vectors: 6x32 floats, 6x16 doubles), AVX2 + FMA and baseline
// x86-64, the clone chosen at run time with the packed GEMM's ISA (PORTMAT_CPU_ISA).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/backend.hpp"

namespace portmat::cpu {

// The small path takes products whose three matrices hold at most this many elements together
// (512 KiB of float32, the L2 of the 2-core machine's cores: 3 x 128^2 squares, a 256-vector times
// a 256 x 256 matrix), except those with at most kSkinnyMax columns and more rows, which
// skinny.hpp's dot-product kernel reads in one pass.
constexpr std::int64_t kSmallElements = std::int64_t(1) << 17;

// The limit where the small path runs AVX-512 tiles on a core that executes each 512-bit FMA as
// two halves (wide_fma_at_half_rate, kernel_table.hpp: AMD's Zen 4): 4 MiB of float32, squares up
// to 591. There the unpacked tiles beat the packed GEMM well past L2 (2-core Zen 4, float32,
// GFLOP/s, unpacked / packed / NumPy: 256^3 211 / 183 / 170, 512^3 215 / 196 / 193, 256 x 1024 @
// 1024 x 256 222 / 189 / 195, 100 x 5000 @ 5000 x 100 153 / 118 / 123; float64 512^3 108 / 85 /
// 80; docs/cpu.md). Where 512-bit FMAs run at full rate the packed GEMM does twice the flops a
// cycle, and whether the unpacked tiles (4 vectors of b loaded a k step) keep up with it past
// kSmallElements is not measured on one thread, so the limit stays kSmallElements there.
constexpr std::int64_t kSmallElementsHalfRate = std::int64_t(1) << 20;

// On several threads a full-rate AVX-512 core's limit grows with the threads, kSmallElementsPerThread
// each, up to kSmallElementsHalfRate: the packed GEMM's steps wait for every thread, and the
// unpacked tiles, each thread on its own rows, do not. The H200's 16-core host (Xeon, AVX-512 at
// full rate), float32, GFLOP/s, a process per variant, 3 alternating rounds, medians, unpacked /
// packed / NumPy: on 16 threads 256^3 864 / 369 / 473, 512^3 963 / 804 / 802; on 2 threads
// (PORTMAT_NUM_THREADS=2, OPENBLAS_NUM_THREADS=2) 256^3 198 / 136 / 124, 512^3 152 / 199 / 193
// (session 30). AVX2-only cores keep kSmallElements: not measured there.
constexpr std::int64_t kSmallElementsPerThread = std::int64_t(1) << 17;

// The limit in use on one thread: kSmallElements, kSmallElementsHalfRate where it applies, or
// $PORTMAT_CPU_SMALL_ELEMENTS (a positive count, for A/B measurements; read once per process).
std::int64_t small_elements();

// The limit for a product shared by `threads`: small_elements(), raised on full-rate AVX-512 cores
// (kSmallElementsPerThread), never past kSmallElementsHalfRate; $PORTMAT_CPU_SMALL_ELEMENTS, when
// set, on any thread count.
std::int64_t small_elements(int threads);

// Past that size, products with at most kStripBytes of columns (16 floats, 8 doubles: one strip
// of the tiles; more than skinny.hpp's few) are still unpacked: 6-row tiles read a in place, once,
// and b's strip (K x N) stays in L2. The packed GEMM would copy a first, a second pass over
// memory for at most 16 multiply-adds an element. 2-core
// machine, float32, against NumPy, packed / unpacked: 4096 x 4096 @ 4096 x 8 0.64x / 2.1x, x 16
// 0.57x / 0.92x; 65536 x 16 @ 16 x 16 0.33x / 1.5x; 16 x 65536 @ 65536 x 16 0.59x / 2.9x.
// (Few rows are not the mirror image: b's strips walked down all of K, thousands of rows apart,
// defeat the prefetchers; docs/cpu.md.)
constexpr std::int64_t kStripBytes = 64;

// And products of any M with a narrow b (rows of at most kNarrowBytes: 64 floats, 32 doubles)
// that holds at most kSmallBBytes (a quarter of the 2-core machine's L2): blocks of a's rows are
// read in place, once, against every strip of b, which stays in L2 (a tall matrix times a small
// one). The packed GEMM would copy all of a first, for at most N multiply-adds an element.
// 2-core machine, float32, one process each, packed / unpacked (ms): 65536 x 64 @ 64 x 64
// 8.9-10.7 / 4.2-4.9; 16384 x 256 @ 256 x 64 6.9-8.4 / 4.6-6.9; 4096 x 1024 @ 1024 x 32
// 5.5-7.0 / 2.0-2.2. Wider b lost or tied: 512 x 64 @ 64 x 512 0.25-0.29 / 0.31-0.35,
// 2048 x 128 @ 128 x 256 0.88-0.98 / 1.03-1.15, 4096 x 256 @ 256 x 128 1.7-2.1 / 2.1.
constexpr std::int64_t kNarrowBytes = 256;
constexpr std::int64_t kSmallBBytes = 128 << 10;

// Where the small path's tiles do as many multiply-adds a cycle as the packed GEMM's kernel (the
// AVX2 kernels, and AVX-512 at half rate: wide_fma_at_half_rate), b may have rows of up to
// kNarrowBytesWide (256 floats, 128 doubles) and hold up to kSmallBBytesWide. Those measurements
// were made after small.cpp's AVX2 tiles stopped spilling their stores and began copying the
// strips a tall a reads again (session 34). 2-core Zen 4, float32 GFLOP/s, a process per variant,
// medians of 3 alternating rounds. Packed / unpacked / NumPy, each with PORTMAT_CPU_ISA=avx2 and
// OPENBLAS_CORETYPE=Haswell:
// - (1024 x 256) @ (256 x 128): 84 / 217 / 207;
// - (1024 x 64) @ (64 x 256): 171 / 189 / 206;
// - (8192 x 512) @ (512 x 128): 87 / 216 / 200;
// - (8192 x 64) @ (64 x 256): 120 / 222 / 206;
// - (8192 x 512) @ (512 x 256): 185 / 212 / 196;
// - (256 x 512) @ (512 x 256): 119 / 217 / 190;
// - (128 x 256) @ (256 x 256): 177 / 174 / 119.
// With AVX-512 on Zen 4: (8192 x 512) @ (512 x 128) 195 / 225 / 184, (8192 x 256) @ (256 x 256)
// 200 / 202 / 189. Full-rate AVX-512 cores, NEON and the baseline keep the narrower rule: not
// measured there.
constexpr std::int64_t kNarrowBytesWide = 1024;
constexpr std::int64_t kSmallBBytesWide = 512 << 10;

// The limits in use on this CPU: kNarrowBytes and kSmallBBytes, or the wide ones above.
std::int64_t narrow_b_bytes();
std::int64_t small_b_bytes();

// And products with a k of at most kStripBytes (16 floats, 8 doubles) and at most kShortKRows rows:
// c (as large as b or more) is written once from the tiles, b read once (small.cpp, small_shape),
// along c's rows in chunks of b's (small.cpp, rows_across).
constexpr std::int64_t kShortKRows = 64;

// Whether small_gemm takes an M x K x N product of `size`-byte elements, by its shape (it also
// needs a and b row-major).
bool small_shape(std::int64_t M, std::int64_t K, std::int64_t N, std::size_t size, int threads = 1);

// c (row-major, ldc) = a @ b when a and b are row-major (their rows contiguous) and the product is
// small as above; returns false, touching nothing, otherwise.
// With threads > 1, the rows (or the column strips, where there are more of those) are shared out.
template <class T>
bool small_gemm(const core::HostMatrix& a, const core::HostMatrix& b, T* c, std::int64_t ldc, int threads = 1);

}  // namespace portmat::cpu
