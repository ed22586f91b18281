// float32_tc on the Hopper tensor cores (sm_90a) with float32's accuracy: the three TF32 products
// of the hi/lo split (lo*hi + hi*lo + hi*hi) summed by wgmma over a few 32-k chunks into a
// temporary accumulator set, which each consumer thread then adds into its main set with
// round-to-nearest float32 adds ("promotion" in registers, the idea of CUTLASS's FP8 GEMMs). What
// and why:
//  - The tensor cores' own float32 accumulation is not round-to-nearest (it truncates): one chain
//    over the whole 3x deep k gave 11x cuBLAS float32's max error on the H200. The first fix (the
//    128 x 256 kernel of gemm_wgmma.cuh, PORTMAT_CUDA_F32TC_KERNEL=global) added the sums into c
//    in global memory every 8 chunks: accurate, but each read-modify-write of c cost ~34 us and
//    the kernel fell to 0.97x cuBLAS float32. Here the chain is cut in registers: wgmma writes the
//    interval's first chunk with scale-d = 0 (D = A B: the temporaries start from zero), sums
//    an interval of chunks (12 wgmma k8 steps each; kWgF32tcPromoteChunks = 1 by default) onto it, and after wgmma.wait_group the thread
//    adds the BN / 2 temporaries into its main set (plain FADD.RN; the main set never goes through
//    the tensor cores). Cost per promotion: BN / 2 FADDs per thread plus a drain of the warpgroup's
//    wgmma queue; the two consumer warpgroups promote half an interval apart, so one's drain and
//    FADDs overlap the other's wgmma (docs/cuda.md has the cost model).
//  - Two sets of a 64 x BN warpgroup tile need BN registers: the 128 x 256 tile cannot (256), so
//    the block tile is 128 x BN with BN = 128 (64 + 64 accumulators) or 192 (96 + 96), a template
//    parameter: both are compiled (gemm_wgmma_f32tc_n128, _n192) and the host picks one.
//  - Operands: the pre-pass (wg_prep_body, kind 5) writes each operand's split as [lo, hi] per 32-k
//    chunk (k 2x as deep), both a and b in the same layout; one chunk is two ring slabs (lo, then
//    hi: 128 bytes of k each, the 128-byte swizzle row) and the consumers issue per chunk
//    a_lo b_hi, a_hi b_lo, a_hi b_hi (4 k8 steps each, small products first). Against the 128 x 256
//    kernel's [lo, hi, hi] x [hi, lo, hi] (3 slabs a chunk, one product per slab) this loads 2/3
//    of the bytes through L2 and TMA and writes 2/3 of the pre-pass's bytes, for the same wgmma:
//    the narrower tile reads more per multiply-add (A and B per 64 x BN x 8 step: (64 + BN) / BN
//    against 320 / 256), so the traffic that can be cut, is.
//  - Everything else as gemm_wgmma_body: one producer warpgroup (one thread issues the TMA loads
//    of each slab into a ring of `stages` slabs, arming its `full` mbarrier with expect_tx), two
//    consumer warpgroups (rows 0-63 and 64-127, setmaxnreg), releasing a chunk's two slabs
//    through their `empty` mbarriers when its wgmma have read them (one arrival per consumer
//    warp), persistent grid over the swizzled tiles, bounded mbarrier waits (wg_bar_wait), the
//    epilogue straight from the main set (c (+)= for the k-split pieces).
// Compiled only for sm_90a (a trapping stub elsewhere; the host never launches it there).
// STATUS: passes the CudaPrecision tests on the H200 (2026-12-02); 2.3-2.4x cuBLAS float32 with a
// fifth of its max error or less there (docs/cuda.md).
#pragma once

#include "gemm_wgmma.cuh"

namespace portmat::cuda {

// ---- tunables ----------------------------------------------------------------------------------
// The block tiles and rings are kWgF32tc128 / kWgF32tc192 in gemm_tiles.h (the host sizes the
// grid, the TMA boxes and the shared memory from them too): 128 x 128 with 7 slabs of 32 KiB,
// 128 x 192 with 5 slabs of 40 KiB (227 KiB of shared memory a block at most). Which of the two
// runs by default: kWgF32tcDefaultBn there (PORTMAT_CUDA_F32TC_KERNEL=regs128 | regs192 picks).
// The consumers' registers (setmaxnreg), as gemm_wgmma_body: 232 (the temporaries, the main set
// and the rest: ptxas allocated up to 148 at BN = 128, 212 at BN = 192, no spills), the producer
// 40. (240 / 24 would also fit the 65536 if a wider tile ever needed it.)
template <int BN>
struct WgF32tcRegs {
  static constexpr int consumer = 232, producer = 40;
};
// The promotion interval (chunks of 32 k per promotion) is a launch argument (WgArgs::promote_slabs):
// its default and why are kWgF32tcPromoteChunks in gemm_tiles.h (PORTMAT_CUDA_TC_PROMOTE sets it).

namespace {

#ifdef PM_WGMMA_ENABLED
// The accumulator registers of one m64n128 / m64n192 wgmma: d[4 j + 2 h + e] is row 16 w + g + 8 h,
// column 8 j + 2 t + e of the warpgroup's tile (warp w of the warpgroup, lane 4 g + t), as m64n256.
#define PM_WG_D64_TEXT \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PM_WG_D64_OPERANDS(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define PM_WG_D96_TEXT \
  PM_WG_D64_TEXT ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define PM_WG_D96_OPERANDS(d) \
  PM_WG_D64_OPERANDS(d), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])

// D = A B^T + (accumulate ? D : 0), A (64 x 8 tf32) and B (BN x 8 tf32) k-major in shared memory
// (descriptors); accumulate is wgmma's scale-d predicate, a run-time value.
__device__ __forceinline__ void wgmma_tf32_n128(float (&d)[64], unsigned long long da, unsigned long long db,
                                                int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" PM_WG_D64_TEXT "}, %64, %65, p, 1, 1;\n}\n"
      : PM_WG_D64_OPERANDS(d)
      : "l"(da), "l"(db), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_tf32_n192(float (&d)[96], unsigned long long da, unsigned long long db,
                                                int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32 {" PM_WG_D96_TEXT "}, %96, %97, p, 1, 1;\n}\n"
      : PM_WG_D96_OPERANDS(d)
      : "l"(da), "l"(db), "r"(accumulate));
}
template <int NACC>
__device__ __forceinline__ void wgmma_tf32_n(float (&d)[NACC], unsigned long long da, unsigned long long db,
                                             int accumulate) {
  if constexpr (NACC == 64)
    wgmma_tf32_n128(d, da, db, accumulate);
  else
    wgmma_tf32_n192(d, da, db, accumulate);
}
// The accumulators as asm operands that the compiler must assume read and written here: keeps
// the reads of the temporaries (the promotion's FADDs) after wgmma.wait_group.
__device__ __forceinline__ void wg_fence_operands64(float (&d)[64]) { asm volatile("" : PM_WG_D64_OPERANDS(d)::"memory"); }
__device__ __forceinline__ void wg_fence_operands96(float (&d)[96]) { asm volatile("" : PM_WG_D96_OPERANDS(d)::"memory"); }
template <int NACC>
__device__ __forceinline__ void wg_fence_operands_n(float (&d)[NACC]) {
  if constexpr (NACC == 64)
    wg_fence_operands64(d);
  else
    wg_fence_operands96(d);
}
#endif  // PM_WGMMA_ENABLED

// c (+)= a' b'^T in float32_tc for the pre-pass's [lo, hi] copies (WgArgs: ta, tb over the 2x deep
// k; k_slabs = 2 x the 32-k chunks; promote_slabs = chunks per promotion, 0: one chain over the
// whole k, the tensor cores' accumulation only, for measuring what promotion buys).
template <int BN>
__device__ __forceinline__ void gemm_wgmma_f32tc_body(const WgArgs& p) {
#ifdef PM_WGMMA_ENABLED
  constexpr WgTile T = BN == 128 ? kWgF32tc128 : kWgF32tc192;
  constexpr int BM = T.bm, STAGES = T.stages;
  constexpr int A_STAGE = T.a_stage_bytes(), B_STAGE = T.b_stage_bytes();
  constexpr int NACC = BN / 2;  // accumulators a set: 64 x BN floats over 128 threads
  constexpr int CONSUMER_REGS = WgF32tcRegs<BN>::consumer, PRODUCER_REGS = WgF32tcRegs<BN>::producer;
  static_assert(BN == 128 || BN == 192, "m64n128 or m64n192 per consumer warpgroup");
  static_assert(T.bn == BN && BM == 128, "two consumer warpgroups of 64 rows");
  static_assert(T.slab_bytes == 128, "one 128-byte swizzle row of k per slab (32 TF32)");
  static_assert(A_STAGE % 1024 == 0 && B_STAGE % 1024 == 0, "slabs stay 1024-byte aligned");
  static_assert(STAGES >= 4, "a chunk in the tensor cores, the one before it not yet released");
  static_assert(T.smem_bytes() + 1024 <= 232448, "227 KiB of shared memory a block (the mbarriers: 1 KiB)");
  static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 256 <= 65536 && PRODUCER_REGS >= 24, "register budget");

  extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
  __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
  const unsigned base = (smem_addr(wg_smem_raw) + 1023u) & ~1023u;  // the host adds 1024 bytes for this
  const unsigned a_s0 = base, b_s0 = base + STAGES * A_STAGE;
  // wg from lane 0 of the warp: the compiler then knows it is uniform, and so the promotion's
  // branch (which depends on it) is not "divergent" (ptxas serialises wgmma around a wait_group it
  // sees in a divergent path).
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) wg_bar_init(smem_addr(&full[s]), 1), wg_bar_init(smem_addr(&empty[s]), 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN, tiles = tiles_m * tiles_n;
  const int width = p.group_m * tiles_n;
  auto origin = [&](int tile, int& m0, int& n0) {
    const int first_m = (tile / width) * p.group_m, group_rows = min(tiles_m - first_m, p.group_m);
    m0 = (first_m + (tile % width) % group_rows) * BM, n0 = ((tile % width) / group_rows) * BN;
  };
  const int chunks = p.k_slabs / 2;  // >= 1 (the host pads k = 0 to one chunk of zeros)

  if (wg == 2) {  // ---- producer: slab it of the ring is part it % 2 (0: lo, 1: hi) of a chunk ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
    if (tid == 256) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&p.ta)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&p.tb)) : "memory");
      int it = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int m0, n0;
        origin(tile, m0, n0);
        for (int x = 0; x < 2 * chunks; ++x, ++it) {  // x: the slab's index along the copies' k (32 floats)
          const int s = it % STAGES;
          wg_bar_wait(smem_addr(&empty[s]), ((it / STAGES) & 1) ^ 1);  // a fresh barrier's "previous" phase is complete
          const unsigned bar = smem_addr(&full[s]);
          wg_bar_expect(bar, A_STAGE + B_STAGE);  // whole boxes, zero-filled parts included
          wg_tma_load(a_s0 + s * A_STAGE, &p.ta, 32 * x, m0, bar);
          wg_tma_load(b_s0 + s * B_STAGE, &p.tb, 32 * x, n0, bar);
        }
      }
    }
    return;
  }

  // ---- consumers: warpgroup wg owns rows wg * 64 .. + 63 of each tile ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
  const int lane = tid % 32, w = (tid % 128) / 32, g = lane / 4, t = lane % 4;
  float* c = static_cast<float*>(p.c);
  const bool add = p.accumulate != 0;
  float acc[NACC];  // the main set: round-to-nearest sums of the promoted temporaries
  float tmp[NACC];  // the tensor cores' set: one promotion interval's sum
#pragma unroll
  for (int i = 0; i < NACC; ++i) tmp[i] = 0.f;  // never read (scale-d = 0 first), but defined
  // The promotion interval in chunks, and this warpgroup's phase in it: warpgroup 1 promotes half
  // an interval after warpgroup 0 (its first interval of each tile is shorter), so the tensor cores
  // have the other warpgroup's wgmma while one drains its queue and adds.
  const int interval = p.promote_slabs > 0 ? p.promote_slabs : 0x40000000;
  const int first_interval = interval - (p.promote_slabs > 1 ? wg * (interval / 2) : 0);
  // c = the sums (c += with accumulate): acc[4 j + 2 h + e] is c(row0 + 8 h, col0 + 8 j + e).
  auto store = [&](int m0, int n0) {
    const int row0 = m0 + wg * 64 + w * 16 + g, col0 = n0 + 2 * t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row >= p.m) continue;
      float* crow = c + static_cast<long long>(row) * p.ldc;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int col = col0 + 8 * j;
        float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        if (p.c_vec && col + 1 < p.n) {  // c_vec: c and ldc 8-byte aligned; col is even
          float2* dst = reinterpret_cast<float2*>(crow + col);
          if (add) {
            const float2 old = *dst;
            v0 += old.x, v1 += old.y;
          }
          *dst = make_float2(v0, v1);
        } else {
          if (col < p.n) crow[col] = add ? crow[col] + v0 : v0;
          if (col + 1 < p.n) crow[col + 1] = add ? crow[col + 1] + v1 : v1;
        }
      }
    }
  };
  // Both slabs of the chunk whose first slab is ring slab `it` back to the producer (lane 0 of
  // each consumer warp: the barriers count 8).
  auto release = [&](int it) {
    if (lane == 0) {
      wg_bar_arrive(smem_addr(&empty[it % STAGES]));
      wg_bar_arrive(smem_addr(&empty[(it + 1) % STAGES]));
    }
  };
  // Chunk `it` (its lo slab's ring index; the hi slab follows) into the temporaries, once both
  // slabs have landed: a_lo b_hi, a_hi b_lo, a_hi b_hi, 4 k8 steps each; the first wgmma starts
  // from zero when `fresh` (the interval's first chunk). One commit group a chunk.
  auto issue = [&](int it, int fresh) {
    wg_bar_wait(smem_addr(&full[it % STAGES]), (it / STAGES) & 1);
    wg_bar_wait(smem_addr(&full[(it + 1) % STAGES]), ((it + 1) / STAGES) & 1);
    const unsigned a_lo = a_s0 + (it % STAGES) * A_STAGE + wg * 64 * T.slab_bytes;
    const unsigned a_hi = a_s0 + ((it + 1) % STAGES) * A_STAGE + wg * 64 * T.slab_bytes;
    const unsigned b_lo = b_s0 + (it % STAGES) * B_STAGE, b_hi = b_s0 + ((it + 1) % STAGES) * B_STAGE;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_tf32_n<NACC>(tmp, wg_desc(a_lo + 32 * kk), wg_desc(b_hi + 32 * kk), kk > 0 || !fresh);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_tf32_n<NACC>(tmp, wg_desc(a_hi + 32 * kk), wg_desc(b_lo + 32 * kk), 1);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_tf32_n<NACC>(tmp, wg_desc(a_hi + 32 * kk), wg_desc(b_hi + 32 * kk), 1);
    wg_commit();
  };
  // Promotion after chunk `it`: every wgmma of the interval done, its slabs (and those of the
  // chunk before, `held`, if not yet released) back to the producer, the temporaries added into
  // the main set rounded to nearest.
  auto promote = [&](int it, int held) {
    wg_wait_groups<0>();
    wg_fence_operands_n<NACC>(tmp);
    if (held >= 0) release(held);
    release(it);
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] += tmp[i];
  };
  int it = 0;  // ring slab of the chunk's lo part, counted over the tiles as the producer does
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int m0, n0;
    origin(tile, m0, n0);
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
    int left = first_interval;  // chunks to go in this interval
    int fresh = 1;              // the next chunk starts the interval: scale-d = 0
    int held = -1;              // the chunk before, whose slabs are still held (its wgmma maybe in flight)
    // Every chunk but the last (which always promotes, outside the loop: so every path to the
    // epilogue passes a wait_group 0 in the compiler's eyes too).
    for (int q = 0; q + 1 < chunks; ++q, it += 2) {
      issue(it, fresh);
      if (--left == 0) {
        promote(it, held);
        held = -1, fresh = 1, left = interval;
      } else {
        wg_wait_groups<1>();  // the chunk before's wgmma are done reading its slabs: hand them back
        if (held >= 0) release(held);
        held = it, fresh = 0;
      }
    }
    issue(it, fresh);
    promote(it, held);
    it += 2;
    store(m0, n0);
  }
#else
  __trap();  // sm_90a only: the host never launches it elsewhere
#endif
}

}  // namespace
}  // namespace portmat::cuda
