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
#include "gemm_body_fp.cuh"

namespace portmat::cuda {
namespace {

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
