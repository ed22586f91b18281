// The Hopper tensor-core kernels (sm_90a: H100 / H200) for the precision modes of issue 18
// (tf32, float32_tc, bfloat16): wgmma.mma_async fed by TMA, warp-specialised. What and why:
//  - mma.sync (gemm_tc.cuh) cannot reach cuBLAS's TF32 / bf16 speed on Hopper: the tensor cores'
//    full rate is only issued by the warpgroup-wide wgmma, which reads both operands straight
//    from shared memory in a fixed swizzled layout; TMA (cp.async.bulk.tensor) writes exactly
//    that layout, zero-fills every box that crosses the matrix's edge, and needs one thread to
//    issue, so the edges cost no code and the copies no registers.
//  - Operands: wgmma's TF32 form reads both operands k-major only, and reads raw float32 bits
//    (truncating them), while the modes must round to nearest-even exactly as the reference
//    (core/reference.cpp). So a pre-pass (wg_prep_body, O(n^2)) writes k-major copies of a and b
//    into a scratch buffer: rounded to TF32 (tf32), to bfloat16 (bfloat16), or split into TF32
//    hi and lo (float32_tc). The split is laid out as a 3x deeper k: per 32-k slab j, a's copy
//    holds [lo, hi, hi] and b's [hi, lo, hi], so that one TF32 product of the longer k sums
//    lo*hi + hi*lo + hi*hi (small products first, as gemm_tc) with no special code: the main
//    kernel is one TF32 kernel and one bf16 kernel, both "k-major times k-major", for every mode,
//    layout, alignment and size. The cost: the pre-pass's traffic (about 2 (m + n) k float32
//    reads and writes; estimated ~10-20% at n = 4096 in tf32, less at 8192) and float32_tc's
//    3 slabs of loads per 32 k where 2 would do. Both are measured, not guessed, in
//    bench/diagnostics/cuda_tc_sweep.py; docs/cuda.md has the plan past them.
//  - Block: 128 x 256 of c, three warpgroups: warpgroup 2 is the producer (one thread issues the
//    TMA loads of a slab of a (128 rows) and of b (256 rows) into a ring of kWgStages stages,
//    arming the stage's `full` mbarrier with the bytes to expect); warpgroups 0 and 1 are the
//    consumers (rows 0-63 and 64-127), each waiting on `full`, issuing 4 wgmma m64n256 per slab
//    (k8 tf32 / k16 bf16: 32 bytes of k each), keeping one slab's wgmma group in flight, and
//    releasing the slab before to the producer through its `empty` mbarrier (one arrival per
//    consumer warp). setmaxnreg gives the consumers 232 registers (128 accumulators) and the
//    producer 40.
//  - Shared memory: a slab of 128 bytes of k per row, 128-byte swizzle (TMA's
//    CU_TENSOR_MAP_SWIZZLE_128B = wgmma's layout type 1): 8 rows make one 1024-byte pattern, so
//    each stage starts 1024-byte aligned and the descriptors' stride byte offset is 1024; the k
//    steps inside the slab advance the descriptor's start address by 32 bytes.
//  - Grid: persistent, one block per SM walking the tiles (swizzled in groups of group_m tile
//    rows as the other kernels), so the producer fills the ring with the next tile's slabs while
//    the consumers store the last. Epilogue straight from the accumulators (float2 stores,
//    c (+)= ...).
//  - Waits on mbarriers are bounded (20 s): a broken invariant fails the launch with an error
//    instead of hanging the GPU.
// Compiled only for sm_90a (the other targets of the fatbin get a trapping stub; the host never
// launches it there). STATUS: passes its tests on the H200 (2026-12-02); speed in docs/cuda.md.
#pragma once

#include "gemm_common.cuh"
#include "gemm_tc.cuh"  // tf32_rne, tf32_split: the roundings the reference matches bit for bit

namespace portmat::cuda {

// ---- tunables ----------------------------------------------------------------------------------
// The block tile and ring are kWg in gemm_tiles.h (128 x 256, 4 stages of 48 KiB), there because
// the host sizes the grid, the TMA boxes and the shared memory from it too.
inline constexpr int kWgBM = kWg.bm, kWgBN = kWg.bn, kWgStages = kWg.stages, kWgSlab = kWg.slab_bytes;
inline constexpr int kWgProducerRegs = 40, kWgConsumerRegs = 232;  // setmaxnreg (multiples of 8)
// The pre-pass's block: kWgPrepThreads (gemm_tiles.h) = 256 threads, a 32 x 32 tile of an operand.
// The two main kernels (the host's names: gemm_wgmma_tf32, gemm_wgmma_bf16).
inline constexpr int WG_TF32 = 1, WG_BF16 = 2;

namespace {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PM_WGMMA_ENABLED 1
#endif

#ifdef PM_WGMMA_ENABLED
// The 128 accumulator registers of one m64n256 wgmma (a thread's share of a 64 x 256 float32 tile):
// d[4 j + 2 h + e] is row 16 w + g + 8 h, column 8 j + 2 t + e of the warpgroup's tile, for warp
// w of the warpgroup, lane = 4 g + t (PTX ISA, "wgmma register fragment layout" of D).
#define PM_WG_D_TEXT \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define PM_WG_D_OPERANDS(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// D += A B^T, A (64 x 8 tf32) and B (256 x 8 tf32) both k-major in shared memory (descriptors).
__device__ __forceinline__ void wgmma_m64n256_tf32(float (&d)[128], unsigned long long da, unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {" PM_WG_D_TEXT "}, %128, %129, p, 1, 1;\n}\n"
      : PM_WG_D_OPERANDS(d)
      : "l"(da), "l"(db));
}
// The same for bfloat16 (k16), neither operand transposed (both k-major).
__device__ __forceinline__ void wgmma_m64n256_bf16(float (&d)[128], unsigned long long da, unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" PM_WG_D_TEXT "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : PM_WG_D_OPERANDS(d)
      : "l"(da), "l"(db));
}
// Keeps the compiler from moving reads or writes of the accumulators across this point (the
// wgmma results are only there after wgmma.wait_group; the compiler does not know that).
__device__ __forceinline__ void wg_fence_operands(float (&d)[128]) {
  asm volatile("" : PM_WG_D_OPERANDS(d)::"memory");
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait_groups() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in
// bits 0-13, leading byte offset >> 4 in 16-29 (unused for a swizzled k-major operand whose k
// step fits the swizzle row: 1), stride byte offset >> 4 in 32-45 (1024: from one group of 8 rows
// to the next), base offset 0 (every stage 1024-byte aligned), layout 1 = 128-byte swizzle in 62-63.
__device__ __forceinline__ unsigned long long wg_desc(unsigned saddr) {
  return static_cast<unsigned long long>((saddr & 0x3ffffu) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) |
         (1ull << 62);
}

// mbarriers (shared addresses).
__device__ __forceinline__ void wg_bar_init(unsigned bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void wg_bar_arrive(unsigned bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// The producer's arrival that also announces `bytes` of TMA writes to come (complete_tx).
__device__ __forceinline__ void wg_bar_expect(unsigned bar, unsigned bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ bool wg_bar_try(unsigned bar, unsigned parity) {
  unsigned ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
// Waits for the phase of parity `parity` to complete; after 20 s (a broken invariant: a TMA
// that never lands) fails the launch with an illegal address rather than hang (as sk_wait).
__device__ __forceinline__ void wg_bar_wait(unsigned bar, unsigned parity) {
  if (wg_bar_try(bar, parity)) return;
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (!wg_bar_try(bar, parity)) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 20ull * 1000000000ull) {
      asm volatile("st.global.u32 [%0], 0;\n" ::"l"(0ull) : "memory");
      break;
    }
  }
}

// TMA: the box at (x = k element, y = row) of `map` into shared memory at dst, completing on bar.
__device__ __forceinline__ void wg_tma_load(unsigned dst, const TmaMap* map, int x, int y, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
#endif  // PM_WGMMA_ENABLED

// c (+)= a' b'^T for the pre-pass's k-major copies (WgArgs): KIND WG_TF32 (TF32 operands, also
// float32_tc's 3x deeper split) or WG_BF16.
template <int KIND>
__device__ __forceinline__ void gemm_wgmma_body(const WgArgs& p) {
#ifdef PM_WGMMA_ENABLED
  constexpr int BM = kWgBM, BN = kWgBN, STAGES = kWgStages;
  constexpr int A_STAGE = kWg.a_stage_bytes(), B_STAGE = kWg.b_stage_bytes();
  constexpr int KSTEPS = kWgSlab / 32;  // wgmma per slab, 32 bytes of k each
  static_assert(KIND == WG_TF32 || KIND == WG_BF16, "unknown wgmma kind");
  static_assert(BM == 128 && BN == 256, "two consumer warpgroups of m64n256");
  static_assert(kWgSlab == 128, "one 128-byte swizzle row of k per slab");
  static_assert(A_STAGE % 1024 == 0 && B_STAGE % 1024 == 0, "stages stay 1024-byte aligned");
  static_assert(kWgProducerRegs * 128 + kWgConsumerRegs * 256 <= 65536, "register budget");

  extern __shared__ __align__(1024) unsigned char wg_smem_raw[];  // 1024: asked, not guaranteed
  __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
  const unsigned base = (smem_addr(wg_smem_raw) + 1023u) & ~1023u;  // the host adds 1024 bytes for this
  const unsigned a_s0 = base, b_s0 = base + STAGES * A_STAGE;
  const int tid = threadIdx.x, wg = tid / 128;

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) wg_bar_init(smem_addr(&full[s]), 1), wg_bar_init(smem_addr(&empty[s]), 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the TMA unit
  }
  __syncthreads();

  // Persistent: the block computes tiles blockIdx.x, + gridDim.x, ... of the swizzled order
  // (swizzled_tile's, gemm_common.cuh); both roles walk the same tiles and slabs, counting slabs
  // over the tiles (it) for the ring's stage and phase, so the producer runs up to STAGES slabs
  // into the next tile while the consumers store this one.
  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN, tiles = tiles_m * tiles_n;
  const int width = p.group_m * tiles_n;
  auto origin = [&](int tile, int& m0, int& n0) {
    const int first_m = (tile / width) * p.group_m, group_rows = min(tiles_m - first_m, p.group_m);
    m0 = (first_m + (tile % width) % group_rows) * BM, n0 = ((tile % width) / group_rows) * BN;
  };
  const int slabs = p.k_slabs;  // >= 1 (the host pads k = 0 to one slab of zeros)
  constexpr int SLAB_ELEMS = KIND == WG_TF32 ? kWgSlab / 4 : kWgSlab / 2;

  if (wg == 2) {  // ---- producer ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWgProducerRegs));
    if (tid == 256) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&p.ta)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&p.tb)) : "memory");
      int it = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int m0, n0;
        origin(tile, m0, n0);
        for (int kt = 0; kt < slabs; ++kt, ++it) {
          const int s = it % STAGES;
          wg_bar_wait(smem_addr(&empty[s]), ((it / STAGES) & 1) ^ 1);  // a fresh barrier's "previous" phase is complete
          const unsigned bar = smem_addr(&full[s]);
          wg_bar_expect(bar, A_STAGE + B_STAGE);  // whole boxes, zero-filled parts included
          wg_tma_load(a_s0 + s * A_STAGE, &p.ta, kt * SLAB_ELEMS, m0, bar);
          wg_tma_load(b_s0 + s * B_STAGE, &p.tb, kt * SLAB_ELEMS, n0, bar);
        }
      }
    }
    return;
  }

  // ---- consumers: warpgroup wg owns rows wg * 64 .. + 63 of each tile ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWgConsumerRegs));
  const int lane = tid % 32, w = (tid % 128) / 32, g = lane / 4, t = lane % 4;
  float* c = static_cast<float*>(p.c);
  const bool add = p.accumulate != 0;
  float acc[128];
  // c = the sums (c += with onto_c), straight from the accumulators: acc[4 j + 2 h + e] is
  // c(row0 + 8 h, col0 + 8 j + e).
  auto store = [&](int m0, int n0, bool onto_c) {
    const int row0 = m0 + wg * 64 + w * 16 + g, col0 = n0 + 2 * t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row >= p.m) continue;
      float* crow = c + static_cast<long long>(row) * p.ldc;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int col = col0 + 8 * j;
        float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        if (p.c_vec && col + 1 < p.n) {  // c_vec: c and ldc 8-byte aligned; col is even
          float2* dst = reinterpret_cast<float2*>(crow + col);
          if (onto_c) {
            const float2 old = *dst;
            v0 += old.x, v1 += old.y;
          }
          *dst = make_float2(v0, v1);
        } else {
          if (col < p.n) crow[col] = onto_c ? crow[col] + v0 : v0;
          if (col + 1 < p.n) crow[col + 1] = onto_c ? crow[col + 1] + v1 : v1;
        }
      }
    }
  };
  int it = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int m0, n0;
    origin(tile, m0, n0);
    bool stored = false;  // a part of this tile's sums is in c already (promote_slabs)
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    wg_fence_operands(acc);
    for (int kt = 0; kt < slabs; ++kt, ++it) {
      const int s = it % STAGES;
      wg_bar_wait(smem_addr(&full[s]), (it / STAGES) & 1);
      const unsigned a = a_s0 + s * A_STAGE + wg * 64 * kWgSlab, b = b_s0 + s * B_STAGE;
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        if constexpr (KIND == WG_TF32)
          wgmma_m64n256_tf32(acc, wg_desc(a + 32 * kk), wg_desc(b + 32 * kk));
        else
          wgmma_m64n256_bf16(acc, wg_desc(a + 32 * kk), wg_desc(b + 32 * kk));
      }
      wg_commit();
      wg_wait_groups<1>();  // the slab before's wgmma are done reading its stage: hand it back
      if (kt > 0 && lane == 0) wg_bar_arrive(smem_addr(&empty[(it - 1) % STAGES]));
      if (p.promote_slabs > 0 && (kt + 1) % p.promote_slabs == 0 && kt + 1 < slabs) {
        // The sums so far into c, rounded to nearest by the FADD of the store, and on from zero.
        wg_wait_groups<0>();
        wg_fence_operands(acc);
        store(m0, n0, stored || add);
        stored = true;
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.f;
        wg_fence_operands(acc);
      }
    }
    wg_wait_groups<0>();
    wg_fence_operands(acc);
    if (lane == 0) wg_bar_arrive(smem_addr(&empty[(it - 1) % STAGES]));  // the tile's last slab
    store(m0, n0, stored || add);
  }
#else
  __trap();  // sm_90a only: the host never launches it elsewhere
#endif
}

// The pre-pass (WgPrepArgs, gemm_tiles.h): a 32 (rows) x 32 (k) tile of one operand per block of
// 256 threads, read coalesced along whichever index is contiguous (through shared memory when
// that is the row index: the transpose), rounded or split, written coalesced along k. Zeros past
// the operand's k (up to kp) and nothing past its rows. Plain code: compiled for every target.
__device__ __forceinline__ void wg_prep_body(const WgPrepArgs& p) {
  static_assert(kWgPrepThreads == 256, "8 rows of 32 threads");
  __shared__ float tile[32][33];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int k0 = blockIdx.x * 32;
  const long long r0 = static_cast<long long>(blockIdx.y) * 32;
  const float* src = static_cast<const float*>(p.src);
  if (p.k_contig) {
#pragma unroll
    for (int i = ty; i < 32; i += 8) {
      const long long r = r0 + i;
      const int kk = k0 + tx;
      tile[i][tx] = r < p.rows && kk < p.k ? src[r * p.ld_src + kk] : 0.f;
    }
  } else {
#pragma unroll
    for (int i = ty; i < 32; i += 8) {
      const long long r = r0 + tx;
      const int kk = k0 + i;
      tile[tx][i] = r < p.rows && kk < p.k ? src[static_cast<long long>(kk) * p.ld_src + r] : 0.f;
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = ty; i < 32; i += 8) {
    const long long r = r0 + i;
    if (r >= p.rows) break;
    const float x = tile[i][tx];
    const int kk = k0 + tx;
    if (p.kind == 1) {
      static_cast<float*>(p.dst)[r * p.ld_dst + kk] = tf32_rne(x);
    } else if (p.kind == 4) {
      unsigned short h;
      asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
      static_cast<unsigned short*>(p.dst)[r * p.ld_dst + kk] = h;
    } else if (p.kind == 5) {  // the split, slab blockIdx.x of 32 k as [lo, hi]
      float hi, lo;
      tf32_split(x, hi, lo);
      float* d = static_cast<float*>(p.dst) + r * p.ld_dst + 64 * blockIdx.x + tx;
      d[0] = lo;
      d[32] = hi;
    } else {  // 2, 3: the split, slab blockIdx.x of 32 k as three slabs
      float hi, lo;
      tf32_split(x, hi, lo);
      float* d = static_cast<float*>(p.dst) + r * p.ld_dst + 96 * blockIdx.x + tx;
      d[0] = p.kind == 2 ? lo : hi;
      d[32] = p.kind == 2 ? hi : lo;
      d[64] = hi;
    }
  }
}

}  // namespace
}  // namespace portmat::cuda
