// The reference gemm: the test oracle for every backend. Plain loops, float64 accumulation, any
// strides; also the componentwise error bound the tests hold kernels to.
#pragma once

#include <vector>

#include "portmat/portmat.hpp"

namespace portmat::reference {

// ref[i*N + j] = sum_k a(i,k) * b(k,j) and mag[i*N + j] = sum_k |a(i,k) * b(k,j)|, in float64.
void gemm(const MatrixView& a, const MatrixView& b, std::vector<double>& ref,
          std::vector<double>& mag);

// Largest |c - ref| / (mag * K * eps(dtype)) over all entries: <= 1 for an accurate kernel
// (the classical bound |fl(a.b) - a.b| <= K u sum|a_k b_k|). NaN anywhere gives +inf.
double worst_error_ratio(const MatrixView& a, const MatrixView& b, const MatrixView& c);

// ---- the precision modes (portmat.hpp, Precision; issue 18) ----------------------------------
// What each mode computes, exactly, so that tests can hold a kernel to it.
// x rounded to TF32 (the top 19 bits of a float32: 10 mantissa bits) to nearest, ties to even;
// infinities stay, NaN stays NaN, a finite x that rounds past the largest TF32 becomes infinity.
// The CUDA kernels (gemm_tc.cuh, tf32_rne) round the same way, bit for bit.
float round_tf32(float x);
// x rounded to bfloat16 (the top 16 bits: 7 mantissa bits) to nearest, ties to even, returned as
// the float32 it stands for; NaN stays NaN (cvt.rn.bf16x2.f32's rounding).
float round_bf16(float x);
// float32_tc's split: hi = round_tf32(x), lo = round_tf32(x - hi) (x - hi is exact in float32);
// lo = 0 where hi is not finite. |x - hi - lo| <= 2^-22 |x| for normal x.
void split_tf32(float x, float& hi, float& lo);

// What a mode's products of one a(i,k) * b(k,j) are, in float64 (exact: TF32 and bfloat16
// products fit in a double): float32 a*b; tf32 and bfloat16 the product of the rounded operands;
// float32_tc ahi*bhi + ahi*blo + alo*bhi.
double mode_product(Precision p, float a, float b);

// ref[i*N + j] = sum_k mode_product(a(i,k), b(k,j)) and mag as gemm's, in float64: what a kernel
// of mode p computes, up to its float32 accumulation. a and b float32.
void gemm_mode(Precision p, const MatrixView& a, const MatrixView& b, std::vector<double>& ref,
               std::vector<double>& mag);

// The bound a kernel of mode p must meet for every entry of c, over K products, relative to
// mag = sum_k |a(i,k) b(k,j)|: |c - a.b| <= error_bound(p, K) * mag, where a.b is the exact
// (float64) product of the float32 operands. The operands' rounding (per product: tf32
// 2 * 2^-11 + 2^-22, bfloat16 2 * 2^-8 + 2^-16, float32_tc 3 * 2^-22 + 2^-44: the split leaves
// 2^-22 |x| of each operand, and lo*lo is dropped) plus the float32 accumulation, K * 2^-23
// (float32_tc: 3K * 2^-23, three additions a k; 2^-23, not 2^-24: tensor cores are not
// documented to round their sums to nearest). Worst-case: no correct kernel can exceed it,
// whatever the data; a kernel that computes plain TF32 when asked for float32_tc fails it on
// data whose operands are not TF32 numbers wherever K is small enough (tests: K <= 64).
double error_bound(Precision p, std::int64_t k);

// Largest |c - ref_mode| / (mag * accumulation) over all entries, where ref_mode is gemm_mode's
// and accumulation the float32 accumulation part of error_bound (K * 2^-23, 3K for float32_tc):
// <= 1 for a kernel that computes exactly mode p's products and sums them in float32. A kernel
// that computes another mode fails it wherever that mode's products differ by more. NaN: +inf.
double worst_mode_ratio(Precision p, const MatrixView& a, const MatrixView& b, const MatrixView& c);

// Largest |c - a.b| / mag over all entries (a.b exact in float64): the error measure of the
// bound above and of `python -m portmat bench --precision`. NaN anywhere gives +inf.
double worst_relative_error(const MatrixView& a, const MatrixView& b, const MatrixView& c);

}  // namespace portmat::reference
