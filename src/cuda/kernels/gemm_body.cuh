// The plain body (gemm_body): gemm.cu's contract in its simplest form, and the ancestor of the
// other families. Each k step of a slab loads the thread's fragments from shared memory and then
// runs their FMAs; the cp.async ring is the only pipelining. It runs the tiles that need no more:
// 128x256 float32 (the baseline that the other families are measured against), 64x64 float32
// (the default when there are fewer 128x128 tiles than SMs) and float64's one tile, 64x64.
// float64 is not a family of its own: it is this body with T = double (its only own code is the
// double overloads of lds4 and store4 in gemm_common.cuh).
#pragma once

#include "gemm_common.cuh"

namespace portmat::cuda {
namespace {

template <class T, const GemmTile& C, bool A_KMAJOR, bool B_KMAJOR>
__device__ __forceinline__ void gemm_body(const GemmArgs& p) {
  constexpr int BM = C.bm, BN = C.bn, BK = C.bk, STAGES = C.stages, RM = C.rm, RN = C.rn;
  constexpr int LM = C.lanes_m(), LN = C.lanes_n(), THREADS = C.threads();
  constexpr int WARPS_M = BM / C.wm;
  constexpr int SA = BM + GemmTile::kPad, SB = BN + GemmTile::kPad;  // shared row strides
  static_assert(LM * LN == 32, "a warp's lanes must tile its warp tile");
  static_assert(BM % C.wm == 0 && BN % C.wn == 0, "warp tiles must tile the block tile");
  static_assert(STAGES >= 2, "the pipeline needs at least two stages");
  static_assert(C.elem_bytes == sizeof(T), "tile table and element type disagree");
  static_assert((SA * sizeof(T)) % 16 == 0 && (SB * sizeof(T)) % 16 == 0, "rows stay 16-byte aligned");
  static_assert(!C.cluster || C.smem_bytes() >= BM * BN * static_cast<int>(sizeof(T)),
                "a cluster kernel's shared memory holds its whole tile (cluster_sum_store)");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* As = reinterpret_cast<T*>(smem_raw);  // [STAGES][BK][SA]
  T* Bs = As + STAGES * BK * SA;           // [STAGES][BK][SB]

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  const TileOrigin tile = swizzled_tile<BM, BN>(p, blockIdx.x);
  const int m0 = tile.m0, n0 = tile.n0;

  const SlabLoader<T, BM, BK, SA, THREADS, A_KMAJOR> la(static_cast<const T*>(p.a), p.lda, p.m, p.k,
                                                        p.a_vec, m0, tid);
  const SlabLoader<T, BN, BK, SB, THREADS, B_KMAJOR> lb(static_cast<const T*>(p.b), p.ldb, p.n, p.k,
                                                        p.b_vec, n0, tid);
  const int k_tiles = (p.k + BK - 1) / BK;
  const bool a_full = m0 + BM <= p.m, b_full = n0 + BN <= p.n;  // no row/column edge in this tile

  // Prologue: stages - 1 slabs in flight. Every step commits a group (possibly empty) so that
  // wait_group<STAGES - 2> always means "slab t has landed".
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) {
      const bool k_full = (s + 1) * BK <= p.k;
      la.load(As + s * BK * SA, m0, s * BK, a_full && k_full);
      lb.load(Bs + s * BK * SB, n0, s * BK, b_full && k_full);
    }
    cp_async_commit();
  }

  // This thread's place: warp tile (wm0, wn0); its 4-wide pieces at wm0 + r * 4 * LM + lm * 4.
  const int wm0 = (warp % WARPS_M) * C.wm, wn0 = (warp / WARPS_M) * C.wn;
  const int lm = lane / LN, ln = lane % LN;
  const int a_col = wm0 + lm * 4, b_col = wn0 + ln * 4;

  T acc[4 * RM][4 * RN];
#pragma unroll
  for (int i = 0; i < 4 * RM; ++i)
#pragma unroll
    for (int j = 0; j < 4 * RN; ++j) acc[i][j] = T(0);

  for (int t = 0; t < k_tiles; ++t) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // slab t visible to all; everyone is done with slab t - 1's buffer
    {
      const int next = t + STAGES - 1, s = next % STAGES;
      if (next < k_tiles) {
        const bool k_full = (next + 1) * BK <= p.k;
        la.load(As + s * BK * SA, m0, next * BK, a_full && k_full);
        lb.load(Bs + s * BK * SB, n0, next * BK, b_full && k_full);
      }
      cp_async_commit();
    }
    const T* as = As + (t % STAGES) * BK * SA + a_col;
    const T* bs = Bs + (t % STAGES) * BK * SB + b_col;
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      T af[4 * RM], bf[4 * RN];
#pragma unroll
      for (int r = 0; r < RM; ++r) lds4(as + kk * SA + r * 4 * LM, af, 4 * r);
#pragma unroll
      for (int r = 0; r < RN; ++r) lds4(bs + kk * SB + r * 4 * LN, bf, 4 * r);
      outer_fma(acc, af, bf);
    }
  }
  cp_async_wait<0>();  // no copy may outlive the block (they are all empty by now)

  auto row_of = [&](int i) { return m0 + wm0 + (i / 4) * 4 * LM + lm * 4 + i % 4; };
  if constexpr (C.cluster)  // split-K's slices summed in the cluster's shared memory (64x64c)
    cluster_sum_store<BM, BN, THREADS, RM, RN, LN>(p, acc, row_of, n0 + wn0 + ln * 4, m0, n0, As);
  else
    store_acc<T, RM, RN, LN>(p, acc, row_of, n0 + wn0 + ln * 4);
}

}  // namespace
}  // namespace portmat::cuda
