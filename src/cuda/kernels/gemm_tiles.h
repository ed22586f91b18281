// What the host and the kernels (gemm.cu) must agree on: the argument block of every gemm kernel
// and the tile shape of each compiled configuration (grid size, threads, dynamic shared memory).
// Plain C++17 so that both nvcc and the host compiler read it.
#pragma once

namespace portmat::cuda {

// Passed by value to every gemm kernel. c = a @ b with c row-major; a row-major ('r': element
// (i, k) at a[i * lda + k]) or column-major ('c': a[k * lda + i]), b likewise; pointers already
// include the matrices' offsets.
struct GemmArgs {
  const void* a;
  const void* b;
  void* c;
  long long lda, ldb, ldc;  // elements
  int m, n, k;
  int a_vec, b_vec, c_vec;  // 1: 16-byte copies allowed (base and ld aligned); 0: element copies
  int group_m;              // block swizzle: tile rows per group (L2 reuse), >= 1
};

// One compiled tile configuration. A block computes bm x bn of c in k-steps of bk through a
// `stages`-deep cp.async pipeline; each warp owns a wm x wn piece of it, each thread rm x rn
// sub-tiles of 4 x 4 (so a thread's tile is 4rm x 4rn, read from shared memory 4 at a time).
struct GemmTile {
  const char* name;  // kernel name prefix; the layout suffix (_rr, _rc, _cr, _cc) follows
  int bm, bn, bk, wm, wn, rm, rn, stages, elem_bytes, min_blocks;
  constexpr int lanes_m() const { return wm / (4 * rm); }
  constexpr int lanes_n() const { return wn / (4 * rn); }
  constexpr int threads() const { return (bm / wm) * (bn / wn) * 32; }
  static constexpr int kPad = 4;  // elements added to each shared-memory row: no bank conflicts
                                  // when a k-major operand is stored transposed
  constexpr int smem_bytes() const { return stages * bk * (bm + kPad + bn + kPad) * elem_bytes; }
};

// float32: the main tile (2 blocks per SM on sm_80/sm_90, 128 registers; _b1: the same tile at one
// block per SM without the register cap), two larger ones (1 block per SM, 8x16
// per thread: fewer shared-memory loads per FFMA), and a small one for small problems (more blocks).
inline constexpr GemmTile kF32_128x128{"gemm_sm80_f32_128x128", 128, 128, 16, 64, 32, 2, 2, 4, 4, 2};
inline constexpr GemmTile kF32_128x128_b1{"gemm_sm80_f32_128x128_b1", 128, 128, 16, 64, 32, 2, 2, 4, 4, 1};
inline constexpr GemmTile kF32_128x256{"gemm_sm80_f32_128x256", 128, 256, 16, 64, 64, 2, 4, 3, 4, 1};
inline constexpr GemmTile kF32_256x128{"gemm_sm80_f32_256x128", 256, 128, 16, 128, 32, 4, 2, 3, 4, 1};
inline constexpr GemmTile kF32_64x64{"gemm_sm80_f32_64x64", 64, 64, 16, 32, 32, 2, 1, 4, 4, 4};
// float64: one simple tile (8x4 per thread); DFMA runs at half the FFMA rate on GH100.
inline constexpr GemmTile kF64_64x64{"gemm_sm80_f64_64x64", 64, 64, 16, 32, 32, 2, 1, 3, 8, 2};

}  // namespace portmat::cuda
