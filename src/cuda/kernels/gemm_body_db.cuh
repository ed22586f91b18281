// The register-double-buffered body (gemm_body_db): gemm_body's tile with the shared-memory reads
// software-pipelined, so that no FFMA waits on the LDS issued just before it. It runs the
// experimental 128x256 variants of issue 4: _db (gemm_body's shared layout) and _ak (a row-major a
// kept k-contiguous in shared memory by RowSlabLoader, the only user of GemmTile::a_mk). _fp
// (gemm_body_fp.cuh) grew out of _db and is faster than both; they stay selectable
// (PORTMAT_CUDA_TILE) for comparison, with their measurements in gemm_tiles.h.
#pragma once
#include <type_traits>

#include "gemm_common.cuh"

namespace portmat::cuda {
namespace {

// Copies one bk-deep slab of a k-contiguous operand (row-major a) into shared memory as it is:
// slab[r][SK], row r of the tile holding its bk k-values contiguously (SK = BK + kPad). 16-byte
// copies: a row is BK / kChunk chunks; piece i of thread tid is chunk tid % kChunksPerRow of row
// i * kRowsPerPass + tid / kChunksPerRow. Zero-filled past the k edge (src-size) and past the row
// edge; element copies when the operand is not 16-byte aligned (vec == 0).
template <class T, int ROWS, int BK, int SK, int THREADS>
struct RowSlabLoader {
  static constexpr int kChunk = 16 / sizeof(T);
  static constexpr int kChunksPerRow = BK / kChunk;
  static constexpr int kRowsPerPass = THREADS / kChunksPerRow;
  static constexpr int kPer = ROWS / kRowsPerPass;
  static_assert(BK % kChunk == 0 && THREADS % kChunksPerRow == 0 && ROWS % kRowsPerPass == 0,
                "row pieces must sit at fixed distances");

  const T* base;
  const T* g;  // this thread's first piece in k-slab 0 (may point outside: used only when valid)
  long long ld;
  int r, kc, rows, k, vec;

  __device__ __forceinline__ RowSlabLoader(const T* g_, long long ld_, int rows_, int k_, int vec_,
                                           int r0, int tid)
      : base(g_), ld(ld_), rows(rows_), k(k_), vec(vec_) {
    r = r0 + tid / kChunksPerRow;
    kc = (tid % kChunksPerRow) * kChunk;
    g = g_ + r * ld + kc;
  }

  __device__ __forceinline__ void load(T* slab, int r0, int k0, bool full) const {
    const T* src0 = g + k0;
    T* dst0 = slab + (r - r0) * SK + kc;
    const int gk = k0 + kc;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int dr = i * kRowsPerPass;
      if (full && vec) {
        cp_async_16(dst0 + dr * SK, src0 + dr * ld, 16);
      } else if (vec) {
        const int valid = r + dr < rows ? min(max(k - gk, 0), kChunk) : 0;
        cp_async_16(dst0 + dr * SK, valid ? src0 + dr * ld : base, valid * int(sizeof(T)));
      } else {
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          const bool ok = r + dr < rows && gk + j < k;
          cp_async_elem<sizeof(T)>(dst0 + dr * SK + j, ok ? src0 + dr * ld + j : base,
                                   ok ? int(sizeof(T)) : 0);
        }
      }
    }
  }
};

// The same contract and block tile as gemm_body, with the shared-memory reads software-pipelined:
//  - the A and B fragments of k step kk + 1 are loaded into a second register set while the FFMAs
//    of step kk run, so no FFMA waits on the LDS issued just before it;
//  - across slabs too: the barrier (and the copies of slab t + STAGES into the buffer just freed)
//    sit before the last k step of slab t, whose fragments are already in registers, and the
//    first fragments of slab t + 1 load while that step's FFMAs run;
//  - with C.a_mk and a row-major a, As is [m][SK] (k contiguous, SK = BK + kPad, 16-byte copies);
//    a thread's 4 RM rows are then wm0 + i * LM + lm (i < 4 RM), read 4 k at a time (LDS.128 per
//    row per 4 k steps: the same LDS count as [k][m]); each row's next 4 k are loaded right after
//    the FFMAs of the last k step that used it (in registers 4 RM x 4, not double-buffered).
//    SK * 4 bytes = 16 * odd, so 8 consecutive rows read 8 distinct 16-byte bank groups.
//  - LATE_COPY: the copies of slab t + STAGES are issued after the last step's FFMAs instead of
//    right after the barrier. Only instruction order changes; ptxas schedules the two differently
//    (chosen per tile in gemm.cu's entry points by reading the SASS: the distance from each LDS
//    to its first use).
template <class T, const GemmTile& C, bool A_KMAJOR, bool B_KMAJOR, bool LATE_COPY>
__device__ __forceinline__ void gemm_body_db(const GemmArgs& p) {
  constexpr int BM = C.bm, BN = C.bn, BK = C.bk, STAGES = C.stages, RM = C.rm, RN = C.rn;
  constexpr int LM = C.lanes_m(), LN = C.lanes_n(), THREADS = C.threads();
  constexpr int WARPS_M = BM / C.wm;
  constexpr bool AMK = C.a_mk && A_KMAJOR;                   // As[m][SK]
  constexpr int SA = AMK ? BK + GemmTile::kPad : BM + GemmTile::kPad;  // As row stride
  constexpr int SB = BN + GemmTile::kPad;
  constexpr int A_STAGE = C.a_stage(), B_STAGE = BK * SB;    // elements per stage
  static_assert(LM * LN == 32, "a warp's lanes must tile its warp tile");
  static_assert(BM % C.wm == 0 && BN % C.wn == 0, "warp tiles must tile the block tile");
  static_assert(STAGES >= 2, "the pipeline needs at least two stages");
  static_assert(C.elem_bytes == sizeof(T), "tile table and element type disagree");
  static_assert((SA * sizeof(T)) % 16 == 0 && (SB * sizeof(T)) % 16 == 0, "rows stay 16-byte aligned");
  static_assert(!AMK || (BK % 4 == 0 && ((SA * sizeof(T)) / 16) % 2 == 1),
                "As[m][k]: whole 4-k groups, odd 16-byte row stride (no bank conflicts)");
  static_assert((AMK ? BM * SA : BK * SA) <= A_STAGE, "a stage of a fits its share");
  static_assert(!AMK || sizeof(T) == 4, "As[m][k] rows are read as float4");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* As = reinterpret_cast<T*>(smem_raw);  // [STAGES][A_STAGE]
  T* Bs = As + STAGES * A_STAGE;           // [STAGES][BK][SB]

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  const TileOrigin tile = swizzled_tile<BM, BN>(p, blockIdx.x);
  const int m0 = tile.m0, n0 = tile.n0;

  using ALoader = typename std::conditional<AMK, RowSlabLoader<T, BM, BK, SA, THREADS>,
                                            SlabLoader<T, BM, BK, SA, THREADS, A_KMAJOR>>::type;
  const ALoader la(static_cast<const T*>(p.a), p.lda, p.m, p.k, p.a_vec, m0, tid);
  const SlabLoader<T, BN, BK, SB, THREADS, B_KMAJOR> lb(static_cast<const T*>(p.b), p.ldb, p.n, p.k,
                                                        p.b_vec, n0, tid);
  const int k_tiles = (p.k + BK - 1) / BK;
  const bool a_full = m0 + BM <= p.m, b_full = n0 + BN <= p.n;
  auto load_slab = [&](int slab, int buf) {
    if (slab < k_tiles) {
      const bool k_full = (slab + 1) * BK <= p.k;
      la.load(As + buf * A_STAGE, m0, slab * BK, a_full && k_full);
      lb.load(Bs + buf * B_STAGE, n0, slab * BK, b_full && k_full);
    }
    cp_async_commit();
  };

  // Prologue: slabs 0 .. STAGES-2 in flight; once slab 0 has landed, slab STAGES-1 goes into the
  // last buffer. From then on, before the last k step of slab t, STAGES groups after slab t are
  // committed (slabs up to t + STAGES - 1), so wait_group<STAGES - 2> means "slab t + 1 landed".
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) load_slab(s, s);
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  load_slab(STAGES - 1, STAGES - 1);

  const int wm0 = (warp % WARPS_M) * C.wm, wn0 = (warp / WARPS_M) * C.wn;
  const int lm = lane / LN, ln = lane % LN;
  // This thread's fragment origin in a stage: As[k][a_off + ...] or As[a_off + ...][k].
  const int a_off = AMK ? (wm0 + lm) * SA : wm0 + lm * 4;
  const int b_off = wn0 + ln * 4;

  T acc[4 * RM][4 * RN];
#pragma unroll
  for (int i = 0; i < 4 * RM; ++i)
#pragma unroll
    for (int j = 0; j < 4 * RN; ++j) acc[i][j] = T(0);

  // AMK: a4[i][q] = a(row i, k 4g + q) of the current 4-k group g. Otherwise af[buf][i].
  constexpr int AF = AMK ? 1 : 2;
  T af[AF][4 * RM], bf[2][4 * RN];
  T a4[AMK ? 4 * RM : 1][4];
  auto load_a = [&](const T* as, int kk, int buf) {  // !AMK: the fragment of step kk
#pragma unroll
    for (int r = 0; r < RM; ++r) lds4(as + kk * SA + r * 4 * LM, af[buf], 4 * r);
  };
  auto load_a_row = [&](const T* as, int g, int i) {  // AMK: row i, 4-k group g
    const float4 x = *reinterpret_cast<const float4*>(as + i * LM * SA + 4 * g);
    a4[i][0] = x.x, a4[i][1] = x.y, a4[i][2] = x.z, a4[i][3] = x.w;
  };
  auto load_b = [&](const T* bs, int kk, int buf) {
#pragma unroll
    for (int r = 0; r < RN; ++r) lds4(bs + kk * SB + r * 4 * LN, bf[buf], 4 * r);
  };

  int rs = 0;  // the buffer being read (slab t)
  {
    const T* as = As + a_off;
    const T* bs = Bs + b_off;
    if constexpr (AMK) {
#pragma unroll
      for (int i = 0; i < 4 * RM; ++i) load_a_row(as, 0, i);
    } else {
      load_a(as, 0, 0);
    }
    load_b(bs, 0, 0);
  }

  for (int t = 0; t < k_tiles; ++t) {
    const T* as = As + rs * A_STAGE + a_off;
    const T* bs = Bs + rs * B_STAGE + b_off;
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      const int cur = kk & 1, nxt = cur ^ 1;
      const int ws = rs;  // the buffer freed at kk == BK - 1
      if (kk == BK - 1) {
        // Every thread has loaded its last fragments of slab t: after the barrier its buffer is
        // free for slab t + STAGES and slab t + 1 has landed (the wait). On the last slab the
        // fragments read below are unused.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (!LATE_COPY) load_slab(t + STAGES, ws);
        rs = rs + 1 == STAGES ? 0 : rs + 1;
        as = As + rs * A_STAGE + a_off;
        bs = Bs + rs * B_STAGE + b_off;
      }
      const int kn = kk == BK - 1 ? 0 : kk + 1;  // the next step, in `as`/`bs`
      load_b(bs, kn, nxt);
      if constexpr (AMK) {
        const int q = kk % 4;
        if (q != 3) {
#pragma unroll
          for (int i = 0; i < 4 * RM; ++i)
#pragma unroll
            for (int j = 0; j < 4 * RN; ++j) acc[i][j] = fma(a4[i][q], bf[cur][j], acc[i][j]);
        } else {
#pragma unroll
          for (int i = 0; i < 4 * RM; ++i) {
#pragma unroll
            for (int j = 0; j < 4 * RN; ++j) acc[i][j] = fma(a4[i][3], bf[cur][j], acc[i][j]);
            load_a_row(as, kn / 4, i);
          }
        }
      } else {
        load_a(as, kn, nxt);
        outer_fma(acc, af[cur], bf[cur]);
      }
      if (LATE_COPY && kk == BK - 1) load_slab(t + STAGES, ws);
    }
  }
  cp_async_wait<0>();

  store_acc<T, RM, RN, LN>(
      p, acc,
      [&](int i) { return m0 + wm0 + (AMK ? i * LM + lm : (i / 4) * 4 * LM + lm * 4 + i % 4); },
      n0 + wn0 + ln * 4);
}

}  // namespace
}  // namespace portmat::cuda
