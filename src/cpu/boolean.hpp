// Boolean products: c[i][j] = OR over k of (a[i][k] AND b[k][j]), NumPy's bool matmul, computed
// as logic rather than as a count.
//
// Why: booleans went through the uint32 product (both operands widened 4x, the packed GEMM, then
// c != 0), where NumPy's own loop stops at the first k that makes c[i][j] true: on random inputs a
// (2048) @ (2048 x 2048) bool product took 2 ms against NumPy's 10-30 us, a 1000^3 one 50 ms
// against 20. Here two kernels stop early the same way, and without a hit they still do a
// vector's worth of work an instruction (NumPy's loop: one element):
//   rows: out[r][x] = OR over k with S[r][k] of L[k][x], L's rows contiguous (a row-major b; a
//         column-major a as c^T = b^T a^T): the row of out is built in registers, C vectors at
//         a time, by OR-ing in the rows of L that S's row selects (its nonzero k, listed once a
//         row, 64 at a time as they are needed), until every lane of the C vectors is set;
//   dots: out[i][j] = any(a[i][k] != 0 and b[k][j] != 0), a row-major and b column-major: both
//         contiguous along k, a vector of k at a time, up to the first hit;
//   bits: the same for a short k (at most 256): a's rows and b's columns packed into 64-bit words
//         first (any layout), a pair one AND a word.
// A byte other than 0 or 1 in a boolean counts as true (NumPy's truth value), and c gets 0 or 1.
#pragma once

#include <cstdint>

#include "core/backend.hpp"

namespace portmat::cpu {

// c (row-major, ldc, bytes) = a @ b for boolean a and b (bytes, dense: row- or column-major).
void boolean_gemm(const core::HostMatrix& a, const core::HostMatrix& b, std::uint8_t* c, std::int64_t ldc,
                  int threads);

}  // namespace portmat::cpu
