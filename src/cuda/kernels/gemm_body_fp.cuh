// The fast-path body (gemm_body_fp): gemm_body_db's k loop (without a_mk) plus unchecked copies
// for the slabs of edge-free tiles, about half the non-FFMA instructions per slab (gemm_tiles.h
// has the counts and the measurements). Its kernels: _fp (128x256) and 128x128_fp, data-parallel;
// _fpa, which adds to c (the NumPy path's k-split pieces); with SK, _sk, the stream-K half of
// the hybrid grid against wave quantization; and, with GemmTile::k_groups = 2, 64x128_sl and its
// batched _slb (sliced k: two groups of warps over the two halves of each slab, their tiles summed
// at the end by k_groups_sum). _fp with _sk is the default for large float32 products on GPUs
// other than sm_90 (there _ws with _wsk, gemm_body_ws.cuh). The stream-K part schedule and
// hand-over protocol are in gemm_common.cuh, shared with _wsk.
#pragma once

#include "gemm_common.cuh"

namespace portmat::cuda {
namespace {

// Sliced k (GemmTile::k_groups = KG > 1): the end of the k loop. Each group of GROUP_THREADS
// threads holds a partial tile (its halves of the slabs); groups 1 .. KG - 1 write theirs into
// `ring` (the pipeline's buffers, free once every warp is past the loop: a barrier first), thread
// by thread as float4s in the order of the registers (a warp's 32 float4 stores are 512
// consecutive bytes: no bank conflicts), a barrier, then group 0 adds them to its own in group
// order (acc = ((g0 + g1) + g2) ...: the same bits on every run). True for the threads of group 0,
// which then store c; the others are done. `ring` must hold (KG - 1) partial tiles.
template <int KG, int GROUP_THREADS, class T, int MI, int NJ>
__device__ __forceinline__ bool k_groups_sum(T (&acc)[MI][NJ], T* ring, int tid) {
  static_assert(NJ % 4 == 0, "a thread's rows are whole float4s");
  constexpr int kVecs = MI * NJ / 4;  // float4s per thread
  const int group = tid / GROUP_THREADS, tig = tid % GROUP_THREADS;
  auto at = [&](int g, int i, int r) { return ring + (((g - 1) * kVecs + i * (NJ / 4) + r) * GROUP_THREADS + tig) * 4; };
  __syncthreads();
  if (group > 0) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int r = 0; r < NJ / 4; ++r) store4(at(group, i, r), &acc[i][4 * r]);
  }
  __syncthreads();
  if (group > 0) return false;
#pragma unroll
  for (int g = 1; g < KG; ++g)
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int r = 0; r < NJ / 4; ++r) {
        T v[4];
        lds4(at(g, i, r), v, 0);
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][4 * r + j] += v[j];
      }
  return true;
}

// threadIdx.x / blockIdx.x read anew (volatile: not merged with an earlier read), so that what is
// computed from them is recomputed rather than kept in registers (or spilled) across a loop.
__device__ __forceinline__ int fresh_tid() {
  int v;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
  return v;
}
__device__ __forceinline__ int fresh_ctaid() {
  int v;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
  return v;
}

// gemm_body_db (without a_mk) plus a fast path for the copies: in a block whose tile has no row or
// column edge and whose operands allow 16-byte copies, every slab but the last STAGES is loaded by
// SlabLoader::load_full (no bounds predicates or selects, running pointers, immediate offsets);
// the remaining slabs (and every slab of an edge tile) take the checked path. The k loop is
// compiled twice (the fast loop, then the checked loop for the last slabs) with the same FFMA /
// LDS sequence per step as gemm_body_db. The block's place, loaders and fragment offsets are
// computed again after the fast loop from fresh tid / ctaid reads: nothing the checked loop and
// the epilogue need stays live (or spilled) through the fast loop. SK: a stream-K block (sk_part
// in gemm_common.cuh) runs the same k loops once per part, over that part's slabs only. ACC:
// c += a @ b, the results added to c (red.global.add, one add per element and launch; the NumPy
// path sums a k-split product's pieces this way, each launch after the one before on one stream:
// deterministic). C.k_groups = KG > 1 (sliced k, 64x128_sl): the threads are KG groups of the
// warp layout above; group g reads only the k rows [g BK / KG, (g + 1) BK / KG) of each slab (its
// fragment offsets start there and a slab is BK / KG k steps), every thread copies (the loaders
// span all C.threads()), and k_groups_sum adds the groups' tiles before group 0 stores c.
template <class T, const GemmTile& C, bool A_KMAJOR, bool B_KMAJOR, int SCHED, bool SK = false,
          bool ACC = false>
__device__ __forceinline__ void gemm_body_fp(const GemmArgs& p) {
  constexpr int BM = C.bm, BN = C.bn, BK = C.bk, STAGES = C.stages, RM = C.rm, RN = C.rn;
  constexpr int LM = C.lanes_m(), LN = C.lanes_n(), THREADS = C.threads();
  constexpr int WARPS_M = BM / C.wm;
  constexpr int KG = C.k_groups, KSTEPS = BK / KG, GROUP_THREADS = C.group_threads();
  static_assert(BK % KG == 0 && KSTEPS % 2 == 0, "the k groups split each slab evenly, in pairs of steps");
  static_assert(KG == 1 || !SK, "sliced k has no stream-K form");
  static_assert((KG - 1) * 16 * RM * RN * GROUP_THREADS <= C.smem_bytes() / int(sizeof(T)),
                "the ring must hold the other groups' partial tiles");
  constexpr int SA = BM + GemmTile::kPad, SB = BN + GemmTile::kPad;
  constexpr int A_STAGE = BK * SA, B_STAGE = BK * SB;
  static_assert(!C.a_mk, "gemm_body_fp keeps As[k][m]");
  static_assert(LM * LN == 32, "a warp's lanes must tile its warp tile");
  static_assert(BM % C.wm == 0 && BN % C.wn == 0, "warp tiles must tile the block tile");
  static_assert(STAGES >= 2, "the pipeline needs at least two stages");
  static_assert(C.elem_bytes == sizeof(T), "tile table and element type disagree");
  static_assert((SA * sizeof(T)) % 16 == 0 && (SB * sizeof(T)) % 16 == 0, "rows stay 16-byte aligned");
  static_assert(C.a_stage() == A_STAGE, "the host's shared-memory size assumes As[k][m]");
  // SCHED: instruction order only (ptxas schedules each differently; chosen per kernel by reading
  // the SASS: no LDS.128 within ~25 instructions of its first use). Bit 0: LATE_COPY as in
  // gemm_body_db; bit 1: a step loads the next A fragment before the next B fragment.
  // Bit 2: SERPENTINE, a step's FFMAs row by row with the columns back and forth (as CUTLASS's
  // SIMT thread mma orders them); otherwise every row left to right. The order changes ptxas's
  // register assignment and with it the register-bank conflicts that Nsight Compute counts as
  // dispatch stalls (record 2026-11-29_h200_ncu_stalls.txt): H200, 128x256 rr, serpentine
  // +0.3-0.8% over in-order at n = 4096-8448; columns outer and rows back and forth was 14% slower
  // (dispatch stalls 0.59 per instruction against 0.16).
  constexpr bool LATE_COPY = SCHED & 1, A_FIRST = SCHED & 2, SERPENTINE = SCHED & 4;
  using ALoader = SlabLoader<T, BM, BK, SA, THREADS, A_KMAJOR>;
  using BLoader = SlabLoader<T, BN, BK, SB, THREADS, B_KMAJOR>;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* As = reinterpret_cast<T*>(smem_raw);  // [STAGES][BK][SA]
  T* Bs = As + STAGES * A_STAGE;           // [STAGES][BK][SB]
  const int k_tiles = (p.k + BK - 1) / BK;

  // Everything that depends on the thread and block index.
  struct Place {
    int m0, n0;         // the block's tile
    int a_off, b_off;   // this thread's fragment origin in a stage: As[k][a_off + ...], Bs likewise
                        // (with k groups, at its group's first k row)
    int row0, col0;     // this thread's first row and column of c
    bool a_full, b_full;
    ALoader la;
    BLoader lb;
  };
  auto place = [&](int tid, int pid) {
    const int lane = tid % 32, warp = (tid % GROUP_THREADS) / 32, k0 = (tid / GROUP_THREADS) * KSTEPS;
    const TileOrigin tile = swizzled_tile<BM, BN>(p, pid);
    const int m0 = tile.m0, n0 = tile.n0;
    const int wm0 = (warp % WARPS_M) * C.wm, wn0 = (warp / WARPS_M) * C.wn;
    const int lm = lane / LN, ln = lane % LN;
    return Place{m0, n0, k0 * SA + wm0 + lm * 4, k0 * SB + wn0 + ln * 4, m0 + wm0 + lm * 4, n0 + wn0 + ln * 4,
                 m0 + BM <= p.m, n0 + BN <= p.n,
                 ALoader(static_cast<const T*>(p.a), p.lda, p.m, p.k, p.a_vec, m0, tid),
                 BLoader(static_cast<const T*>(p.b), p.ldb, p.n, p.k, p.b_vec, n0, tid)};
  };
  // The checked copies of slab `slab` into buffer `buf` (none from `end` on), one group.
  auto load_slab = [&](const Place& w, int slab, int buf, int end) {
    if (slab < end) {
      const bool k_full = (slab + 1) * BK <= p.k;
      w.la.load(As + buf * A_STAGE, w.m0, slab * BK, w.a_full && k_full);
      w.lb.load(Bs + buf * B_STAGE, w.n0, slab * BK, w.b_full && k_full);
    }
    cp_async_commit();
  };

  T acc[4 * RM][4 * RN];
  T af[2][4 * RM], bf[2][4 * RN];
  auto load_a = [&](const T* as, int kk, int buf) { lds_fragment<RM, LM>(as + kk * SA, af[buf]); };
  auto load_b = [&](const T* bs, int kk, int buf) { lds_fragment<RN, LN>(bs + kk * SB, bf[buf]); };

  int rs = 0;  // the buffer being read (slab t)
  // One slab t: KSTEPS k steps (BK, or this thread's group's share of them), with the fragments of
  // step kk + 1 loaded during step kk (across the slab boundary too); before the last step, the
  // barrier and then `copies(ws)` (slab t + STAGES into the buffer ws that slab t leaves).
  auto slab_step = [&](int a_off, int b_off, auto copies) {
    const T* as = As + rs * A_STAGE + a_off;
    const T* bs = Bs + rs * B_STAGE + b_off;
    const int ws = rs;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      const int cur = kk & 1, nxt = cur ^ 1;
      if (kk == KSTEPS - 1) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (!LATE_COPY) copies(ws);
        rs = rs + 1 == STAGES ? 0 : rs + 1;
        as = As + rs * A_STAGE + a_off;
        bs = Bs + rs * B_STAGE + b_off;
      }
      const int kn = kk == KSTEPS - 1 ? 0 : kk + 1;
      if (A_FIRST) load_a(as, kn, nxt);
      load_b(bs, kn, nxt);
      if (!A_FIRST) load_a(as, kn, nxt);
      outer_fma<SERPENTINE>(acc, af[cur], bf[cur]);
      if (LATE_COPY && kk == KSTEPS - 1) copies(ws);
    }
  };

  // One part: slabs [kb, ke) of tile pid (part_of(ctaid) gives {pid, kb, ke}: called with the
  // block index, and again with a fresh read of it after the fast loop), stored into c, or added
  // (reduction) when the part is not the tile's whole k range (SK only).
  auto tile_part = [&](auto part_of) {
#pragma unroll
    for (int i = 0; i < 4 * RM; ++i)
#pragma unroll
      for (int j = 0; j < 4 * RN; ++j) acc[i][j] = T(0);
    rs = 0;
    int t = 0;  // slabs done, counted from kb
    {
      const SkPart pt = part_of(blockIdx.x);
      const Place w = place(threadIdx.x, pt.pid);
      // Prologue: slabs kb .. kb+STAGES-2 in flight; once slab kb has landed, slab kb+STAGES-1
      // goes into the last buffer. Before the last step of slab t, the groups up to slab
      // t + STAGES - 1 are committed, so wait_group<STAGES - 2> means "slab t + 1 landed".
#pragma unroll
      for (int s = 0; s < STAGES - 1; ++s) load_slab(w, pt.kb + s, s, pt.ke);
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      load_slab(w, pt.kb + STAGES - 1, STAGES - 1, pt.ke);
      load_a(As + w.a_off, 0, 0);
      load_b(Bs + w.b_off, 0, 0);

      // The fast loop runs t < t_fast: the slab it copies (kb + t + STAGES) is whole in k and
      // before ke, and the tile has no edge and 16-byte copies wherever it copies 16 bytes.
      // fa / fb: this thread's first piece of slab kb + t + STAGES.
      const bool interior = w.a_full && w.b_full && (A_KMAJOR || p.a_vec) && (B_KMAJOR || p.b_vec);
      const int t_fast = interior ? max((SK ? min(pt.ke, p.k / BK) : p.k / BK) - pt.kb - STAGES, 0) : 0;
      const T* fa = w.la.g + (pt.kb + STAGES) * w.la.slab_step();
      const T* fb = w.lb.g + (pt.kb + STAGES) * w.lb.slab_step();
      for (; t < t_fast; ++t) {
        slab_step(w.a_off, w.b_off, [&](int ws) {
          w.la.load_full(As + ws * A_STAGE, w.m0, fa);
          w.lb.load_full(Bs + ws * B_STAGE, w.n0, fb);
          cp_async_commit();
        });
      }
    }
    const SkPart pt = part_of(fresh_ctaid());
    const Place w = place(fresh_tid(), pt.pid);
    for (; t < pt.ke - pt.kb; ++t)
      slab_step(w.a_off, w.b_off, [&](int ws) { load_slab(w, pt.kb + t + STAGES, ws, pt.ke); });
    cp_async_wait<0>();
    if constexpr (KG > 1)
      if (!k_groups_sum<KG, GROUP_THREADS>(acc, As, fresh_tid())) return;

    // A part after a split tile's first is added to what is there (sk_wait / sk_signal in
    // gemm_common.cuh).
    const bool sk_add = SK && pt.kb != 0;
    if (sk_add) sk_wait(p.sk_flags + fresh_ctaid() - 1);
    store_acc<T, RM, RN, LN, SK || ACC>(
        p, acc, [&](int i) { return w.row0 + (i / 4) * 4 * LM + i % 4; }, w.col0, ACC || sk_add);
    if (SK && pt.ke != k_tiles) sk_signal(p.sk_flags + fresh_ctaid());
  };

  if constexpr (SK) {
    // Parts last to first: the head of the last tile (stored, then signalled) before anything
    // else, the tail of the first tile (which waits for the part before it) at the end.
    for (int q = sk_parts(p, blockIdx.x, k_tiles) - 1; q >= 0; --q) {
      auto part_of = [&](int ctaid) { return sk_part(p, ctaid, q, k_tiles); };
      tile_part(part_of);
      if (q > 0) __syncthreads();  // every warp is done reading this part's shared memory
    }
  } else {
    tile_part([&](int ctaid) { return SkPart{ctaid, 0, k_tiles}; });
  }
}

}  // namespace
}  // namespace portmat::cuda
