// Short inner dimension (issue 16): c = a @ b with k <= kShortKMax (32) and c large: rank-k
// updates, outer products (k = 1), a tall a against a small b, a small a against a wide b. Such a
// product does at most 32 multiply-adds per element of c it writes, so its time is c's bytes (and
// the long operand's) at memory speed. The tiles spend it otherwise: a 128x256 tile loads a 16-deep
// slab of which k = 1 uses one row, and the thin kernels (a side of c at most 16) read the long
// operand along k, which is too short to keep their lanes busy.
//
// Here a block of 256 threads owns a TM x TN block of c (TN = 4 * CT columns, CT threads across
// them; TM = RT * 256 / CT rows): it copies a's TM x k and b's k x TN into shared memory (zeros
// outside the matrices), and each thread computes RT rows x 4 consecutive columns of c (rows 256 /
// CT apart) with k x 4 x RT multiply-adds, and streams them out as float4 where c allows. CT = 32
// (128 columns: a warp writes 512 contiguous bytes of a row) for wide results, CT = 4 (16 columns)
// for results of at most 16 columns; RT = 2 where a block of 4 rows a thread would leave more of
// its rows idle (16 x 16 @ 16 x 65536). The copies load 16 bytes a thread where the operand allows
// (ShortKArgs::a_vec, b_vec): with 4-byte loads a block had too little in flight (H200, session 31,
// (65536 x 16) @ (16 x 16) 6.6 -> 5.2 us, (16 x 16) @ (16 x 65536) 7.1 -> 4.8, docs/cuda.md).
#pragma once

#include "gemm_common.cuh"

namespace portmat::cuda {
namespace {

constexpr int kShortKThreads = 256;
constexpr int kShortKLoads = 8;  // loads of a thread in flight while a block copies its operands

template <int CT, int RT>
struct ShortKShape {
  static constexpr int kTN = 4 * CT;                            // columns of c per block
  static constexpr int kTM = RT * (kShortKThreads / CT);        // rows of c per block
  static constexpr int kLdA = kTM + 1;   // As[k][i]: a row-major a is copied along k (odd: no bank conflict)
  static constexpr int kLdB = kTN + 4;   // Bs[k][j]: float4 rows; +4 spreads a column-major b's copy
};

// Rows [r0, r0 + R) of a block of k columns of a matrix into shared memory, dst[kk * LD + i],
// zeros past `rows`: its (i, kk) at src[kk * ld + i] when i_contig, else at src[i * ld + kk].
// Consecutive threads walk src's contiguous index, kShortKLoads loads of a thread in flight before
// their stores (a block does nothing else until its copy is done, so one load at a time would
// leave it waiting on each). a's rows are its rows; b's are its columns (i_contig: b row-major).
template <int R, int LD>
__device__ __forceinline__ void short_k_copy(const float* src, long long ld, bool i_contig, int r0, int rows, int k,
                                             float* dst) {
  const int count = R * k;
  auto at = [&](int e, int& i, int& kk) {
    if (i_contig)
      i = e % R, kk = e / R;
    else
      kk = e % k, i = e / k;
  };
  for (int e0 = threadIdx.x; e0 < count; e0 += kShortKThreads * kShortKLoads) {
    float v[kShortKLoads];
#pragma unroll
    for (int u = 0; u < kShortKLoads; ++u) {
      const int e = e0 + u * kShortKThreads;
      int i, kk;
      at(e, i, kk);
      const int gi = r0 + i;
      v[u] = e < count && gi < rows ? (i_contig ? src[kk * ld + gi] : src[static_cast<long long>(gi) * ld + kk]) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kShortKLoads; ++u) {
      const int e = e0 + u * kShortKThreads;
      if (e >= count) break;
      int i, kk;
      at(e, i, kk);
      dst[kk * LD + i] = v[u];
    }
  }
}

// short_k_copy with 16-byte loads (vec: see ShortKArgs): units of 4 consecutive elements along the
// contiguous index, i (i_contig; R is a multiple of 4, a unit past `rows` loaded in part) or kk
// (k a multiple of 4); each unit's 4 values go to their 4 places in dst.
template <int R, int LD>
__device__ __forceinline__ void short_k_copy_vec(const float* src, long long ld, bool i_contig, int r0, int rows, int k,
                                                 float* dst) {
  static_assert(R % 4 == 0, "whole units of rows");
  const int count = i_contig ? R / 4 * k : R * (k / 4);
  for (int e0 = threadIdx.x; e0 < count; e0 += kShortKThreads * kShortKLoads) {
    float4 v[kShortKLoads];
#pragma unroll
    for (int u = 0; u < kShortKLoads; ++u) {
      const int e = e0 + u * kShortKThreads;
      v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (e >= count) continue;
      if (i_contig) {
        const int gi = r0 + e % (R / 4) * 4, kk = e / (R / 4);
        const float* x = src + kk * ld + gi;
        if (gi + 3 < rows) {
          v[u] = __ldcs(reinterpret_cast<const float4*>(x));
        } else {
          if (gi < rows) v[u].x = x[0];
          if (gi + 1 < rows) v[u].y = x[1];
          if (gi + 2 < rows) v[u].z = x[2];
        }
      } else {
        const int kk = e % (k / 4) * 4, gi = r0 + e / (k / 4);
        if (gi < rows) v[u] = __ldcs(reinterpret_cast<const float4*>(src + static_cast<long long>(gi) * ld + kk));
      }
    }
#pragma unroll
    for (int u = 0; u < kShortKLoads; ++u) {
      const int e = e0 + u * kShortKThreads;
      if (e >= count) break;
      if (i_contig) {
        float* d = dst + e / (R / 4) * LD + e % (R / 4) * 4;
        d[0] = v[u].x, d[1] = v[u].y, d[2] = v[u].z, d[3] = v[u].w;
      } else {
        float* d = dst + e % (k / 4) * 4 * LD + e / (k / 4);
        d[0] = v[u].x, d[LD] = v[u].y, d[2 * LD] = v[u].z, d[3 * LD] = v[u].w;
      }
    }
  }
}

template <int CT, int RT>
__device__ __forceinline__ void short_k_body(const ShortKArgs& p) {
  using S = ShortKShape<CT, RT>;
  __shared__ __align__(16) float As[kShortKMax * S::kLdA];
  __shared__ __align__(16) float Bs[kShortKMax * S::kLdB];
  const int row0 = blockIdx.x * S::kTM, col0 = blockIdx.y * S::kTN;
  const int k = p.k;
  if (p.a_vec)
    short_k_copy_vec<S::kTM, S::kLdA>(static_cast<const float*>(p.a), p.lda, p.a_col, row0, p.m, k, As);
  else
    short_k_copy<S::kTM, S::kLdA>(static_cast<const float*>(p.a), p.lda, p.a_col, row0, p.m, k, As);
  if (p.b_vec)
    short_k_copy_vec<S::kTN, S::kLdB>(static_cast<const float*>(p.b), p.ldb, !p.b_col, col0, p.n, k, Bs);
  else
    short_k_copy<S::kTN, S::kLdB>(static_cast<const float*>(p.b), p.ldb, !p.b_col, col0, p.n, k, Bs);
  __syncthreads();
  const int tx = threadIdx.x % CT, ty = threadIdx.x / CT;
  constexpr int kRowStep = kShortKThreads / CT;
  float acc[RT][4];
#pragma unroll
  for (int q = 0; q < RT; ++q) acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.f;
#pragma unroll 4
  for (int kk = 0; kk < k; ++kk) {
    const float4 w = *reinterpret_cast<const float4*>(Bs + kk * S::kLdB + tx * 4);
#pragma unroll
    for (int q = 0; q < RT; ++q) {
      const float x = As[kk * S::kLdA + ty + q * kRowStep];
      acc[q][0] = fmaf(x, w.x, acc[q][0]);
      acc[q][1] = fmaf(x, w.y, acc[q][1]);
      acc[q][2] = fmaf(x, w.z, acc[q][2]);
      acc[q][3] = fmaf(x, w.w, acc[q][3]);
    }
  }
  float* c = static_cast<float*>(p.c);
  const int j = col0 + tx * 4;
#pragma unroll
  for (int q = 0; q < RT; ++q) {
    const int i = row0 + ty + q * kRowStep;
    if (i >= p.m) break;
    float* out = c + static_cast<long long>(i) * p.ldc + j;
    if (p.c_vec && j + 3 < p.n) {
      __stcs(reinterpret_cast<float4*>(out), make_float4(acc[q][0], acc[q][1], acc[q][2], acc[q][3]));
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (j + e < p.n) out[e] = acc[q][e];
    }
  }
}

}  // namespace
}  // namespace portmat::cuda
