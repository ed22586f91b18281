// The CUDA gemm kernels: c = a @ b in exact float32 (FFMA, never TF32) and float64 (DFMA), for
// any M, N, K and both operand layouts. Compiled ahead of time by nvcc into one fatbin (sm_80 and
// sm_90 machine code, compute_90 PTX) that the backend embeds and loads with cuModuleLoadData.
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
#include <cstdint>

#include "gemm_tiles.h"

namespace portmat::cuda {
namespace {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16-byte copy; bytes past src_bytes (0..16) are filled with zeros and not read.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
template <int BYTES>
__device__ __forceinline__ void cp_async_elem(void* dst, const void* src, int src_bytes) {
  static_assert(BYTES == 4 || BYTES == 8, "element copies are 4 or 8 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src),
               "n"(BYTES), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four consecutive elements from 16-byte-aligned shared memory.
template <int N>
__device__ __forceinline__ void lds4(const float* p, float (&v)[N], int at) {
  const float4 x = *reinterpret_cast<const float4*>(p);
  v[at] = x.x, v[at + 1] = x.y, v[at + 2] = x.z, v[at + 3] = x.w;
}
template <int N>
__device__ __forceinline__ void lds4(const double* p, double (&v)[N], int at) {
  const double2 x = reinterpret_cast<const double2*>(p)[0], y = reinterpret_cast<const double2*>(p)[1];
  v[at] = x.x, v[at + 1] = x.y, v[at + 2] = y.x, v[at + 3] = y.y;
}

__device__ __forceinline__ void store4(float* p, const float* v) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(double* p, const double* v) {
  reinterpret_cast<double2*>(p)[0] = make_double2(v[0], v[1]);
  reinterpret_cast<double2*>(p)[1] = make_double2(v[2], v[3]);
}

// Copies one bk-deep slab of an operand into shared memory. `ROWS` is the operand's extent along
// M (for a) or N (for b): the index that is contiguous in shared memory (stride `S` per k).
// K_MAJOR: the global layout has k contiguous (element (r, k) at g[r * ld + k]); otherwise r is
// contiguous (g[k * ld + r]). A thread's pieces sit at compile-time distances from its first one,
// so the per-slab cost is a few address adds and the copies themselves.
template <class T, int ROWS, int BK, int S, int THREADS, bool K_MAJOR>
struct SlabLoader {
  static constexpr int kChunk = 16 / sizeof(T);  // elements per 16-byte copy
  // K_MAJOR: element copies, k fastest in groups of 8: a warp stores 4 rows x 8 k, which with the
  // row stride S = ROWS + 4 are 32 different banks (float32). Piece i of thread tid is element
  // e = i * THREADS + tid: row (e / 8) % ROWS, k (e / (8 ROWS)) * 8 + e % 8.
  static constexpr int kKGroup = 8;
  static constexpr int kRowsPerPass = THREADS / kKGroup;  // rows one pass of all threads covers
  // Otherwise: 16-byte chunks, a row of the slab is ROWS / kChunk chunks; piece i of thread tid is
  // chunk tid % kChunksPerK of k = i * kKPerPass + tid / kChunksPerK.
  static constexpr int kChunksPerK = ROWS / kChunk;
  static constexpr int kKPerPass = THREADS / kChunksPerK;
  static constexpr int kPer = K_MAJOR ? ROWS * BK / THREADS : BK * kChunksPerK / THREADS;
  static_assert(BK % kKGroup == 0, "bk must be a multiple of 8");
  static_assert(ROWS % kChunk == 0, "tile rows must be whole 16-byte chunks");
  static_assert(!K_MAJOR || (ROWS % kRowsPerPass == 0 && (kKGroup * ROWS) % THREADS == 0),
                "k-major pieces must sit at fixed distances");
  static_assert(K_MAJOR || (THREADS % kChunksPerK == 0 && BK % kKPerPass == 0),
                "m-contiguous pieces must sit at fixed distances");

  const T* base;  // the operand: the (unread) source of zero-filling copies
  const T* g;     // this thread's first piece in k-slab 0 (may point outside: used only when ok)
  long long ld;
  int r;          // this thread's first row (absolute)
  int kq;         // this thread's first k within a slab
  int rows, k, vec;

  __device__ __forceinline__ SlabLoader(const T* g_, long long ld_, int rows_, int k_, int vec_,
                                        int r0, int tid)
      : base(g_), ld(ld_), rows(rows_), k(k_), vec(vec_) {
    if constexpr (K_MAJOR) {
      r = r0 + tid / kKGroup;
      kq = tid % kKGroup;
      g = g_ + r * ld + kq;
    } else {
      r = r0 + (tid % kChunksPerK) * kChunk;
      kq = tid / kChunksPerK;
      g = g_ + kq * ld + r;
    }
  }

  __device__ __forceinline__ void load(T* slab, int r0, int k0, bool full) const {
    if constexpr (K_MAJOR) {
      const T* src0 = g + k0;
      T* dst0 = slab + kq * S + (r - r0);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        constexpr int kPassesPerK = ROWS / kRowsPerPass;
        const int dr = (i % kPassesPerK) * kRowsPerPass, dk = (i / kPassesPerK) * kKGroup;
        const bool ok = full || (r + dr < rows && k0 + kq + dk < k);
        cp_async_elem<sizeof(T)>(dst0 + dk * S + dr, ok ? src0 + dr * ld + dk : base,
                                 ok ? int(sizeof(T)) : 0);
      }
    } else {
      const T* src0 = g + k0 * ld;
      T* dst0 = slab + kq * S + (r - r0);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int dk = i * kKPerPass;
        const int gk = k0 + kq + dk;
        if (full && vec) {
          cp_async_16(dst0 + dk * S, src0 + dk * ld, 16);
        } else if (vec) {
          const int valid = gk < k ? min(max(rows - r, 0), kChunk) : 0;
          cp_async_16(dst0 + dk * S, valid ? src0 + dk * ld : base, valid * int(sizeof(T)));
        } else {
#pragma unroll
          for (int j = 0; j < kChunk; ++j) {
            const bool ok = gk < k && r + j < rows;
            cp_async_elem<sizeof(T)>(dst0 + dk * S + j, ok ? src0 + dk * ld + j : base,
                                     ok ? int(sizeof(T)) : 0);
          }
        }
      }
    }
  }
};

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

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* As = reinterpret_cast<T*>(smem_raw);  // [STAGES][BK][SA]
  T* Bs = As + STAGES * BK * SA;           // [STAGES][BK][SB]

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  // Block swizzle: consecutive block ids walk down a group of `group_m` tile rows before moving
  // right, so the blocks resident at one time read few distinct a-panels and b-panels.
  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int pid = blockIdx.x, width = p.group_m * tiles_n;
  const int first_m = (pid / width) * p.group_m;
  const int group_rows = min(tiles_m - first_m, p.group_m);
  const int m0 = (first_m + (pid % width) % group_rows) * BM;
  const int n0 = ((pid % width) / group_rows) * BN;

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
#pragma unroll
      for (int i = 0; i < 4 * RM; ++i)
#pragma unroll
        for (int j = 0; j < 4 * RN; ++j) acc[i][j] = fma(af[i], bf[j], acc[i][j]);
    }
  }
  cp_async_wait<0>();  // no copy may outlive the block (they are all empty by now)

  // Epilogue: 4-wide stores where the row is aligned and whole, element stores at the edges.
  T* c = static_cast<T*>(p.c);
#pragma unroll
  for (int i = 0; i < 4 * RM; ++i) {
    const int row = m0 + wm0 + (i / 4) * 4 * LM + lm * 4 + i % 4;
    if (row >= p.m) continue;
    T* crow = c + row * p.ldc;
#pragma unroll
    for (int r = 0; r < RN; ++r) {
      const int col = n0 + wn0 + r * 4 * LN + ln * 4;
      if (p.c_vec && col + 3 < p.n) {
        store4(crow + col, &acc[i][4 * r]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (col + j < p.n) crow[col + j] = acc[i][4 * r + j];
      }
    }
  }
}

}  // namespace
}  // namespace portmat::cuda

using portmat::cuda::GemmArgs;
using portmat::cuda::gemm_body;
namespace tiles = portmat::cuda;

// The kernels, by element type, tile and layout of a and b ('r' row-major, 'c' column-major).
// Spelled out so each name can be grepped; the host builds the same names from GemmTile::name.
#define PM_BOUNDS(tile) __launch_bounds__(tiles::tile.threads(), tiles::tile.min_blocks)
extern "C" {
__global__ void PM_BOUNDS(kF32_128x128) gemm_sm80_f32_128x128_rr(GemmArgs p) { gemm_body<float, tiles::kF32_128x128, true, false>(p); }
__global__ void PM_BOUNDS(kF32_128x128) gemm_sm80_f32_128x128_rc(GemmArgs p) { gemm_body<float, tiles::kF32_128x128, true, true>(p); }
__global__ void PM_BOUNDS(kF32_128x128) gemm_sm80_f32_128x128_cr(GemmArgs p) { gemm_body<float, tiles::kF32_128x128, false, false>(p); }
__global__ void PM_BOUNDS(kF32_128x128) gemm_sm80_f32_128x128_cc(GemmArgs p) { gemm_body<float, tiles::kF32_128x128, false, true>(p); }

__global__ void PM_BOUNDS(kF32_128x128_b1) gemm_sm80_f32_128x128_b1_rr(GemmArgs p) { gemm_body<float, tiles::kF32_128x128_b1, true, false>(p); }
__global__ void PM_BOUNDS(kF32_128x128_b1) gemm_sm80_f32_128x128_b1_rc(GemmArgs p) { gemm_body<float, tiles::kF32_128x128_b1, true, true>(p); }
__global__ void PM_BOUNDS(kF32_128x128_b1) gemm_sm80_f32_128x128_b1_cr(GemmArgs p) { gemm_body<float, tiles::kF32_128x128_b1, false, false>(p); }
__global__ void PM_BOUNDS(kF32_128x128_b1) gemm_sm80_f32_128x128_b1_cc(GemmArgs p) { gemm_body<float, tiles::kF32_128x128_b1, false, true>(p); }

__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_rr(GemmArgs p) { gemm_body<float, tiles::kF32_128x256, true, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_rc(GemmArgs p) { gemm_body<float, tiles::kF32_128x256, true, true>(p); }
__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_cr(GemmArgs p) { gemm_body<float, tiles::kF32_128x256, false, false>(p); }
__global__ void PM_BOUNDS(kF32_128x256) gemm_sm80_f32_128x256_cc(GemmArgs p) { gemm_body<float, tiles::kF32_128x256, false, true>(p); }

__global__ void PM_BOUNDS(kF32_256x128) gemm_sm80_f32_256x128_rr(GemmArgs p) { gemm_body<float, tiles::kF32_256x128, true, false>(p); }
__global__ void PM_BOUNDS(kF32_256x128) gemm_sm80_f32_256x128_rc(GemmArgs p) { gemm_body<float, tiles::kF32_256x128, true, true>(p); }
__global__ void PM_BOUNDS(kF32_256x128) gemm_sm80_f32_256x128_cr(GemmArgs p) { gemm_body<float, tiles::kF32_256x128, false, false>(p); }
__global__ void PM_BOUNDS(kF32_256x128) gemm_sm80_f32_256x128_cc(GemmArgs p) { gemm_body<float, tiles::kF32_256x128, false, true>(p); }

__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_rr(GemmArgs p) { gemm_body<float, tiles::kF32_64x64, true, false>(p); }
__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_rc(GemmArgs p) { gemm_body<float, tiles::kF32_64x64, true, true>(p); }
__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_cr(GemmArgs p) { gemm_body<float, tiles::kF32_64x64, false, false>(p); }
__global__ void PM_BOUNDS(kF32_64x64) gemm_sm80_f32_64x64_cc(GemmArgs p) { gemm_body<float, tiles::kF32_64x64, false, true>(p); }

__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_rr(GemmArgs p) { gemm_body<double, tiles::kF64_64x64, true, false>(p); }
__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_rc(GemmArgs p) { gemm_body<double, tiles::kF64_64x64, true, true>(p); }
__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_cr(GemmArgs p) { gemm_body<double, tiles::kF64_64x64, false, false>(p); }
__global__ void PM_BOUNDS(kF64_64x64) gemm_sm80_f64_64x64_cc(GemmArgs p) { gemm_body<double, tiles::kF64_64x64, false, true>(p); }
}
