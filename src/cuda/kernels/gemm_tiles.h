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
  // Stream-K kernels only (GemmTile::stream_k; the others ignore these): the sk_blocks blocks
  // share the tiles of swizzled indices sk_first .. sk_first + sk_tiles - 1 slab by slab
  // (sk_tiles * k_tiles >= sk_blocks); a tile split between blocks i and i + 1 is handed over
  // through sk_flags[i] (sk_blocks ints, all 0 between launches; the protocol: gemm_common.cuh).
  int* sk_flags;
  int sk_first, sk_tiles, sk_blocks;
  // Batched kernels only (gemm_batched.cuh; the others ignore these): matrix i of a, b and c starts
  // i * stride elements after matrix 0 (0: the same matrix for every i).
  long long stride_a, stride_b, stride_c;
  // Batched kernels: when > 0, the launch's last matrix has this k instead (split-K's shorter last
  // slice of k; cuda_backend.cpp, launch_split).
  int k_last;
  // Tensor-core kernels only (gemm_tc.cuh; the others ignore it): 1: c += a @ b (the NumPy path's
  // k-split pieces), 0: c = a @ b.
  int accumulate;
};

// The tensor-core kernels (gemm_tc.cuh, issue 18: the precision modes tf32, float32_tc, bfloat16):
// one tile for all three modes. Shared rows are padded by `pad` floats (8: conflict-free fragment
// reads, gemm_tc.cuh says why), not GemmTile::kPad.
struct TcTile {
  int bm, bn, bk, warps_m, warps_n, stages, pad, min_blocks;
  constexpr int threads() const { return warps_m * warps_n * 32; }
  constexpr int smem_bytes() const { return stages * bk * ((bm + pad) + (bn + pad)) * 4; }
};
// 128x128x32, 8 warps of 64x32, double-buffered: 69632 bytes of shared memory.
inline constexpr TcTile kTc{128, 128, 32, 2, 4, 2, 8, 1};

// The Hopper tensor-core kernels (gemm_wgmma.cuh, sm_90a): wgmma + TMA, warp-specialised. Their
// operands are the pre-pass's copies (wg_prep), k-major, rounded (tf32 / bfloat16) or split and
// laid out as a longer k (float32_tc): the main kernel only ever multiplies two k-major matrices.
// Block tile bm x bn; each k slab is 128 bytes of k (32 float32 or 64 bfloat16: one 128-byte
// swizzle row), `stages` slabs in the ring; two consumer warpgroups of bm / 2 rows each and one
// producer warpgroup. Shared memory: the ring plus 1024 bytes to align it to the swizzle's
// 1024-byte pattern (the mbarriers are static).
struct WgTile {
  int bm, bn, stages, slab_bytes;
  static constexpr int kThreads = 384;  // 2 consumer warpgroups + 1 producer warpgroup
  constexpr int a_stage_bytes() const { return bm * slab_bytes; }
  constexpr int b_stage_bytes() const { return bn * slab_bytes; }
  constexpr int smem_bytes() const { return stages * (a_stage_bytes() + b_stage_bytes()) + 1024; }
};
inline constexpr WgTile kWg{128, 256, 4, 128};
// float32_tc's register-promotion kernels (gemm_wgmma_f32tc.cuh): 128 x BN tiles, one 32-k chunk
// of the [lo, hi] split = two slabs of the ring. 128 x 128: 7 slabs of 32 KiB (3.5 chunks: the one
// in the tensor cores, the one before it until its wgmma are done, 1.5 loading); 128 x 192: 5 slabs
// of 40 KiB (6 would pass 227 KiB).
inline constexpr WgTile kWgF32tc128{128, 128, 7, 128};
inline constexpr WgTile kWgF32tc192{128, 192, 5, 128};
// The one that runs by default (PORTMAT_CUDA_F32TC_KERNEL=regs): 128. Measured on the H200
// (session 18, cuda_tc_sweep.py): 128 x 128 ran float32_tc at 117.8 / 114.0 TFLOP/s at n = 4096 /
// 8192, 128 x 192 at 89.2 / 92.4 (its 2.5 chunks of ring do not hide TMA's latency).
inline constexpr int kWgF32tcDefaultBn = 128;
// Their promotion interval's default, in chunks of 32 k (PORTMAT_CUDA_TC_PROMOTE overrides it): 1,
// i.e. 12 wgmma k8 steps in one tensor-core chain. Measured on the H200 (session 18, 128 x 128, n =
// 4096 / 8192): every chunk 122.8 / 118.4 TFLOP/s with max error 6.0e-8 / 6.6e-8; every 2 chunks
// 121.3 / 116.6 (7.4e-8 / 6.6e-8); 4: 117.8 / 114.0 (1.0e-7 / 8.0e-8); 8: 118.7 / 115.2 (2.0e-7 /
// 1.5e-7); never: 119.2 / 117.5 (3.5e-6 / 5.2e-6); cuBLAS float32 (FFMA) 51.4 / 51.3 with 3.2e-7 /
// 4.7e-7. The shortest chains are both the most accurate and the fastest: the staggered
// promotions hide under the other warpgroup's wgmma, and a short interval keeps the two
// warpgroups' drains small.
inline constexpr int kWgF32tcPromoteChunks = 1;
inline constexpr int kWgPrepThreads = 256;  // wg_prep's block: a 32 x 32 tile of an operand

// A CUtensorMap's 128 opaque bytes (cuda.h's type, which this header does not include), built on
// the host by cuTensorMapEncodeTiled and passed by value in WgArgs (a __grid_constant__ kernel
// parameter: TMA reads the map from parameter space).
struct alignas(128) TmaMap {  // cuda.h (13.0) aligns CUtensorMap to 128; TMA needs 64 at least
  unsigned long long opaque[16];
};

// gemm_wgmma_{tf32,bf16} and gemm_wgmma_f32tc_{n128,n192}'s argument block: c (+)= a' b'^T for
// the pre-pass's k-major copies a' (m x kext, map ta, box one slab x bm rows) and b' (n x kext, map
// tb, box one slab x bn rows).
struct WgArgs {
  TmaMap ta, tb;
  void* c;
  long long ldc;  // elements
  int m, n;
  int k_slabs;    // kext / elements per slab
  int group_m;    // block swizzle: tile rows per group
  int c_vec;      // c and ldc 8-byte aligned: float2 stores
  int accumulate; // 1: c += a @ b
  int promote_slabs;  // > 0: every this many slabs the consumers add their sums into c and start
                      // from zero (float32_tc: the tensor cores' accumulation is not rounded to
                      // nearest, so long chains of it lose float32's accuracy). In
                      // gemm_wgmma_f32tc_*: 32-k chunks per promotion in registers (0: never)
};

// wg_prep: one operand (r x k, element (i, kk) at src[i * ld_src + kk] when k_contig, else at
// src[kk * ld_src + i]) into dst, k-major with rows ld_dst elements apart, k padded with zeros to
// kp (a multiple of the slab), as `kind`:
//   1 (tf32): round_tf32(x), float32;
//   2 (split, a's role): per 32-k slab j, columns 96 j + [0, 32) lo, [32, 64) hi, [64, 96) hi;
//   3 (split, b's role): the same with hi, lo, hi: the slab's three products lo*hi, hi*lo, hi*hi
//     are then one k-major product 3 times as deep (float32_tc, kext = 3 kp);
//   4 (bf16): round_bf16(x) as bfloat16 bits;
//   5 (split as [lo, hi], a's and b's role alike): per 32-k slab j, columns 64 j + [0, 32) lo,
//     [32, 64) hi (float32_tc on gemm_wgmma_f32tc_*, kext = 2 kp: it picks the three products).
struct WgPrepArgs {
  const void* src;
  void* dst;
  long long ld_src, ld_dst;
  int rows, k, kp, k_contig, kind;
};

// split_sum (gemm_batched.cuh): c = parts[0] + parts[1] + ... + parts[count - 1], in that order,
// of `count` dense m x n float32 partial products part_stride elements apart; vec: n % 4 == 0 and
// c, ldc 16-byte aligned (float4 loads and stores).
struct SplitSumArgs {
  const void* parts;
  void* c;
  long long ldc, part_stride;
  int m, n, count, vec;
  int groups;  // threads per unit of c (split_sum_groups), each over a run of the parts
};

// split_sum's threads per unit of c (4 elements with vec, else 1): a power of two, at most
// kSplitSumMaxGroups, doubled while a thread would add more than kSplitSumPartsPerThread parts. One
// thread adding all of them in turn waited for each load in turn: (64 x 65536) @ (65536 x 64) in
// 132 slices spent about a third of its time there (H200, session 32).
inline constexpr int kSplitSumThreads = 256, kSplitSumMaxGroups = 32, kSplitSumPartsPerThread = 4;
constexpr int split_sum_groups(int count) {
  int g = 1;
  while (g < kSplitSumMaxGroups && 2 * g <= count && (count + g - 1) / g > kSplitSumPartsPerThread) g *= 2;
  return g;
}

// Rows of L per warp in thin_dots (the kernels, and the host's model of their grid): 8 partial sums
// per lane for one or two columns, 4 x S past that. (2 x 16 for 16 columns, which needs fewer
// registers, was slower on the H200: 60 against 52 us at (4096 x 4096) @ (4096 x 16): each block
// reads the short operand again, per row of L twice as much.)
constexpr int thin_dots_rows_per_warp(int sc) { return sc <= 2 ? 8 : 4; }

// The thin kernels (gemm_thin.cuh): out (r x s) = L (r x k) . Sh (k x s) for s <= 16, float32.
// L's element (i, kk) is at l[i * ldl + kk] (thin_dots) or l[kk * ldl + i] (thin_axpy); Sh's
// (kk, j) at sh[kk * sk + j * ss]; out's (i, j) at out[i * ors + j * oss], slice blockIdx.y's
// out_step elements after slice 0's (0 when the grid has one slice and writes c itself).
// kslice: the depth of each slice of k, a multiple of 128 (thin_dots: a float4 of each lane) or
// of 64 (thin_axpy: 8 k of each warp). vec: l and ldl allow 16-byte loads.
// With slices (gridDim.y > 1) and `counter` set (gridDim.x ints, zero before the launch): the
// slices' parts go to out (as above), and for each row of blocks the last block to finish adds
// them into c (c's (i, j) at c[i * crs + j * css]) and clears its counter again.
// cluster (thin_axpy and thin_dots, sm_90): the launch's clusters are the gridDim.y (at most
// kClusterMaxSlices) slices of a row of blocks; their parts meet in the blocks' shared memory and
// are added into c (crs, css) there: no out, no counter.
struct ThinArgs {
  const void* l;
  const void* sh;
  void* out;
  long long ldl, sk, ss, ors, oss, out_step;
  int r, s, k, kslice, vec;
  int* counter;
  void* c;
  long long crs, css;
  int cluster;
};

// The short-k kernels (gemm_short_k.cuh): c (m x n, row-major, ldc) = a (m x k) @ b (k x n) for
// k <= kShortKMax, float32; a(i, kk) at a[i * lda + kk] (a[kk * lda + i] with a_col), b(kk, j) at
// b[kk * ldb + j] (b[j * ldb + kk] with b_col). c_vec: c and ldc allow 16-byte stores. a_vec, b_vec:
// the operand's copy may load 16 bytes at a time (its pointer 16-byte aligned, ld a multiple of 4,
// and k a multiple of 4 where k is its contiguous index). Grid: x over blocks of rows, y over
// blocks of columns.
inline constexpr int kShortKMax = 32;
struct ShortKArgs {
  const void* a;
  const void* b;
  void* c;
  long long lda, ldb, ldc;
  int m, n, k, a_col, b_col, c_vec, a_vec, b_vec;
};

// The resident kernels (gemm_resident.cuh): out (r x s) = L (r x k) . Sh (k x s) for k <= kResidentMaxK
// and s <= kResidentMax, float32, L long (many rows r). L's (i, kk) at l[i * ldl + kk]
// (resident_f32_lk: k contiguous) or l[kk * ldl + i] (resident_f32_lr: r contiguous); Sh's (kk, j)
// at sh[kk * sk + j * ss]; out's (i, j) at out[i * ors + j * oss]. vec: l and ldl allow 16-byte
// copies; out_vec: out and the larger of ors, oss allow 16-byte stores along the one that is 1.
// Grid: persistent, blockIdx.x walks the tiles of L (128 rows; 256 for the _s32 forms) gridDim.x
// apart, each in chunks of k (64; 32).
inline constexpr int kResidentMax = 64;     // s at most
inline constexpr int kResidentMaxK = 256;   // k at most: Sh holds all of it
inline constexpr int kResidentRows = 128;  // rows of L a tile of the 64-column forms
inline constexpr int resident_tile_rows(int sc) { return sc == 32 ? 256 : kResidentRows; }
inline constexpr int resident_chunk_k(int sc) { return 8192 / resident_tile_rows(sc); }
// Their dynamic shared memory: two chunks of a tile of L (k padded by 4: 128 x 68 or 256 x 36
// floats; or k-major, 64 x 132 or 32 x 260) and Sh (chunk k x (sc + 4) floats a chunk). Two blocks
// fit an SM of 228 KiB up to k = 128 for the 64-column forms (102 KiB each; at k = 256, 136 KiB,
// one), and up to k = 256 for the 32-column ones (108 KiB).
inline constexpr int resident_smem_bytes(bool lk, int k = kResidentMax, int sc = kResidentMax) {
  const int rt = resident_tile_rows(sc), kc = resident_chunk_k(sc);
  return 4 * (2 * (lk ? rt * (kc + 4) : kc * (rt + 4)) + (k + kc - 1) / kc * kc * (sc + 4));
}
struct ResidentArgs {
  const void* l;
  const void* sh;
  void* out;
  long long ldl, sk, ss, ors, oss;
  int r, s, k, vec, out_vec;
};

// thin_sum: c's (i, j) at c[i * ors + j * oss] = the sum over q < count of
// parts[q * part_stride + i * prs + j * pss], in groups of `group` consecutive parts: each
// group's in order, then the groups' sums in order (one group, group = count: the plain order of
// the launch's own sums, thin_last_block_sum and thin_cluster_sum). Many parts (a long k over few
// elements of c) are added by the 8 warps of a block side by side, a group each, instead of one
// thread taking every part's load in turn: thin_sum_group.
struct ThinSumArgs {
  const void* parts;
  void* c;
  long long part_stride, prs, pss, ors, oss;
  int r, s, count, group;
};
// thin_sum's groups: up to kThinSumGroupMin parts are one group (the bits of the launch's own
// sums, which take at most that many); more are split into at most kThinSumGroups groups (a
// block's warps) of at least kThinSumGroupMin each.
inline constexpr int kThinSumGroupMin = 16, kThinSumGroups = 8;
inline constexpr int thin_sum_group(int count) {
  const int share = (count + kThinSumGroups - 1) / kThinSumGroups;  // count's parts over every warp
  return count <= kThinSumGroupMin ? count : share > kThinSumGroupMin ? share : kThinSumGroupMin;
}
// Elements of c a thin_sum block adds (its 256 threads): one a lane, 32, where the parts are in
// groups (each warp a group of the same 32 elements); else one a thread, 256. The launch's grid
// (cuda_backend.cpp) and thin_sum_body both take it from here.
inline constexpr int kThinSumThreads = 256;
inline constexpr int thin_sum_block_elements(bool grouped) { return grouped ? 32 : kThinSumThreads; }

// The complex-to-real rewrite of b (complex_b_body, gemm_batched.cuh): from the complex (k x n)
// matrices b[i] (row-major, or column-major with b_col; ldb and strides in complex elements) the
// real row-major (2k x 2n) matrices out[i], i < gridDim.y, stride_out complex elements apart.
struct ComplexBArgs {
  const void* b;
  void* out;
  long long ldb, stride_b, stride_out;
  int k, n, b_col;
};

// cast_elements (casts.cuh): dst[i] = src[i] from dtype code `from` to `to` (portmat::DType's order).
struct CastArgs {
  const void* src;
  void* dst;
  long long count;
  int from, to;
};

// One compiled tile configuration. A block computes bm x bn of c in k-steps of bk through a
// `stages`-deep cp.async pipeline; each warp owns a wm x wn piece of it, each thread rm x rn
// sub-tiles of 4 x 4 (so a thread's tile is 4rm x 4rn, read from shared memory 4 at a time).
struct GemmTile {
  const char* name;  // kernel name prefix; the layout suffix (_rr, _rc, _cr, _cc) follows
  int bm, bn, bk, wm, wn, rm, rn, stages, elem_bytes, min_blocks;
  // 1: a row-major a stays k-contiguous in shared memory (As[m][bk + kPad], 16-byte copies, read
  // 4 k at a time); only the double-buffered body (gemm_body_db) reads it. 0: As[k][m] always.
  int a_mk = 0;
  // 1: the stream-K half of a hybrid grid: the host launches the data-parallel tiles with the
  // _fp kernel of the same shape, then this kernel over the rest (GemmArgs::sk_*).
  int stream_k = 0;
  // Warp-specialized kernels (gemm_body_ws, sm_90a): warps that only copy, after the computing
  // ones. 0 elsewhere.
  int producer_warps = 0;
  // 1: split-K in one launch (64x64c, sm_90 thread-block clusters): the blocks
  // of a cluster are the slices of k of one tile and sum their partial tiles through each other's
  // shared memory (gemm_common.cuh, cluster_sum_store), which must hold a whole bm x bn tile.
  int cluster = 0;
  // Sliced k (64x128_sl, gemm_body_fp): groups of warps that each compute the whole bm x bn tile
  // over their own bk / k_groups rows of every slab; group 0 adds the others' sums (through the
  // shared ring) and stores c. 1 elsewhere.
  int k_groups = 1;
  constexpr int lanes_m() const { return wm / (4 * rm); }
  constexpr int lanes_n() const { return wn / (4 * rn); }
  constexpr int group_threads() const { return (bm / wm) * (bn / wn) * 32; }  // one k group
  constexpr int compute_threads() const { return group_threads() * k_groups; }
  constexpr int threads() const { return compute_threads() + producer_warps * 32; }
  static constexpr int kPad = 4;  // elements added to each shared-memory row: no bank conflicts
                                  // when a k-major operand is stored transposed
  // One stage of a: [bk][bm + kPad], or [bm][bk + kPad] with a_mk (the larger of the two, so that
  // every layout fits the one size the host sets).
  constexpr int a_stage() const {
    return a_mk && bm * (bk + kPad) > bk * (bm + kPad) ? bm * (bk + kPad) : bk * (bm + kPad);
  }
  constexpr int smem_bytes() const { return stages * (a_stage() + bk * (bn + kPad)) * elem_bytes; }
};

// float32, run by gemm_body: 128x256 (8x16 per thread, 1 block per SM), the baseline of the
// variants below, and 64x64 for problems with fewer 128x128 tiles than SMs (more, smaller blocks).
// Tiles measured slower and removed (their records are in git: bench/results/README.md says
// how): 128x128 and its _b1, 256x128, and the variants _db32, _ak32 and _fp4 described below.
inline constexpr GemmTile kF32_128x256{"gemm_sm80_f32_128x256", 128, 256, 16, 64, 64, 2, 4, 3, 4, 1};
inline constexpr GemmTile kF32_64x64{"gemm_sm80_f32_64x64", 64, 64, 16, 32, 32, 2, 1, 4, 4, 4};
// Experimental 128x256 variants (issue 4), all 8x16 per thread, 256 threads, 1 block per SM, run by
// gemm_body_db: fragments double-buffered in registers across k steps and across the slab
// boundary (the barrier sits before the last k step of a slab). _db: the baseline's shared layout
// (H200: 45.5-45.7 TFLOP/s at n = 4096 against 41.3); _ak: also a_mk (row-major a copied 16 bytes
// at a time into As[m][k], no 4-byte transposing copies; 40.8, kept as the only user of a_mk).
// Removed: _db32 / _ak32 with bk = 32 (42.8 / 39.7).
inline constexpr GemmTile kF32_128x256_db{"gemm_sm80_f32_128x256_db", 128, 256, 16, 64, 64, 2, 4, 3, 4, 1};
inline constexpr GemmTile kF32_128x256_ak{"gemm_sm80_f32_128x256_ak", 128, 256, 16, 64, 64, 2, 4, 3, 4, 1, 1};
// gemm_body_fp: _db's k loop with a fast copy path for edge-free tiles (no bounds predicates or
// selects on the copies of all but the last `stages` slabs: running pointers, immediate offsets;
// see gemm_body_fp.cuh). sm_90 SASS of the rr kernel per 16-deep slab on that path: 2048 FFMA
// and 150 other instructions (96 LDS.128, 12 LDGSTS, ~37 integer), against 2048 and 286 for _db.
// _fp: 128x256 as _db (the default: 49.5-49.6 TFLOP/s at n = 4096; 49.8 with the serpentine FFMA
// order of session 3, cuBLAS 50.7-51.1 in that run: record 2026-11-29_h200_kernel_diag_round5.json);
// 128x128_fp: 8x8 per thread at 2 blocks per SM (128 registers, 16 warps per SM: 64 LDS.128 and
// ~59 others per 1024 FFMA; 45.1). Removed: _fp4 with 4 stages (47.7). Session 5 (record
// 2026-11-29_h200_s5_*.json; code on branch experiment/s5-copy-sched): 4 stages again (-0.7% at
// 8448, -1.5 / -1.6% at 4224 / 4096: record _s5_bk8_stages.json), 8-deep slabs with 4-5 stages (-3%),
// other SCHED values and copies at warp-uniform offsets (fewer write-after-read waits on the
// copies' address registers, 0.4-1.8% slower), all against _fp at whole waves.
inline constexpr GemmTile kF32_128x256_fp{"gemm_sm80_f32_128x256_fp", 128, 256, 16, 64, 64, 2, 4, 3, 4, 1};
// _sk: _fp's body and tile on a hybrid grid against wave quantization. With T tiles, W SMs and
// R = T % W > 0, the first T - R tiles run as a launch of _fp (whole waves) and the last R tiles
// are shared by the W blocks of an _sk launch, R / W tiles' worth of slabs each (a split tile's
// parts are summed in k order: deterministic). Otherwise _fp alone. The default for 128x256 tiles
// on GPUs other than sm_90 (there _wsk, below):
// H200, 2026-11-29 (record 2026-11-29_h200_s4_kernel_diag_5.json) 50.2 / 51.4 TFLOP/s at
// n = 4096 / 8192 against _fp's 49.8 / 50.0 (cuBLAS 51.1 / 51.0).
// A one-launch variant (data-parallel and stream-K blocks in one grid) ran 48.5 against 50.2 at
// n = 4096 (record 2026-11-29_h200_s5_sk1.json; branch experiment/sk-one-launch). A device-resident
// product of at most 7 waves of tiles runs as one _sk launch that shares every tile (no _fp
// launch before it): 1% faster at n = 4096 and 5120, 3% at 3072 (cuda_backend.cpp, launch()).
inline constexpr GemmTile kF32_128x256_sk{"gemm_sm80_f32_128x256_sk", 128, 256, 16, 64, 64, 2, 4, 3, 4, 1, 0, 1};
// _fpa: _fp that adds its results to c (c += a @ b: gemm_body_fp's ACC). Not a tile to choose:
// the NumPy path's k-split pieces after the first run it (cuda_backend.cpp, launch(accumulate)).
inline constexpr GemmTile kF32_128x256_fpa{"gemm_sm80_f32_128x256_fpa", 128, 256, 16, 64, 64, 2, 4, 3, 4, 1};
inline constexpr GemmTile kF32_128x128_fp{"gemm_sm80_f32_128x128_fp", 128, 128, 16, 64, 32, 2, 2, 4, 4, 2};
// _ws: _fp's tile and k loop in 8 computing warps that never copy; a warpgroup of 4 copying warps
// fills a 4-stage ring and hands it over through mbarriers (gemm_body_ws). Against the computing
// warps' waits on their own copies (long scoreboard 5.8% of _fp's samples, cuBLAS 1.5%:
// record 2026-11-29_h200_s5_ncu_source.txt). sm_90a only (setmaxnreg: 208 registers for the computing
// threads, 72 for the copying ones; _wsk 224 / 56); the host refuses it on other GPUs.
// _wsk: _ws on the stream-K grid of _sk (the host pairs it with _ws for the whole waves; every
// tile shared in one launch was slower for it at every size). The default on sm_90: H200,
// 2026-11-29 (record 2026-11-29_h200_s7_ws_rule.json), _wsk / _sk / cuBLAS TFLOP/s: 2048 49.5 / 48.9 /
// 49.7, 3072 50.2 / 50.1 / 45.1, 4096 51.2 / 51.0 / 51.2, 5120 51.1 / 50.8 / 46.9, 6144 51.8 /
// 50.9 / 50.8, 8192 52.0 / 51.4 / 51.2; _wsk with every tile shared 48.8-50.6.
inline constexpr GemmTile kF32_128x256_ws{"gemm_sm80_f32_128x256_ws", 128, 256, 16, 64, 64, 2, 4, 4, 4, 1, 0, 0, 4};
inline constexpr GemmTile kF32_128x256_wsk{"gemm_sm80_f32_128x256_wsk", 128, 256, 16, 64, 64, 2, 4, 4, 4, 1, 0, 1, 4};
// Mid-size and skinny tiles (issue 16): 8x8 per thread in 4 warps (128 threads), on gemm_body_fp,
// 3 blocks per SM (at 4, 128 registers, the rr and rc kernels spilled 40-120 bytes), each with its
// stream-K partner (_sk: the same body with SK; every tile shared, no hybrid grid). For products
// with too few 128x256 tiles to fill the GPU and for a side of 64, where a 128x256 tile would idle
// over half or more of itself; tile_choice.cpp weighs them. H200, device-resident, against cuBLAS
// (torch, TF32 off), 2026-12-01: n = 768 0.61x -> 0.93x (64x128_sk), 1024 0.77x -> 0.95x
// (64x128_fp), (4096 x 4096) @ (4096 x 64) 0.37x -> 0.74x (128x64_sk), (64 x 4096) @
// (4096 x 4096) 0.33x -> 0.70x (64x128_sk); docs/cuda.md has the table. 128x128_fp on stream-K
// (128x128_sk) was never the best choice (n = 1024 0.84x, 1280 1.11x against 1.18x for _wsk).
inline constexpr GemmTile kF32_64x128_fp{"gemm_sm80_f32_64x128_fp", 64, 128, 16, 32, 64, 2, 2, 4, 4, 3};
inline constexpr GemmTile kF32_64x128_sk{"gemm_sm80_f32_64x128_sk", 64, 128, 16, 32, 64, 2, 2, 4, 4, 3, 0, 1};
inline constexpr GemmTile kF32_128x64_fp{"gemm_sm80_f32_128x64_fp", 128, 64, 16, 64, 32, 2, 2, 4, 4, 3};
inline constexpr GemmTile kF32_128x64_sk{"gemm_sm80_f32_128x64_sk", 128, 64, 16, 64, 32, 2, 2, 4, 4, 3, 0, 1};
// 64x128_sl ("sliced k", issue 16): 64x128_fp's tile and per-thread code in 8 warps (256 threads)
// instead of 4: two groups of 4 warps, each computing the whole 64x128 tile over half of every
// 32-deep slab (group g the k rows [16 g, 16 g + 16) of each slab: 16 k steps per barrier, as
// 64x128_fp), sharing one cp.async ring that all 256 threads fill; at the end group 1 writes its
// sums into the ring, one barrier, and group 0 adds them to its own (always group 0 + group 1: the
// same bits every run) and stores c. Why: at n = 512-1024 a 64x128 tile is one block per SM, and
// 64x128_fp's 4 warps (one per scheduler) hide no stall (its main loop ~52% of the SM's FFMA peak;
// _ws's 8 computing warps reach 77%). 3 stages of 32 x (68 + 132) floats: 76800 bytes.
// _sl: 1 block per SM by its launch bounds (sm_90a 155-168 registers, no spills); at n <= 1024 a
// 64x128 grid has at most one block per SM anyway (the same at 2 blocks per SM, capped at 128
// registers, spilled and was never faster: docs/cuda.md). First timings (H200, rr, docs/cuda.md):
// n = 1024 57.1 us against 61.4 for 64x128_fp. The tile model (tile_choice.cpp) weighs _sl and
// _slb where their grid is at most one block an SM; PORTMAT_CUDA_TILE=64x128_sl forces it; _slb
// (below) is _sl's batched form for split-K (PORTMAT_CUDA_SPLIT_TILE=64x128_sl).
inline constexpr GemmTile kF32_64x128_sl{"gemm_sm80_f32_64x128_sl", 64, 128, 32, 32, 64, 2, 2, 3, 4, 1, 0, 0, 0, 0, 2};
// 128x64_sl: the same sliced k on 128x64_fp's tile (8x8 a thread, 8 warps, 1 block an SM), for
// grids of at most one block an SM with a side of 64, where 128x64_fp's 4 warps hide no stall.
// H200, 2026-12-05 (session 35), us: (16384 x 256) @ (256 x 64) 19.3 against 21.5 for 128x64_fp
// (cuBLAS graph 17.0), (16384 x 128) @ (128 x 64) 12.5 against 14.5; (4096 x 4096) @ (4096 x 64)
// in 4 slices (_slb) 64.6 against 67.4. With two or more tiles an SM it lost ((32768 x 256) @
// (256 x 64) 36.5 against 33.8), as 64x128_sl does. Tried the same day and dropped: 64x64_sl (8x4
// a thread, 2 blocks an SM), never the fastest (20.2 us on the first product above, 25.1 on
// (64 x 64) @ (64 x 65536) against 20.3 for 64x64).
inline constexpr GemmTile kF32_128x64_sl{"gemm_sm80_f32_128x64_sl", 128, 64, 32, 64, 32, 2, 2, 3, 4, 1, 0, 0, 0, 0, 2};
// float64: one simple tile (8x4 per thread); DFMA runs at half the FFMA rate on GH100.
inline constexpr GemmTile kF64_64x64{"gemm_sm80_f64_64x64", 64, 64, 16, 32, 32, 2, 1, 3, 8, 2};

// Strided batches (gemm_batched.cuh): the data-parallel tiles above with blockIdx.y choosing the
// matrix (_fpb: _fp's body; 64x64b and float64's 64x64b: gemm_body), and for small matrices one
// 32x32 tile per block of 64 threads (gemm_small_body; static shared memory, so no stages here).
// _small's min_blocks: 10 blocks per SM (96 registers, no spills). H200, 2026-12-01, device-resident
// 10000 x 32^3, ms (cuBLAS strided-batched through CuPy / torch: 0.0499 / 0.0509): 8 blocks (123
// registers) 0.0391, 10 0.0364, 12 (80, 16 bytes spilled) 0.0368, 16 (64, 80 bytes spilled) 0.0451.
// With register loads instead of cp.async (128 registers, 8 blocks) 0.066.
inline constexpr GemmTile kF32_128x256_fpb{"gemm_sm80_f32_128x256_fpb", 128, 256, 16, 64, 64, 2, 4, 3, 4, 1};
// 64x128_fp's and 128x64_fp's bodies over a stack: split-K's slices (cuda_backend.cpp, launch_split).
inline constexpr GemmTile kF32_64x128_fpb{"gemm_sm80_f32_64x128_fpb", 64, 128, 16, 32, 64, 2, 2, 4, 4, 3};
inline constexpr GemmTile kF32_128x64_fpb{"gemm_sm80_f32_128x64_fpb", 128, 64, 16, 64, 32, 2, 2, 4, 4, 3};
// 64x128_sl's and 128x64_sl's bodies over a stack (split-K's slices; PORTMAT_CUDA_SPLIT_TILE=64x128_sl
// or 128x64_sl).
inline constexpr GemmTile kF32_64x128_slb{"gemm_sm80_f32_64x128_slb", 64, 128, 32, 32, 64, 2, 2, 3, 4, 1, 0, 0, 0, 0, 2};
inline constexpr GemmTile kF32_128x64_slb{"gemm_sm80_f32_128x64_slb", 128, 64, 32, 64, 32, 2, 2, 3, 4, 1, 0, 0, 0, 0, 2};
inline constexpr GemmTile kF32_64x64b{"gemm_sm80_f32_64x64b", 64, 64, 16, 32, 32, 2, 1, 4, 4, 4};
inline constexpr GemmTile kF64_64x64b{"gemm_sm80_f64_64x64b", 64, 64, 16, 32, 32, 2, 1, 3, 8, 2};
// Split-K in one launch (sm_90: thread-block clusters of the slices of k, summed through
// distributed shared memory; cuda_backend.cpp, launch_split): 64x64b with `cluster` set, at most
// kClusterMaxSlices slices (the portable cluster size). For the smallest products only, where
// the second launch of split-K costs more than the work (docs/cuda.md). Measured and dropped
// (H200, session 21, cuda_split_sweep.py): the same for 64x128 and 128x64 (on _fp's body): a cluster's
// blocks are packed onto few SMs, so from n = 384 up they ran slower than the same slices in two
// launches ((4096 x 4096) @ (4096 x 64) in 4 slices 117 us against 66; n = 512 in 4 20.0 against
// 16.5; only n = 1024 in 2 gained, 59 against 61); and 128x256 (its 128 KiB tile took more shared
// memory than its pipeline: n = 1024 in 2-8 slices 71-110 us).
inline constexpr int kClusterMaxSlices = 8;
inline constexpr GemmTile kF32_64x64c{"gemm_sm90_f32_64x64c", 64, 64, 16, 32, 32, 2, 1, 4, 4, 4, 0, 0, 0, 1};
inline constexpr GemmTile kF32_small{"gemm_sm80_f32_small", 32, 32, 32, 32, 16, 1, 1, 0, 4, 10};
inline constexpr GemmTile kF64_small{"gemm_sm80_f64_small", 32, 32, 32, 32, 16, 1, 1, 0, 8, 8};

// The integer dtypes, wrapping (core/matmul.cpp carries int32 / uint32 as u32, int64 / uint64 as
// u64, the narrower ones widened): gemm_body with T = unsigned (IMAD, half FFMA's rate on GH100)
// or unsigned long long (emulated, several instructions a multiply-add), on float32's and
// float64's simple tiles, 2-D and batched. No tuning beyond that: they exist so that an integer
// product stays on the GPU instead of going back to the host's CPU.
inline constexpr GemmTile kU32_64x64{"gemm_sm80_u32_64x64", 64, 64, 16, 32, 32, 2, 1, 4, 4, 4};
inline constexpr GemmTile kU64_64x64{"gemm_sm80_u64_64x64", 64, 64, 16, 32, 32, 2, 1, 3, 8, 2};
inline constexpr GemmTile kU32_64x64b{"gemm_sm80_u32_64x64b", 64, 64, 16, 32, 32, 2, 1, 4, 4, 4};
inline constexpr GemmTile kU64_64x64b{"gemm_sm80_u64_64x64b", 64, 64, 16, 32, 32, 2, 1, 3, 8, 2};

// Every float32 tile by the short name PORTMAT_CUDA_TILE accepts (the name after "gemm_sm80_f32_").
// A tile added above must be listed here and have its four kernels in gemm.cu.
struct NamedTile {
  const char* short_name;
  const GemmTile* tile;
};
inline constexpr NamedTile kF32Tiles[] = {
    {"128x256", &kF32_128x256},       {"64x64", &kF32_64x64},
    {"128x256_db", &kF32_128x256_db}, {"128x256_ak", &kF32_128x256_ak},
    {"128x256_fp", &kF32_128x256_fp}, {"128x128_fp", &kF32_128x128_fp},
    {"128x256_sk", &kF32_128x256_sk}, {"128x256_ws", &kF32_128x256_ws},
    {"128x256_wsk", &kF32_128x256_wsk}, {"64x128_fp", &kF32_64x128_fp},
    {"64x128_sk", &kF32_64x128_sk},   {"128x64_fp", &kF32_128x64_fp},
    {"128x64_sk", &kF32_128x64_sk},   {"64x128_sl", &kF32_64x128_sl},
    {"128x64_sl", &kF32_128x64_sl},
};

}  // namespace portmat::cuda
