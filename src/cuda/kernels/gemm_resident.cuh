// A short operand resident in shared memory (issue 16): c = a @ b where k is at most 256 and one
// side of c at most 64 and the other side is long: (65536 x 64) @ (64 x 64), (65536 x 192) @ (192 x
// 32), (64 x 64) @ (64 x 65536). Such a product reads the long operand once and writes c, with at
// most 256 multiply-adds per element of c. The tiles spend it on pipelines that never fill (k = 64
// is 4 slabs: the 128x64 tile took 27.5 us where cuBLAS takes 20), waste half of a 64-wide tile on
// 32 columns, and end every tile with its stores; the short-k kernel (k <= 32) multiplies from
// shared memory one element at a time.
//
// The problem is seen as out (R x S) = L (R x K) . Sh (K x S) (the host maps a, b and c onto it as
// for the thin kernels: few columns of c, L = a; few rows, L = b^T and out = c^T). A block of 256
// threads copies Sh (zero-padded to whole chunks of k by 64 columns) into shared memory once, then
// walks the 128-row tiles of L gridDim.x apart (a persistent grid of about two blocks an SM), each
// tile in chunks of 64 k: while it multiplies one chunk the next one's copy (cp.async, 16 bytes a
// thread where aligned) is in flight into the other buffer, also across tiles, so the start of a
// tile and the stores of the one before overlap a copy. Each thread computes 8 rows x 4 columns of
// the tile from float4 reads of shared memory (12 of them per 128 multiply-adds) and stores them as
// float4 where out allows.
//  - resident_f32_lk (L's k contiguous: a row-major a): chunk Ls[128][68], k padded by 4 so that
//    the two rows a warp reads at once are in different banks; a thread's rows are ty + 16 i.
//  - resident_f32_lr (L's r contiguous: a row-major b seen as b^T): chunk Ls[64][132] (k-major);
//    a thread's rows are 4 ty + q and 64 + 4 ty + q.
//  Columns: tx * 4 + j (16 threads across the 64 columns).
//  - the _s32 forms, for at most 32 columns (S <= 32: the 64-column form computed twice what was
//    asked): 8 threads across the columns and 32 rows of them, tiles of 256 rows in chunks of 32
//    k (Ls[256][36] or Ls[32][260]), so the chunk holds as many floats and a thread the same 8 x 4;
//    two blocks an SM up to k = 256.
#pragma once

#include "gemm_common.cuh"

namespace portmat::cuda {
namespace {

constexpr int kResidentThreads = 256;
// SC: the columns of the form (64, or 32 for the _s32 kernels). TX threads across them, TY rows of
// threads; a tile of RT rows in chunks of KC k (RT x KC = 8192 floats either way).
template <bool LK, int SC>
struct ResidentShape {
  static constexpr int TX = SC / 4, TY = kResidentThreads / TX;
  static constexpr int RT = resident_tile_rows(SC), KC = resident_chunk_k(SC);
  static constexpr int PS = SC + 4;  // Ss[k][s]
  // LK: Ls[row][k], pitch KC + 4; LR: Ls[k][row], pitch RT + 4. One chunk.
  static constexpr int kPitch = LK ? KC + 4 : RT + 4;
  static constexpr int kTileFloats = LK ? RT * kPitch : KC * kPitch;
  static constexpr int kShChunkFloats = KC * PS;  // Sh's rows of one chunk
  static_assert(RT * KC == 8192 && TY * 8 == RT, "a thread's 8 rows by 4 columns cover the tile");
};
template <bool LK, int SC>
constexpr int resident_floats(int chunks) {
  return 2 * ResidentShape<LK, SC>::kTileFloats + chunks * ResidentShape<LK, SC>::kShChunkFloats;
}
static_assert(4 * resident_floats<true, 64>(1) == resident_smem_bytes(true, 64, 64), "gemm_tiles.h's size of resident_f32_lk");
static_assert(4 * resident_floats<false, 64>(1) == resident_smem_bytes(false, 64, 64), "gemm_tiles.h's size of resident_f32_lr");
static_assert(4 * resident_floats<true, 64>(4) == resident_smem_bytes(true, 256, 64), "gemm_tiles.h's size at k = 256");
static_assert(4 * resident_floats<true, 32>(8) == resident_smem_bytes(true, 256, 32), "gemm_tiles.h's size of resident_f32_lk_s32");
static_assert(4 * resident_floats<false, 32>(8) == resident_smem_bytes(false, 256, 32), "gemm_tiles.h's size of resident_f32_lr_s32");

// Chunk c of tile t of L (rows t * RT ..., k c * KC ...) into shared memory: zeros past r and k.
template <bool LK, int SC>
__device__ __forceinline__ void resident_issue(const ResidentArgs& p, int t, int c, float* ls) {
  using S = ResidentShape<LK, SC>;
  const float* L = static_cast<const float*>(p.l);
  const int r0 = t * S::RT, k0 = c * S::KC;
#pragma unroll
  for (int i = 0; i < S::RT * S::KC / 4 / kResidentThreads; ++i) {
    const int u = threadIdx.x + i * kResidentThreads;
    // LK: KC / 4 units of 4 k a row; LR: RT / 4 units of 4 rows a k.
    const int row = LK ? u / (S::KC / 4) : u % (S::RT / 4) * 4;
    const int kk = LK ? u % (S::KC / 4) * 4 : u / (S::RT / 4);
    const int gr = r0 + row, gk = k0 + kk;
    float* dst = ls + (LK ? row * S::kPitch + kk : kk * S::kPitch + row);
    // valid elements of the unit along its contiguous index
    const int valid = LK ? (gr < p.r ? min(4, max(0, p.k - gk)) : 0) : (gk < p.k ? min(4, max(0, p.r - gr)) : 0);
    const float* src = LK ? L + static_cast<long long>(gr) * p.ldl + gk : L + static_cast<long long>(gk) * p.ldl + gr;
    if (p.vec) {
      cp_async_16(dst, valid ? src : L, 4 * valid);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) cp_async_elem<4>(dst + j, j < valid ? src + j : L, j < valid ? 4 : 0);
    }
  }
}

template <bool LK, int SC>
__device__ __forceinline__ void resident_body(const ResidentArgs& p) {
  using S = ResidentShape<LK, SC>;
  extern __shared__ __align__(16) float smem[];
  float* const ss = smem + 2 * S::kTileFloats;
  const int tiles = (p.r + S::RT - 1) / S::RT;
  int t = blockIdx.x;
  if (t >= tiles) return;
  // Sh, zero-padded to chunks x KC rows by SC, once, copied by cp.async with the first chunk (16
  // copies a thread in flight together at k = 64: as plain loads, each waiting for the one before,
  // they cost 2 us of 21).
  const int chunks = (p.k + S::KC - 1) / S::KC, kpad = chunks * S::KC;
  const float* g = static_cast<const float*>(p.sh);
  for (int e = threadIdx.x; e < kpad * SC; e += kResidentThreads) {
    const int kk = p.sk == 1 ? e % kpad : e / SC;
    const int s = p.sk == 1 ? e / kpad : e % SC;
    const bool ok = kk < p.k && s < p.s;
    cp_async_elem<4>(ss + kk * S::PS + s, ok ? g + static_cast<long long>(kk) * p.sk + s * p.ss : g, ok ? 4 : 0);
  }
  resident_issue<LK, SC>(p, t, 0, smem);
  cp_async_commit();
  const int tx = threadIdx.x % S::TX, ty = threadIdx.x / S::TX;
  float* out = static_cast<float*>(p.out);
  float acc[8][4];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  // Chunk c of tile t in buffer buf; the next pair's copy (the next chunk, or the next tile's first)
  // is issued before this one is multiplied.
  for (int buf = 0, c = 0; t < tiles; buf ^= 1) {
    int next_t = t, next_c = c + 1;
    if (next_c == chunks) next_c = 0, next_t += gridDim.x;
    if (next_t < tiles) resident_issue<LK, SC>(p, next_t, next_c, smem + (buf ^ 1) * S::kTileFloats);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const float* ls = smem + buf * S::kTileFloats;
    const float* sc = ss + c * S::kShChunkFloats;  // Sh's rows of this chunk
    // the chunk's k rounded up to the float4 steps (zeros past k on both sides)
    const int kp = min(S::KC, (p.k - c * S::KC + 3) & ~3);
    if constexpr (LK) {
#pragma unroll 1
      for (int kk = 0; kk < kp; kk += 4) {
        float4 w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) w[j] = *reinterpret_cast<const float4*>(sc + (kk + j) * S::PS + tx * 4);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float4 x = *reinterpret_cast<const float4*>(ls + (ty + S::TY * i) * S::kPitch + kk);
          acc[i][0] = fmaf(x.w, w[3].x, fmaf(x.z, w[2].x, fmaf(x.y, w[1].x, fmaf(x.x, w[0].x, acc[i][0]))));
          acc[i][1] = fmaf(x.w, w[3].y, fmaf(x.z, w[2].y, fmaf(x.y, w[1].y, fmaf(x.x, w[0].y, acc[i][1]))));
          acc[i][2] = fmaf(x.w, w[3].z, fmaf(x.z, w[2].z, fmaf(x.y, w[1].z, fmaf(x.x, w[0].z, acc[i][2]))));
          acc[i][3] = fmaf(x.w, w[3].w, fmaf(x.z, w[2].w, fmaf(x.y, w[1].w, fmaf(x.x, w[0].w, acc[i][3]))));
        }
      }
    } else {
#pragma unroll 4
      for (int kk = 0; kk < kp; ++kk) {
        const float4 w = *reinterpret_cast<const float4*>(sc + kk * S::PS + tx * 4);
        const float4 x0 = *reinterpret_cast<const float4*>(ls + kk * S::kPitch + ty * 4);
        const float4 x1 = *reinterpret_cast<const float4*>(ls + kk * S::kPitch + S::RT / 2 + ty * 4);
        const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          acc[i][0] = fmaf(xs[i], w.x, acc[i][0]);
          acc[i][1] = fmaf(xs[i], w.y, acc[i][1]);
          acc[i][2] = fmaf(xs[i], w.z, acc[i][2]);
          acc[i][3] = fmaf(xs[i], w.w, acc[i][3]);
        }
      }
    }
    if (c == chunks - 1) {  // the tile's last chunk: its results out, the sums cleared for the next
      // Row i of the thread's 8: LK ty + TY i; LR 4 ty + i (i < 4), RT / 2 + 4 ty + i - 4.
      const int r0 = t * S::RT, s0 = tx * 4;
      auto row_of = [&](int i) {
        return r0 + (LK ? ty + S::TY * i : (i < 4 ? 4 * ty + i : S::RT / 2 + 4 * ty + i - 4));
      };
      if (p.out_vec && p.oss == 1 && s0 + 3 < p.s) {  // float4 along s (c itself: L = a)
#pragma unroll
        for (int i = 0; i < 8; ++i)
          if (row_of(i) < p.r)
            __stcs(reinterpret_cast<float4*>(out + static_cast<long long>(row_of(i)) * p.ors + s0),
                   make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
      } else if (!LK && p.out_vec && p.ors == 1) {  // float4 along r (out = c^T: L = b^T)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = row_of(4 * h);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (s0 + j >= p.s) break;
            float* o = out + static_cast<long long>(s0 + j) * p.oss + r;
            if (r + 3 < p.r) {
              __stcs(reinterpret_cast<float4*>(o), make_float4(acc[4 * h][j], acc[4 * h + 1][j], acc[4 * h + 2][j], acc[4 * h + 3][j]));
            } else {
#pragma unroll
              for (int q = 0; q < 4; ++q)
                if (r + q < p.r) o[q] = acc[4 * h + q][j];
            }
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int r = row_of(i);
          if (r >= p.r) continue;
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (s0 + j < p.s) out[static_cast<long long>(r) * p.ors + static_cast<long long>(s0 + j) * p.oss] = acc[i][j];
        }
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    }
    __syncthreads();  // every read of this buffer done before the copy after next refills it
    t = next_t, c = next_c;
  }
}

}  // namespace
}  // namespace portmat::cuda
