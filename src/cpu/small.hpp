// Small products, unpacked: c = a @ b where every dimension is small (at most kSmallMax), each
// product on one thread. The CPU backend runs single small products this way and each matrix of a
// stack of small products (np.matmul's batches: a thread per matrix).
//
// Why: the packed GEMM (gemm_driver.hpp) copies a and b into panels before it multiplies. For a
// 32x32 product that copy, the driver's blocking and its thread hand-off cost more than the 32K
// multiply-adds: a stack of 10000 such products ran at 1.4x NumPy on 2 cores where its memory
// traffic allows about 2.3x. Here register tiles of c (6 rows x 2 vectors: 6x16 floats, 6x8
// doubles) accumulate over all of K, reading a's elements (broadcast) and b's row segments where
// they are; the operands of a small product sit in L1/L2 anyway. Compiled for AVX2 + FMA and for
// baseline x86-64, chosen at run time (as skinny.cpp).
#pragma once

#include <cstdint>

#include "core/backend.hpp"

namespace portmat::cpu {

constexpr std::int64_t kSmallMax = 128;  // largest M, N and K the small path takes

// c (row-major, ldc) = a @ b when a and b are row-major (their rows contiguous) and M, N, K are
// at most kSmallMax; returns false, touching nothing, otherwise.
template <class T>
bool small_gemm(const core::HostMatrix& a, const core::HostMatrix& b, T* c, std::int64_t ldc);

}  // namespace portmat::cpu
