// The warp-specialized body (gemm_body_ws), sm_90a only: _fp's tile and k loop in computing warps
// that never copy, fed by a warpgroup that only copies, through a ring of stages guarded by
// mbarriers; setmaxnreg moves registers from the copying warps to the computing ones. It exists
// because _fp's computing warps wait on their own copies (gemm_tiles.h has the profile and the
// measurements). Its kernels: _ws (data-parallel) and, with SK, _wsk on the stream-K grid of _sk
// (stream-K helpers in gemm_common.cuh): the default pair on sm_90. Compiled for other targets,
// the body is a trap; the host never launches it there.
#pragma once

#include "gemm_common.cuh"

namespace portmat::cuda {
namespace {

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
