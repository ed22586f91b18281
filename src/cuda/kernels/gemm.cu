// The CUDA gemm kernels: c = a @ b in exact float32 (FFMA, never TF32) and float64 (DFMA), for
// any M, N, K and both operand layouts. Compiled ahead of time by nvcc into one fatbin (sm_80 and
// sm_90a machine code, compute_90 PTX) that the backend embeds and loads with cuModuleLoadData.
// The warp-specialized kernels at the end (copying warps apart, mbarriers, setmaxnreg) exist as
// sm_90a code only; the others are the same everywhere.
//
// Contract of every kernel here (gemm_tiles.h has the argument block and the tile table):
//  - one block computes a bm x bn tile of c; blocks are numbered on a 1-D grid of
//    ceil(M/bm) * ceil(N/bn) and swizzled in groups of `group_m` tile rows, so that blocks running
//    together share operand panels in L2;
//  - k advances bk at a time through a `stages`-deep ring of shared-memory buffers filled by
//    cp.async (Ampere's asynchronous global->shared copy, also fast on Hopper): the copies for
//    step t + stages - 1 are in flight while step t computes; one barrier per step;
//  - shared memory holds both operands with their M (resp. N) index contiguous: As[k][m], Bs[k][n].
//    An operand whose global layout is already m-contiguous (column-major a, row-major b) is copied
//    16 bytes at a time; a k-contiguous one (row-major a, column-major b) is transposed on the way,
//    one element per copy, in an order that puts a warp's 32 stores in 32 distinct banks (rows
//    padded by kPad elements);
//  - each thread accumulates a (4 rm) x (4 rn) register tile, read from shared memory as 4-element
//    vectors (LDS.128): the lanes of a warp read at most 8 distinct 16-byte words of a row, so the
//    loads are free of bank conflicts;
//  - edges: out-of-range rows, columns and k are zero-filled by the copy (cp.async src-size) and
//    not stored, so no size needs to be a multiple of any tile.
#include "gemm_common.cuh"
#include "gemm_body.cuh"
#include "gemm_body_db.cuh"

namespace portmat::cuda {
namespace {

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
// above) runs the same k loops once per part, over that part's slabs only. ACC: c += a @ b, the
// results added to c (red.global.add, one add per element and launch; the NumPy path sums a k-split
// product's pieces this way, each launch after the one before on one stream: deterministic).
template <class T, const GemmTile& C, bool A_KMAJOR, bool B_KMAJOR, int SCHED, bool SK = false,
          bool ACC = false>
__device__ __forceinline__ void gemm_body_fp(const GemmArgs& p) {
  constexpr int BM = C.bm, BN = C.bn, BK = C.bk, STAGES = C.stages, RM = C.rm, RN = C.rn;
  constexpr int LM = C.lanes_m(), LN = C.lanes_n(), THREADS = C.threads();
  constexpr int WARPS_M = BM / C.wm;
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
  // dispatch stalls (bench/results/2026-11-29_h200_ncu_stalls.txt): H200, 128x256 rr, serpentine
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
    int row0, col0;     // this thread's first row and column of c
    bool a_full, b_full;
    ALoader la;
    BLoader lb;
  };
  auto place = [&](int tid, int pid) {
    const int lane = tid % 32, warp = tid / 32;
    const TileOrigin tile = swizzled_tile<BM, BN>(p, pid);
    const int m0 = tile.m0, n0 = tile.n0;
    const int wm0 = (warp % WARPS_M) * C.wm, wn0 = (warp / WARPS_M) * C.wn;
    const int lm = lane / LN, ln = lane % LN;
    return Place{m0, n0, wm0 + lm * 4, wn0 + ln * 4, m0 + wm0 + lm * 4, n0 + wn0 + ln * 4,
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
  // One slab t: BK k steps, with the fragments of step kk + 1 loaded during step kk (across the
  // slab boundary too); before the last step, the barrier and then `copies(ws)` (slab t + STAGES
  // into the buffer ws that slab t leaves).
  auto slab_step = [&](int a_off, int b_off, auto copies) {
    const T* as = As + rs * A_STAGE + a_off;
    const T* bs = Bs + rs * B_STAGE + b_off;
    const int ws = rs;
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      const int cur = kk & 1, nxt = cur ^ 1;
      if (kk == BK - 1) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (!LATE_COPY) copies(ws);
        rs = rs + 1 == STAGES ? 0 : rs + 1;
        as = As + rs * A_STAGE + a_off;
        bs = Bs + rs * B_STAGE + b_off;
      }
      const int kn = kk == BK - 1 ? 0 : kk + 1;
      if (A_FIRST) load_a(as, kn, nxt);
      load_b(bs, kn, nxt);
      if (!A_FIRST) load_a(as, kn, nxt);
      outer_fma<SERPENTINE>(acc, af[cur], bf[cur]);
      if (LATE_COPY && kk == BK - 1) copies(ws);
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

    // A part after a split tile's first is added to what is there (sk_wait / sk_signal above).
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

// ---- warp-specialized (sm_90a) -----------------------------------------------------------------
// The helpers exist only where gemm_body_ws has its body (sm_90a device code): elsewhere nvcc
// warns of unused functions.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// mbarrier helpers (shared-memory barriers with a phase bit): init, arrive, the asynchronous
// arrive of a thread's earlier cp.async copies, and a wait for a phase's completion by parity.
__device__ __forceinline__ void mbar_init(unsigned long long* bar, int count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_copies(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, int parity) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}
// The computing warps' own barrier (named barrier 1; the copying warps never join it).
__device__ __forceinline__ void compute_sync(int threads) {
  asm volatile("bar.sync 1, %0;\n" ::"r"(threads) : "memory");
}
#endif

// _fp's tile and k loop without copies in the computing warps (warps 0 .. 7); the last warpgroup
// (4 warps) only copies: slab t into stage t % STAGES once the computing warps have released it
// (empty[s], one arrival per computing thread), then announces it through full[s] (one
// asynchronous arrival per copying thread, when its copies have landed). The computing warps
// wait for full[s] before the last k step of the slab before (so the next slab's first fragments
// load across the boundary, as in _fp) and release stage s once its last fragments are loaded.
// No __syncthreads after the start. SK: both roles walk the block's stream-K parts (sk_part, last
// to first, as gemm_body_fp) through the same ring; the hand-over of split tiles (sk_flags) syncs
// the computing warps only (named barrier 1), the copying ones having gone.
template <class T, const GemmTile& C, bool A_KMAJOR, bool B_KMAJOR, int SCHED, bool SK = false>
__device__ __forceinline__ void gemm_body_ws(const GemmArgs& p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BM = C.bm, BN = C.bn, BK = C.bk, STAGES = C.stages, RM = C.rm, RN = C.rn;
  constexpr int LM = C.lanes_m(), LN = C.lanes_n();
  constexpr int COMPUTE = C.compute_threads(), COPY = C.producer_warps * 32;
  constexpr int WARPS_M = BM / C.wm;
  constexpr int SA = BM + GemmTile::kPad, SB = BN + GemmTile::kPad;
  constexpr int A_STAGE = BK * SA, B_STAGE = BK * SB;
  constexpr bool A_FIRST = SCHED & 2, SERPENTINE = SCHED & 4;
  static_assert(COPY == 128 && COMPUTE % 128 == 0, "setmaxnreg works on whole warpgroups");
  // Registers per thread after setmaxnreg (multiples of 8; the block's 168 x 384 in all): the
  // computing warps of _ws use 194, of _wsk more (its part state).
  constexpr int COPY_REGS = SK ? 56 : 72, COMPUTE_REGS = SK ? 224 : 208;
  static_assert(COPY * COPY_REGS + COMPUTE * COMPUTE_REGS <= 168 * (COPY + COMPUTE), "register budget");
  static_assert(C.a_stage() == A_STAGE, "the host's shared-memory size assumes As[k][m]");
  using ALoader = SlabLoader<T, BM, BK, SA, COPY, A_KMAJOR>;
  using BLoader = SlabLoader<T, BN, BK, SB, COPY, B_KMAJOR>;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* As = reinterpret_cast<T*>(smem_raw);  // [STAGES][BK][SA]
  T* Bs = As + STAGES * A_STAGE;           // [STAGES][BK][SB]
  __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
  const int k_tiles = (p.k + BK - 1) / BK;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(&full[s], COPY), mbar_init(&empty[s], COMPUTE);
  }
  __syncthreads();
  const int n_parts = SK ? sk_parts(p, blockIdx.x, k_tiles) : 1;
  auto part = [&](int q) { return SK ? sk_part(p, blockIdx.x, q, k_tiles) : SkPart{int(blockIdx.x), 0, k_tiles}; };

  if (threadIdx.x >= COMPUTE) {  // the copying warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(COPY_REGS) : "memory");
    const int ctid = threadIdx.x - COMPUTE;
    int s = 0, round = 0;
    // Slab t goes into stage s once the computing warps have released its previous fill; then
    // full[s] completes when every copying thread's copies have landed.
    auto slab = [&](auto copies) {
      if (round > 0) mbar_wait(&empty[s], (round - 1) & 1);
      copies();
      mbar_arrive_copies(&full[s]);
      if (++s == STAGES) s = 0, ++round;
    };
    for (int q = n_parts - 1; q >= 0; --q) {
      const SkPart pt = part(q);
      const TileOrigin tile = swizzled_tile<BM, BN>(p, pt.pid);
      const int m0 = tile.m0, n0 = tile.n0;
      const ALoader la(static_cast<const T*>(p.a), p.lda, p.m, p.k, p.a_vec, m0, ctid);
      const BLoader lb(static_cast<const T*>(p.b), p.ldb, p.n, p.k, p.b_vec, n0, ctid);
      const bool a_full = m0 + BM <= p.m, b_full = n0 + BN <= p.n;
      const bool interior = a_full && b_full && (A_KMAJOR || p.a_vec) && (B_KMAJOR || p.b_vec);
      const int t_fast = interior ? min(pt.ke, p.k / BK) : pt.kb;  // slabs whole in k: unchecked
      const T* fa = la.g + pt.kb * la.slab_step();
      const T* fb = lb.g + pt.kb * lb.slab_step();
      int t = pt.kb;
      for (; t < t_fast; ++t)  // unchecked copies (running pointers), then the checked ones
        slab([&] {
          la.load_full(As + s * A_STAGE, m0, fa);
          lb.load_full(Bs + s * B_STAGE, n0, fb);
        });
      for (; t < pt.ke; ++t)
        slab([&] {
          const bool k_full = (t + 1) * BK <= p.k;
          la.load(As + s * A_STAGE, m0, t * BK, a_full && k_full);
          lb.load(Bs + s * B_STAGE, n0, t * BK, b_full && k_full);
        });
    }
    cp_async_wait<0>();
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(COMPUTE_REGS) : "memory");
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm0 = (warp % WARPS_M) * C.wm, wn0 = (warp / WARPS_M) * C.wn;
  const int lm = lane / LN, ln = lane % LN;
  const int a_off = wm0 + lm * 4, b_off = wn0 + ln * 4;

  T acc[4 * RM][4 * RN];
  T af[2][4 * RM], bf[2][4 * RN];
  auto load_a = [&](const T* as, int kk, int buf) { lds_fragment<RM, LM>(as + kk * SA, af[buf]); };
  auto load_b = [&](const T* bs, int kk, int buf) { lds_fragment<RN, LN>(bs + kk * SB, bf[buf]); };

  int rs = 0, phase = 0;  // the stage being read and the parity of its current fill
  for (int q = n_parts - 1; q >= 0; --q) {
    const SkPart pt = part(q);
    const int slabs = pt.ke - pt.kb;
#pragma unroll
    for (int i = 0; i < 4 * RM; ++i)
#pragma unroll
      for (int j = 0; j < 4 * RN; ++j) acc[i][j] = T(0);
    if (slabs > 0) {  // (k = 0: nothing is copied, c = 0)
      mbar_wait(&full[rs], phase);
      load_a(As + rs * A_STAGE + a_off, 0, 0);
      load_b(Bs + rs * B_STAGE + b_off, 0, 0);
    }
    for (int t = 0; t < slabs; ++t) {
      const T* as = As + rs * A_STAGE + a_off;
      const T* bs = Bs + rs * B_STAGE + b_off;
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        const int cur = kk & 1, nxt = cur ^ 1;
        if (kk == BK - 1) {
          // This slab's last fragments are in registers (loaded during step BK - 2): release
          // it, and wait for the next one (if any) before loading its first fragments.
          mbar_arrive(&empty[rs]);
          if (++rs == STAGES) rs = 0, phase ^= 1;
          if (t + 1 < slabs) mbar_wait(&full[rs], phase);
          as = As + rs * A_STAGE + a_off;
          bs = Bs + rs * B_STAGE + b_off;
        }
        // After a part's last slab these would read a stage that the next part may be filling
        // (SK: skipped); otherwise a stage no copy fills again (unused values, no race).
        const int kn = kk == BK - 1 ? 0 : kk + 1;
        if (!SK || kk < BK - 1 || t + 1 < slabs) {
          if (A_FIRST) load_a(as, kn, nxt);
          load_b(bs, kn, nxt);
          if (!A_FIRST) load_a(as, kn, nxt);
        }
        outer_fma<SERPENTINE>(acc, af[cur], bf[cur]);
      }
    }
    // A part after a split tile's first is added to what is there (sk_wait / sk_signal).
    const bool add = SK && pt.kb != 0;
    if (add) sk_wait(p.sk_flags + blockIdx.x - 1, [] { compute_sync(COMPUTE); });
    const TileOrigin tile = swizzled_tile<BM, BN>(p, pt.pid);
    store_acc<T, RM, RN, LN, SK>(
        p, acc, [&](int i) { return tile.m0 + wm0 + lm * 4 + (i / 4) * 4 * LM + i % 4; },
        tile.n0 + b_off, add);
    if (SK && pt.ke != k_tiles) sk_signal(p.sk_flags + blockIdx.x, [] { compute_sync(COMPUTE); });
  }
#else
  __trap();  // the host runs _ws tiles only on sm_90 (compiled here for sm_90a)
#endif
}

}  // namespace
}  // namespace portmat::cuda

using portmat::cuda::GemmArgs;
using portmat::cuda::gemm_body;
using portmat::cuda::gemm_body_db;
using portmat::cuda::gemm_body_fp;
using portmat::cuda::gemm_body_ws;
namespace tiles = portmat::cuda;

// The kernels, by element type, tile and layout of a and b ('r' row-major, 'c' column-major).
// Spelled out so each name can be grepped; the host builds the same names from GemmTile::name.
#define PM_BOUNDS(tile) __launch_bounds__(tiles::tile.threads(), tiles::tile.min_blocks)
extern "C" {

__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_rr(GemmArgs p) { gemm_body<float, tiles::kF32_128x256, true, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_rc(GemmArgs p) { gemm_body<float, tiles::kF32_128x256, true, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_cr(GemmArgs p) { gemm_body<float, tiles::kF32_128x256, false, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_cc(GemmArgs p) { gemm_body<float, tiles::kF32_128x256, false, true>(p); }

__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_rr(GemmArgs p) { gemm_body<float, tiles::kF32_64x64, true, false>(p); }
__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_rc(GemmArgs p) { gemm_body<float, tiles::kF32_64x64, true, true>(p); }
__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_cr(GemmArgs p) { gemm_body<float, tiles::kF32_64x64, false, false>(p); }
__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_cc(GemmArgs p) { gemm_body<float, tiles::kF32_64x64, false, true>(p); }

__global__ void PM_BOUNDS(kF32_128x256_db) gemm_sm80_f32_128x256_db_rr(GemmArgs p) { gemm_body_db<float, tiles::kF32_128x256_db, true, false, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256_db) gemm_sm80_f32_128x256_db_rc(GemmArgs p) { gemm_body_db<float, tiles::kF32_128x256_db, true, true, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256_db) gemm_sm80_f32_128x256_db_cr(GemmArgs p) { gemm_body_db<float, tiles::kF32_128x256_db, false, false, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256_db) gemm_sm80_f32_128x256_db_cc(GemmArgs p) { gemm_body_db<float, tiles::kF32_128x256_db, false, true, false>(p); }

__global__ void PM_BOUNDS(kF32_128x256_ak) gemm_sm80_f32_128x256_ak_rr(GemmArgs p) { gemm_body_db<float, tiles::kF32_128x256_ak, true, false, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ak) gemm_sm80_f32_128x256_ak_rc(GemmArgs p) { gemm_body_db<float, tiles::kF32_128x256_ak, true, true, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ak) gemm_sm80_f32_128x256_ak_cr(GemmArgs p) { gemm_body_db<float, tiles::kF32_128x256_ak, false, false, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ak) gemm_sm80_f32_128x256_ak_cc(GemmArgs p) { gemm_body_db<float, tiles::kF32_128x256_ak, false, true, true>(p); }

__global__ void PM_BOUNDS(kF32_128x256_fp) gemm_sm80_f32_128x256_fp_rr(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_fp, true, false, 5>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fp) gemm_sm80_f32_128x256_fp_rc(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_fp, true, true, 7>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fp) gemm_sm80_f32_128x256_fp_cr(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_fp, false, false, 7>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fp) gemm_sm80_f32_128x256_fp_cc(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_fp, false, true, 4>(p); }

__global__ void PM_BOUNDS(kF32_128x256_fpa) gemm_sm80_f32_128x256_fpa_rr(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_fpa, true, false, 5, false, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fpa) gemm_sm80_f32_128x256_fpa_rc(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_fpa, true, true, 7, false, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fpa) gemm_sm80_f32_128x256_fpa_cr(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_fpa, false, false, 7, false, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_fpa) gemm_sm80_f32_128x256_fpa_cc(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_fpa, false, true, 4, false, true>(p); }

__global__ void PM_BOUNDS(kF32_128x256_sk) gemm_sm80_f32_128x256_sk_rr(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_sk, true, false, 5, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_sk) gemm_sm80_f32_128x256_sk_rc(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_sk, true, true, 5, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_sk) gemm_sm80_f32_128x256_sk_cr(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_sk, false, false, 7, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_sk) gemm_sm80_f32_128x256_sk_cc(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x256_sk, false, true, 5, true>(p); }

__global__ void PM_BOUNDS(kF32_128x256_ws) gemm_sm80_f32_128x256_ws_rr(GemmArgs p) { gemm_body_ws<float, tiles::kF32_128x256_ws, true, false, 5>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ws) gemm_sm80_f32_128x256_ws_rc(GemmArgs p) { gemm_body_ws<float, tiles::kF32_128x256_ws, true, true, 7>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ws) gemm_sm80_f32_128x256_ws_cr(GemmArgs p) { gemm_body_ws<float, tiles::kF32_128x256_ws, false, false, 7>(p); }
__global__ void PM_BOUNDS(kF32_128x256_ws) gemm_sm80_f32_128x256_ws_cc(GemmArgs p) { gemm_body_ws<float, tiles::kF32_128x256_ws, false, true, 4>(p); }

__global__ void PM_BOUNDS(kF32_128x256_wsk) gemm_sm80_f32_128x256_wsk_rr(GemmArgs p) { gemm_body_ws<float, tiles::kF32_128x256_wsk, true, false, 5, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_wsk) gemm_sm80_f32_128x256_wsk_rc(GemmArgs p) { gemm_body_ws<float, tiles::kF32_128x256_wsk, true, true, 7, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_wsk) gemm_sm80_f32_128x256_wsk_cr(GemmArgs p) { gemm_body_ws<float, tiles::kF32_128x256_wsk, false, false, 7, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256_wsk) gemm_sm80_f32_128x256_wsk_cc(GemmArgs p) { gemm_body_ws<float, tiles::kF32_128x256_wsk, false, true, 4, true>(p); }

__global__ void PM_BOUNDS(kF32_128x128_fp) gemm_sm80_f32_128x128_fp_rr(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x128_fp, true, false, 2>(p); }
__global__ void PM_BOUNDS(kF32_128x128_fp) gemm_sm80_f32_128x128_fp_rc(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x128_fp, true, true, 2>(p); }
__global__ void PM_BOUNDS(kF32_128x128_fp) gemm_sm80_f32_128x128_fp_cr(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x128_fp, false, false, 3>(p); }
__global__ void PM_BOUNDS(kF32_128x128_fp) gemm_sm80_f32_128x128_fp_cc(GemmArgs p) { gemm_body_fp<float, tiles::kF32_128x128_fp, false, true, 2>(p); }

__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_rr(GemmArgs p) { gemm_body<double, tiles::kF64_64x64, true, false>(p); }
__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_rc(GemmArgs p) { gemm_body<double, tiles::kF64_64x64, true, true>(p); }
__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_cr(GemmArgs p) { gemm_body<double, tiles::kF64_64x64, false, false>(p); }
__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_cc(GemmArgs p) { gemm_body<double, tiles::kF64_64x64, false, true>(p); }
}
