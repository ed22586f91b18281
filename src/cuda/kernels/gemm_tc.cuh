// The tensor-core body (gemm_tc_body): float32 operands multiplied on the tensor cores with warp-level
// mma.sync, in the precision modes other than exact float32 (issue 18; portmat.hpp, Precision):
//  - TC_TF32 ("tf32"): each operand rounded to TF32 (10 mantissa bits, round-to-nearest-even) as
//    its fragment is loaded, one mma.m16n8k8.tf32 per 8 k, float32 accumulation;
//  - TC_F32 ("float32_tc"): each operand split as its fragment is loaded into hi = tf32(x) and
//    lo = tf32(x - hi) (x - hi is exact in float32), three mma per 8 k: lo*hi + hi*lo + hi*hi into
//    a fresh accumulator, added to the float32 total by an FADD (lo*lo, below float32's rounding,
//    is left out);
//  - TC_BF16 ("bfloat16"): each operand rounded to bfloat16 (cvt.rn.bf16x2: nearest-even, NaN
//    kept), one mma.m16n8k16.bf16 per 16 k, float32 accumulation.
// Why mma.sync and not wgmma: it runs on sm_80 and sm_90 alike, it is short enough to check by
// reading, and it is the correctness baseline the Hopper kernel (wgmma + TMA, docs/cuda.md) will be
// tested against. Why round in the kernel (integer ops, not cvt.rna.tf32): cvt.rna rounds ties away
// from zero; the integer form rounds ties to even, exactly as core/reference.cpp does, so tests
// compare the kernel to the mode's exact reference. A faster rounding is a later measurement.
//
// STATUS: runs and passes its tests on the H200 (2026-12-02), but slowly: tf32 46 and bfloat16 66
// TFLOP/s at n = 4096, against cuBLAS's 404 and 786 (docs/cuda.md). The Hopper kernel is for speed.
//
// The contract is gemm.cu's (GemmArgs; 1-D swizzled grid; cp.async slabs in shared memory as
// As[k][m], Bs[k][n], copied by SlabLoader, which zero-fills every edge), with its own tile:
//  - block tile kTcBM x kTcBN x kTcBK, kTcStages-deep cp.async ring (2: double buffering), 8 warps
//    as kTcWarpsM x kTcWarpsN, each warp a (kTcBM / kTcWarpsM) x (kTcBN / kTcWarpsN) tile of
//    MI x NI mma tiles of 16 x 8;
//  - shared rows padded by kTcPad = 8 floats: row stride = 8 mod 32 banks, so a warp's fragment
//    reads (lanes g = lane / 4 along m or n, t = lane % 4 along k) hit 32 distinct banks in the
//    tf32 modes (bank 8 t + g); bfloat16's pairs (k = 2t, 2t+1) are 2-way conflicted (16 t + g).
//  - fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k8" (.tf32) and "mma.m16n8k16"
//    (.bf16): A (row = m, col = k), B (row = k, col = n), C rows g and g + 8, columns 2t, 2t + 1.
//  - GemmArgs::accumulate: c += a @ b (the NumPy path's k-split pieces, each launch after the one
//    before on one stream: a plain read-add-write, each element owned by one thread).
#pragma once

#include "gemm_common.cuh"

namespace portmat::cuda {

// ---- tunables ----------------------------------------------------------------------------------
// The tile is kTc in gemm_tiles.h (128 x 128 x 32, 8 warps of 64 x 32, 2 stages, rows padded by 8
// floats), there because the host sizes the grid and the shared memory from it too.
inline constexpr int kTcBM = kTc.bm, kTcBN = kTc.bn, kTcBK = kTc.bk;
inline constexpr int kTcWarpsM = kTc.warps_m, kTcWarpsN = kTc.warps_n;
inline constexpr int kTcStages = kTc.stages, kTcPad = kTc.pad, kTcThreads = kTc.threads();

// The modes (template argument; the host's entry-point names: gemm_tc_{tf32,f32x3,bf16}_*).
inline constexpr int TC_TF32 = 1, TC_F32 = 2, TC_BF16 = 3;

namespace {

// x rounded to TF32 (the top 19 bits of a float32) to nearest, ties to even; infinities stay,
// NaN stays NaN (a canonical one: the mma reads only the top 19 bits, which must keep a mantissa
// bit), a finite x that rounds past the largest TF32 becomes infinity (as the reference's).
__device__ __forceinline__ float tf32_rne(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7f800000u) != 0x7f800000u) {
    u += 0xfffu + ((u >> 13) & 1u);
    u &= 0xffffe000u;
  } else if (u & 0x7fffffu) {
    u = 0x7fffffffu;
  }
  return __uint_as_float(u);
}

// The split of float32_tc: x ~ hi + lo, both TF32. lo = 0 where hi is not finite (an infinite or
// NaN x, or one that rounded to infinity), so that an infinite operand gives an infinite product,
// not inf - inf = NaN.
__device__ __forceinline__ void tf32_split(float x, float& hi, float& lo) {
  hi = tf32_rne(x);
  lo = isfinite(hi) ? tf32_rne(x - hi) : 0.f;
}

// Two floats as a packed bfloat16 pair, `first` in the low half (the lower k index of a fragment).
__device__ __forceinline__ unsigned bf16_pair(float first, float second) {
  unsigned d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(second), "f"(first));
  return d;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// acc += x, rounded to nearest, as an asm volatile: kept in program order with the mma above.
__device__ __forceinline__ void add_into(float& acc, float x) {
  asm volatile("add.rn.f32 %0, %0, %1;\n" : "+f"(acc) : "f"(x));
}

template <int MODE, bool A_KMAJOR, bool B_KMAJOR>
__device__ __forceinline__ void gemm_tc_body(const GemmArgs& p) {
  constexpr int BM = kTcBM, BN = kTcBN, BK = kTcBK, STAGES = kTcStages, THREADS = kTcThreads;
  constexpr int WM = BM / kTcWarpsM, WN = BN / kTcWarpsN;  // warp tile
  constexpr int MI = WM / 16, NI = WN / 8;                 // mma tiles per warp
  constexpr int SA = BM + kTcPad, SB = BN + kTcPad;        // shared row strides (elements)
  constexpr int A_STAGE = BK * SA, B_STAGE = BK * SB;
  constexpr int KSTEP = MODE == TC_BF16 ? 16 : 8;          // k per mma
  static_assert(MODE == TC_TF32 || MODE == TC_F32 || MODE == TC_BF16, "unknown tensor-core mode");
  static_assert(WM % 16 == 0 && WN % 8 == 0 && BK % KSTEP == 0, "mma tiles must tile the warp tile");
  static_assert(STAGES == 2, "the k loop below is written for double buffering");
  static_assert((SA * 4) % 16 == 0 && (SB * 4) % 16 == 0, "shared rows stay 16-byte aligned");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* As = reinterpret_cast<float*>(smem_raw);  // [STAGES][BK][SA]
  float* Bs = As + STAGES * A_STAGE;               // [STAGES][BK][SB]

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const TileOrigin tile = swizzled_tile<BM, BN>(p, blockIdx.x);
  const int m0 = tile.m0, n0 = tile.n0;
  const int wm0 = (warp % kTcWarpsM) * WM, wn0 = (warp / kTcWarpsM) * WN;

  const SlabLoader<float, BM, BK, SA, THREADS, A_KMAJOR> la(static_cast<const float*>(p.a), p.lda, p.m, p.k,
                                                            p.a_vec, m0, tid);
  const SlabLoader<float, BN, BK, SB, THREADS, B_KMAJOR> lb(static_cast<const float*>(p.b), p.ldb, p.n, p.k,
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

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

  load_slab(0, 0);
  for (int s = 0; s < k_tiles; ++s) {
    load_slab(s + 1, (s + 1) % STAGES);  // into the buffer the previous slab's barrier freed
    cp_async_wait<1>();                  // slab s has landed (for this thread's copies) ...
    __syncthreads();                     // ... and for every thread's
    const float* as = As + (s % STAGES) * A_STAGE + wm0 + g;  // column g of the warp's rows
    const float* bs = Bs + (s % STAGES) * B_STAGE + wn0 + g;
    // float32_tc's k steps one at a time: unrolled, the compiler overlapped them and its three
    // products with their partial sums took 255 registers and spilled (sm_90a).
#pragma unroll(MODE == TC_F32 ? 1 : BK / KSTEP)
    for (int kk = 0; kk < BK; kk += KSTEP) {
      if constexpr (MODE == TC_BF16) {
        unsigned a[MI][4], b[NI][2];
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          const float* r = as + i * 16;
          const int k0 = kk + 2 * t;
          a[i][0] = bf16_pair(r[k0 * SA], r[(k0 + 1) * SA]);
          a[i][1] = bf16_pair(r[k0 * SA + 8], r[(k0 + 1) * SA + 8]);
          a[i][2] = bf16_pair(r[(k0 + 8) * SA], r[(k0 + 9) * SA]);
          a[i][3] = bf16_pair(r[(k0 + 8) * SA + 8], r[(k0 + 9) * SA + 8]);
        }
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          const float* c = bs + j * 8;
          const int k0 = kk + 2 * t;
          b[j][0] = bf16_pair(c[k0 * SB], c[(k0 + 1) * SB]);
          b[j][1] = bf16_pair(c[(k0 + 8) * SB], c[(k0 + 9) * SB]);
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NI; ++j) mma_bf16(acc[i][j], a[i], b[j]);
      } else {
        // A fragment of mma tile i: (m g, k t), (m g+8, k t), (m g, k t+4), (m g+8, k t+4);
        // B fragment of mma tile j: (k t, n g), (k t+4, n g).
        float ax[MI][4], bx[NI][2];
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          const float* r = as + i * 16 + (kk + t) * SA;
          ax[i][0] = r[0], ax[i][1] = r[8], ax[i][2] = r[4 * SA], ax[i][3] = r[4 * SA + 8];
        }
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          const float* c = bs + j * 8 + (kk + t) * SB;
          bx[j][0] = c[0], bx[j][1] = c[4 * SB];
        }
        if constexpr (MODE == TC_TF32) {
          unsigned a[MI][4], b[NI][2];
#pragma unroll
          for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int q = 0; q < 4; ++q) a[i][q] = __float_as_uint(tf32_rne(ax[i][q]));
#pragma unroll
          for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 2; ++q) b[j][q] = __float_as_uint(tf32_rne(bx[j][q]));
#pragma unroll
          for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j) mma_tf32(acc[i][j], a[i], b[j]);
        } else {  // TC_F32
          unsigned ah[MI][4], al[MI][4], bh[NI][2], bl[NI][2];
#pragma unroll
          for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              float h, l;
              tf32_split(ax[i][q], h, l);
              ah[i][q] = __float_as_uint(h), al[i][q] = __float_as_uint(l);
            }
#pragma unroll
          for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              float h, l;
              tf32_split(bx[j][q], h, l);
              bh[j][q] = __float_as_uint(h), bl[j][q] = __float_as_uint(l);
            }
          // The three products of these 8 k go into a fresh accumulator (the small products first,
          // while it is still small), which is then added to the total by an FADD. The tensor
          // cores' own accumulation does not round to nearest: fed the running total, it lost
          // 8.5x float32's accuracy at K = 2048 on the H200 (1.9e-6 against FFMA's 2.3e-7 relative
          // to |a| @ |b|, 2026-12-02); the FADD rounds to nearest, as FFMA's accumulation does.
          // The adds are asm volatile, ordered with the mma (also volatile): plain FADDs were
          // deferred by the compiler, every row's partial sums live at once (255 registers and
          // spills); this way one row of mma tiles' partials is live at a time.
#pragma unroll
          for (int i = 0; i < MI; ++i) {
            float part[NI][4];
#pragma unroll
            for (int j = 0; j < NI; ++j) {
#pragma unroll
              for (int q = 0; q < 4; ++q) part[j][q] = 0.f;
              mma_tf32(part[j], al[i], bh[j]);
              mma_tf32(part[j], ah[i], bl[j]);
              mma_tf32(part[j], ah[i], bh[j]);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
              for (int q = 0; q < 4; ++q) add_into(acc[i][j][q], part[j][q]);
          }
        }
      }
    }
    __syncthreads();  // every warp is done with slab s's buffer: the next iteration refills it
  }
  cp_async_wait<0>();

  // Epilogue: acc[i][j] = c rows r0 + i * 16 + g (+ 8), columns c0 + j * 8 + 2t (+ 1).
  float* c = static_cast<float*>(p.c);
  const bool add = p.accumulate != 0;
  const int row0 = m0 + wm0 + g, col0 = n0 + wn0 + 2 * t;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + i * 16 + h * 8;
      if (row >= p.m) continue;
      float* crow = c + static_cast<long long>(row) * p.ldc;
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const int col = col0 + j * 8;
        float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if (p.c_vec && col + 1 < p.n) {  // c_vec: c and ldc 16-byte aligned; col is even
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
}

}  // namespace
}  // namespace portmat::cuda
