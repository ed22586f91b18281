// Products with few rows or few columns (matrix-vector products among them): c = a @ b where
// M <= kSkinnyMax or N <= kSkinnyMax (4), computed by streaming the long operand once, unpacked.
//
// Why: the packed GEMM (gemm_driver.hpp) packs the long operand before it multiplies, a second
// pass over the data that dominates when each element is used only M (or N) times: a
// (1 x 4096) @ (4096 x 4096) product ran at 0.16x NumPy, a (3200 x 3200) @ (3200 x 8) at 0.37x.
// Here the short operand is copied into a small contiguous panel and the long one is read where
// it is, in the order it is stored, by one of two kernels:
//   dots: out[r][s] = sum_k L[r][k] * S[s][k], L's rows contiguous (a row-major a with few
//         columns of b; a column-major b with few rows of a, as c^T = b^T a^T);
//   axpy: out[s][x] = sum_k S[s][k] * L[k][x], L's rows contiguous (a row-major b with few rows
//         of a; a column-major a with few columns of b).
// Threads split the long dimension. The kernels are compiled for AVX-512 (64-byte vectors), AVX2
// + FMA and baseline x86-64, and the clone of the packed GEMM's ISA runs (PORTMAT_CPU_ISA chooses
// for both), so one build runs everywhere: products whose long operand sits in L2 are not
// memory-bound, and there 64-byte vectors halve the loads.
#pragma once

#include <cstdint>

#include "core/backend.hpp"

namespace portmat::cpu {

// A product with at most this many rows or columns takes the skinny path. Past it the packed GEMM
// reuses each loaded element enough to win: on the 2-core machine (AMD EPYC, AVX2), float32 with
// a 4096 x 4096 long operand, against NumPy, skinny / packed GEMM: 2 rows 1.27x / 0.79x, 4 rows
// 0.80x / 0.79x, 8 rows 0.39x / 0.54x; 2 columns 2.08x / 0.54x, 4 columns 1.13x / 0.56x,
// 8 columns 0.55x / 0.59x.
constexpr std::int64_t kSkinnyMax = 4;
// ... and up to this many where the long operand's layout gives the axpy kernel (a row-major b
// with few rows of a, a column-major a with few columns of b): 2-core machine, float32, NumPy
// time / portmat time, packed GEMM -> axpy: 8 x 4096 @ 4096 x 4096 0.72x -> 0.89x, 8 x 1024 @
// 1024 x 16384 0.82x -> 0.95x, 6 rows at par (1.35-1.48x both); at 12 and 16 rows axpy lost
// (16 x 4096 @ 4096 x 4096: 0.69x against 0.91x).
constexpr std::int64_t kSkinnyAxpyMax = 8;
// ... but 5 to this many rows against a row-major b of at least 1 KiB rows and K >= 16 take
// rows_tiles (skinny.cpp, rows_path) instead of axpy or the packed GEMM: register tiles of 4 rows
// by 16 floats over chunks of 8 rows of b read in place, each thread a block of c's columns.
// 2-core machine, float32, NumPy / axpy or packed / rows_tiles (ms): 8 x 4096 @ 4096 x 4096
// 4.2-4.5 / 4.9-5.1 / 2.5-2.6, 16 rows 5.7-6.1 / 7.0-7.6 / 4.5-4.8; 8 x 64 @ 64 x 65536 0.8 / 1.7-2.1
// / 0.55-0.73. Up to 64 rows it lost (64 x 16384 @ 16384 x 256 9.2 against 4.3 packed).
constexpr std::int64_t kSkinnyRowsMax = 16;

// Whether skinny_gemm takes an M x K x N product with a row-major b on rows_tiles.
bool rows_path(std::int64_t M, std::int64_t K, std::int64_t N, std::size_t elem);

// c (row-major, ldc) = a @ b when M or N is at most kSkinnyMax and the long operand's layout suits
// a kernel (always, for dense operands); returns false, touching nothing, otherwise.
template <class T>
bool skinny_gemm(const core::HostMatrix& a, const core::HostMatrix& b, T* c, std::int64_t ldc,
                 int threads);

// c = a @ b for a complex a of M rows given as its real row-major view (M x 2K interleaved parts)
// and a complex b of at most kComplexDotsMax columns (a matrix times a vector): the dots kernel with
// two short rows a column of b, (re b, -im b) and (im b, re b) built from b directly, so that each
// row of a's view gives c's real and imaginary parts (c: M x 2N reals, ldc apart). The core's route
// writes b's real form B'' first and the skinny path copies it again into that panel: 1.4-1.9 us of
// a (256 x 256) @ (256) complex64 product's 7 beyond the real product of the same work. False,
// touching nothing, for other shapes (a column-major view, wider b, at most kSkinnyMax rows).
constexpr std::int64_t kComplexDotsMax = 2;
template <class T>
bool complex_dots(const core::HostMatrix& a, const core::HostMatrix& b, T* c, std::int64_t ldc, int threads);

}  // namespace portmat::cpu
