// The micro-kernel contract, written once for every ISA (scalar, AVX2, AVX-512, NEON, ...).
//
// A micro-kernel computes one MR x NR tile of C from a packed micro-panel of A and one of B:
//
//   c[i*ldc + j] = (accumulate ? c[i*ldc + j] : 0) + sum_{p<k} a[p*MR + i] * b[p*NR + j]
//
// for i < m, j < n, where m <= MR and n <= NR describe an edge tile.
//   - a: the A micro-panel, k-major: the MR elements of column p of A are at a[p*MR .. p*MR+MR).
//     Rows >= m are zero-padded by the packer, so the kernel may compute the full tile.
//   - b: the B micro-panel, k-major: the NR elements of row p of B are at b[p*NR .. p*NR+NR);
//     columns >= n are zero-padded. No alignment is required (block starts are 64-byte aligned).
//   - c: row-major with leading dimension ldc. The kernel reads and writes only the m x n
//     elements of the tile (edge tiles use masked or scalar stores), never beyond.
//   - k >= 1. When accumulate is false, C is not read (it may hold garbage or NaN).
// This header holds only declarations and plain types: it is included by translation units
// compiled with ISA flags (-mavx512f, ...), which must not emit inline functions the rest of the
// program could pick up.
#pragma once

#include <cstdint>

namespace portmat::cpu {

template <class T>
using GemmUkernel = void (*)(std::int64_t k, const T* a, const T* b, T* c, std::int64_t ldc,
                             int m, int n, bool accumulate);

// The direct-A form of a kernel: the same tile, with A read in place from a row-major a instead
// of a packed micro-panel. Row i of the tile (k contiguous) is at a + i*lda; all MR rows are real
// (m == MR: the driver packs an edge panel and runs the packed kernel on it); b, c, n and
// accumulate as above. Packing A costs a pass over it, written and read again: 5-6% of a 512^3 or
// 768^3 product on one thread (gemm_driver.cpp, direct_a).
template <class T>
using GemmUkernelDirectA = void (*)(std::int64_t k, const T* a, std::int64_t lda, const T* b, T* c,
                                    std::int64_t ldc, int n, bool accumulate);

// Lines a kernel asks into L2 while it runs, one a k step until `left` is 0 (the driver's source of
// its next B block: gemm_driver.cpp, run_thread): rows of `lines` 64-byte lines, `ld` bytes apart,
// the next at row + 64 * line. The kernel advances it; what it leaves the driver issues itself.
struct PrefetchLines {
  const char* row;
  std::int64_t ld;
  std::int64_t line, lines;
  std::int64_t left;
};
template <class T>
using GemmUkernelPf = void (*)(std::int64_t k, const T* a, const T* b, T* c, std::int64_t ldc, int m, int n,
                               bool accumulate, PrefetchLines* pf);
template <class T>
using GemmUkernelDirectAPf = void (*)(std::int64_t k, const T* a, std::int64_t lda, const T* b, T* c,
                                      std::int64_t ldc, int n, bool accumulate, PrefetchLines* pf);

// A complex64 / complex128 element as NumPy stores it: the real part, then the imaginary part.
// The complex micro-kernels (kernels/gemm_complex_<isa>.cpp) follow the contract above with T one
// of these: a, b and c hold complex elements, the tile is MR x NR complex elements and ldc counts
// complex elements; c = (accumulate ? c : 0) + a @ b in complex arithmetic. Plain aggregates on
// purpose (no member functions: this header reaches the ISA-flagged files); the driver's few
// uses of them as numbers (a zero, a sum) are in gemm_driver.cpp, ElementOps.
struct Complex64 {
  float re, im;
};
struct Complex128 {
  double re, im;
};

// A complex micro-kernel with the tile and cache blocks its kernel file's tunables give it
// (kernel_table.cpp turns it into a GemmConfig with the packers of that tile).
template <class C>
struct ComplexKernel {
  const char* name;
  int mr, nr;                      // tile, complex elements
  std::int64_t mc, kc, nc;         // cache blocks, complex elements
  bool a_outer;                    // the driver's loop order (gemm_driver.hpp)
  GemmUkernel<C> ukernel;
};

}  // namespace portmat::cpu

namespace portmat::cpu {

// ---- the micro-kernels, one translation unit per ISA (kernels/gemm_<isa>.cpp) ----------------
// Call an ISA's kernels only where kernel_table.cpp found the CPU supports that ISA.
#if defined(__x86_64__) || defined(_M_X64)
void gemm_avx512_f32_14x32(std::int64_t k, const float* a, const float* b, float* c,
                           std::int64_t ldc, int m, int n, bool accumulate);
void gemm_avx512_f64_14x16(std::int64_t k, const double* a, const double* b, double* c,
                           std::int64_t ldc, int m, int n, bool accumulate);
void gemm_avx512_f32_14x32_direct_a(std::int64_t k, const float* a, std::int64_t lda, const float* b,
                                    float* c, std::int64_t ldc, int n, bool accumulate);
void gemm_avx512_f32_14x32_pf(std::int64_t k, const float* a, const float* b, float* c, std::int64_t ldc, int m,
                              int n, bool accumulate, PrefetchLines* pf);
void gemm_avx512_f32_14x32_direct_a_pf(std::int64_t k, const float* a, std::int64_t lda, const float* b, float* c,
                                       std::int64_t ldc, int n, bool accumulate, PrefetchLines* pf);
void gemm_avx512_f64_14x16_direct_a(std::int64_t k, const double* a, std::int64_t lda, const double* b,
                                    double* c, std::int64_t ldc, int n, bool accumulate);
void gemm_avx2_f32_6x16(std::int64_t k, const float* a, const float* b, float* c,
                        std::int64_t ldc, int m, int n, bool accumulate);
void gemm_avx2_f64_6x8(std::int64_t k, const double* a, const double* b, double* c,
                       std::int64_t ldc, int m, int n, bool accumulate);

// The integer products of every integer dtype (wrap-around uint32 / uint64 multiply-adds;
// gemm_avx512_int.cpp needs AVX512DQ as well as AVX512F).
void gemm_avx512_u32_14x32(std::int64_t k, const std::uint32_t* a, const std::uint32_t* b,
                           std::uint32_t* c, std::int64_t ldc, int m, int n, bool accumulate);
void gemm_avx512_u64_14x16(std::int64_t k, const std::uint64_t* a, const std::uint64_t* b,
                           std::uint64_t* c, std::int64_t ldc, int m, int n, bool accumulate);
void gemm_avx2_u32_6x16(std::int64_t k, const std::uint32_t* a, const std::uint32_t* b,
                        std::uint32_t* c, std::int64_t ldc, int m, int n, bool accumulate);
void gemm_avx2_u64_6x8(std::int64_t k, const std::uint64_t* a, const std::uint64_t* b,
                       std::uint64_t* c, std::int64_t ldc, int m, int n, bool accumulate);
// gemm_avx2_u64_6x8 for operands whose every value is a sign-extended 32-bit one (kernel_table.hpp).
void gemm_avx2_u64n_6x8(std::int64_t k, const std::uint64_t* a, const std::uint64_t* b,
                        std::uint64_t* c, std::int64_t ldc, int m, int n, bool accumulate);

// Packs one whole A micro-panel of 6 rows and k columns of a row-major a (row i at a + i*lda) into
// dst, k-major as the AVX2 6-row kernels read it.
void pack_a_avx2_f32_6(const float* a, std::int64_t lda, std::int64_t k, float* dst);

// Packs one A micro-panel of 14 rows (rows <= 14 of them real, the rest zero-padded) and k
// columns starting at `a` (row-major: row i at a + i*lda; col_major: column p at a + p*lda) into
// dst, k-major as the 14-row kernels read it (ukernel contract above).
void pack_a_avx512_f32_14(const float* a, std::int64_t lda, bool col_major, int rows,
                          std::int64_t k, float* dst);

// The complex kernels of AVX2 + FMA (kernels/gemm_complex_avx2.cpp) and AVX-512
// (kernels/gemm_complex_avx512.cpp), each with its tile and blocks.
extern const ComplexKernel<Complex64> kComplexAvx2C64;
extern const ComplexKernel<Complex128> kComplexAvx2C128;
extern const ComplexKernel<Complex64> kComplexAvx512C64;
extern const ComplexKernel<Complex128> kComplexAvx512C128;

// `iters` rounds of independent float32 FMAs (12 chains of full vectors) for the peak estimate:
// returns a value that depends on every FMA so none is optimised away.
float fma_loop_avx512_f32(long iters);  // 12 * 16 * 2 flops per round
float fma_loop_avx2_f32(long iters);    // 12 * 8 * 2 flops per round
#endif

#if defined(__aarch64__)
// NEON is part of the AArch64 baseline: these need no run-time check.
void gemm_neon_f32_8x12(std::int64_t k, const float* a, const float* b, float* c,
                        std::int64_t ldc, int m, int n, bool accumulate);
void gemm_neon_f64_8x6(std::int64_t k, const double* a, const double* b, double* c,
                       std::int64_t ldc, int m, int n, bool accumulate);
float fma_loop_neon_f32(long iters);    // 12 * 4 * 2 flops per round
#endif

}  // namespace portmat::cpu
