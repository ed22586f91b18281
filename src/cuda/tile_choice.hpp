// Which float32 tile a CUDA product runs on, and whether its tiles are shared stream-K: a model
// of each candidate's time on the GPU's multiprocessors (issue 16), not a list of special cases.
//
// A tile of bm x bn over k costs 2 bm bn k flops at a rate per multiprocessor (SM) that each tile
// shape reaches (measured on the H200: one 128x256 block per SM, three 64x128 ones, ...). With T
// tiles on S SMs:
//  - data-parallel, one block a tile: the busiest SM runs ceil(T / S) tiles one after another
//    (its rate is about the same with one block as with several: measured), so the last partial
//    wave costs as much as a full one;
//  - every tile shared stream-K by w blocks (the _sk kernels): T / min(w, S) tiles' worth of work
//    on each busy SM, plus a pipeline start and, for each block a tile is split into, a hand-over
//    to the next block in k order (tile_choice.cpp has the fitted costs). Fewer blocks than SMs
//    can win: a small result over a long k split among all of them would pay a long chain of
//    hand-overs.
// The candidate with the smallest estimate wins. Large products (at least a wave of 128x256 tiles)
// keep the 128x256 kernels and launch()'s hybrid grid, whose estimate is the balanced one. A tile
// that overhangs a thin side pays for its idle rows or columns, which is what moves products with
// a side of 64 to the 64-wide tiles.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

#include "cuda/kernels/gemm_tiles.h"

namespace portmat::cuda {

// A stream-K block's run must be worth a pipeline's start and end: at least this many slabs.
inline constexpr std::int64_t kMinSkSlabs = 8;

// Split-K (TileChoice::split): the partial results live in a per-stream workspace of at most this
// many bytes (cuda_backend.cpp, launch_split); larger splits are not weighed.
inline constexpr std::int64_t kSplitMaxBytes = std::int64_t(32) << 20;
// The depth of each slice when k is split in about `split` slices: a multiple of the 16-deep slab,
// so that k / depth whole slices and a shorter last one (k_last) make the product; the model and
// launch_split cut k the same way.
inline constexpr std::int64_t split_depth(std::int64_t k, std::int64_t split) {
  return ((k + 15) / 16 + split - 1) / split * 16;
}

struct TileChoice {
  const GemmTile* tile;  // what launch() runs (a stream-K tile: with its data-parallel partner)
  bool share_all;        // every tile shared by the stream-K blocks (one launch) ...
  std::int64_t sk_blocks;  // ... this many of them (0: launch()'s own count)
  double estimate_s;     // the model's time, for tests and diagnostics
  // > 1: split k into this many slices, a stack of products of `tile` (a batched kernel) into a
  // workspace, then their sum into c (cuda_backend.cpp, launch_split); or, where `tile` is a
  // cluster kernel, one launch whose clusters sum the slices in shared memory.
  std::int64_t split = 0;
};

// m x k @ k x n on `sms` multiprocessors; warp_specialized: the sm_90a kernels (_ws, _wsk) run
// here; whole: the product is alone on the GPU (device-resident), so its blocks may wait on each
// other (stream-K); the NumPy path's row chunks overlap on two streams and stay data-parallel.
// room: how many clusters of `slices` blocks of a cluster kernel (GemmTile::cluster) the GPU runs
// at once (cuOccupancyMaxActiveClusters; 0: none), with as many blocks an SM as fit (spread =
// false) or with one block an SM (true: how many the GPU spreads over its SMs; a cluster's blocks
// share one GPC, so fewer than SMs / slices where a GPC's SMs are not a multiple of slices);
// empty where the GPU has no clusters (before sm_90). With it, split-K may be one launch
// (TileChoice::tile a cluster kernel).
// sliced: the sliced-k tiles (64x128_sl, 128x64_sl) among the candidates: 0 not, 1 data-parallel
// only, 2 (the default) also their batched kernels for split-K ($PORTMAT_CUDA_SLICED).
using ClusterRoom = std::function<std::int64_t(const GemmTile& tile, int slices, bool spread)>;
TileChoice choose_f32_tile(std::int64_t m, std::int64_t n, std::int64_t k, int sms, bool warp_specialized,
                           bool whole, const ClusterRoom& room = {}, int sliced = 2);

// Thin products (kernels/gemm_thin.cuh): a side of c of at most kThinMax. The product is seen as
// out (r x s) = L (r x k) . Sh (k x s): L = a (few columns of c) or L = b^T (few rows, out = c^T);
// when both sides are short, the view whose L has k contiguous (thin_dots), else the longer L.
// Memory-bound: the estimate is L's bytes (and the result's) at the GPU's streaming rate, or the
// multiply-adds at the kernels' rate where s is large, over the SMs the grid occupies; a grid with
// too few blocks of rows splits k into slices, summed by a second launch (thin_sum). `use`: the
// estimate beats the tile model's estimate for the same product (choose_f32_tile's, or the tile
// a knob forced).
inline constexpr std::int64_t kThinMax = 16;

struct ThinChoice {
  bool possible = false;     // a side of c is at most kThinMax
  bool use = false;          // ... and the model prefers the thin kernels
  bool few_rows = false;     // L = b^T, out = c^T (else L = a, out = c)
  bool dots = false;         // L's k contiguous: thin_dots (else thin_axpy)
  bool wk = false;           // thin_dots_wk: L has at most one warp's rows, the warps split k
  int sc = 0;                // the short side padded to 1, 2, 4, 8 or 16
  std::int64_t rows_per_block = 0;
  std::int64_t slices = 1;   // grid rows over k; > 1: partial results and thin_sum
  std::int64_t kslice = 0;   // their depth: a multiple of 128 (thin_dots) or 64 (thin_axpy)
  double estimate_s = 0.0;
};

// t (a possible thin product of m x k @ k x n) with k cut into about `slices` slices: at least one,
// no more than split-K's workspace holds the parts of, each a whole number of the kernel's grain.
// The estimate is left as it was (choose_thin, and PORTMAT_CUDA_THIN_SLICES for measurements).
ThinChoice with_thin_slices(ThinChoice t, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t slices);

// Whether t's slices (t.slices > 1) are added by its own launch's last blocks (gemm_thin.cuh,
// thin_last_block_sum / thin_wk_sum_slices) rather than by thin_sum, a second launch: for
// thin_dots_wk always (its last block sums in a tree), else where each thread of such a block has
// at most kThinFusedMaxLoads parts to add in turn (s: the short side) and the product is short
// (its estimate at most tile_choice.cpp's kThinFusedMaxS: past it thin_sum's launch, overlapping
// the kernel's end, measured faster).
inline constexpr std::int64_t kThinFusedMaxLoads = 16;
bool thin_sum_fused(const ThinChoice& t, std::int64_t s);

// A split thin product (not thin_dots_wk) of at most kThinClusterSlices slices runs as clusters of
// a row of blocks' slices where the GPU has clusters (sm_90) and room for all of them at once: the
// parts meet in shared memory (gemm_thin.cuh, thin_cluster_sum), ahead of thin_sum_fused's and
// thin_sum's ways. Measured on an H100 (session 46, docs/cuda.md "Thin slices summed in a cluster").
inline constexpr int kThinClusterSlices = 3;

// other_estimate_s: the time of the plan the thin kernels would replace (the tiles', the short-k
// kernel's or the resident one's estimate, whichever the backend takes), which `use` compares with.
ThinChoice choose_thin(std::int64_t m, std::int64_t n, std::int64_t k, bool a_col, bool b_col, int sms,
                       double other_estimate_s);

// Short inner dimension (kernels/gemm_short_k.cuh): k at most kShortKMax (gemm_tiles.h) and no
// thin kernel. Such a product writes m x n results for at most 32 multiply-adds each, so its time
// is bytes (c's, and the long operand's) at memory speed plus a launch; the tile model counts
// flops only, which for k = 1-32 is a small part of what the tiles take. `use`: the short-k
// estimate beats the tiles' estimate with that bytes floor added (the tiles write c too).
// ct: the kernel's threads across a block's columns (4: 16 columns, for n <= 16; else 32: 128);
// rt: rows of c a thread (4, or 2 with 32 threads across where that idles fewer of a block's rows).
struct ShortKChoice {
  bool use = false;
  int ct = 0;
  int rt = 4;
  double estimate_s = 0.0;
};
ShortKChoice choose_short_k(std::int64_t m, std::int64_t n, std::int64_t k, double tile_estimate_s);

// The resident kernels (kernels/gemm_resident.cuh): k at most kResidentMaxK (256) and a side of c
// at most kResidentMax (64), the other side long: out (R x S) = L (R x k) . Sh (k x S) with the
// short operand Sh in shared memory and L streamed in tiles of 128 rows in chunks of 64 k (or, at
// most 32 columns, 256 rows in chunks of 32) by a persistent grid of at most kResidentBlocksPerSm
// blocks an SM. Its time: a start plus L's and c's bytes at a streaming rate, or its multiply-adds
// (the form's 64 or 32 columns and k rounded up to 4, whatever S is) at its rate on the SMs the
// grid occupies, whichever is longer. `use`: L = a row-major (resident_f32_lk writing c's rows;
// the other view and kernel measured no faster than the tiles: tile_choice.cpp), two blocks an
// SM, and that beats `other_s` (the tiles' estimate with the bytes floor that choose_short_k adds,
// or the short-k kernel's).
inline constexpr std::int64_t kResidentBlocksPerSm = 2;
// ... as many as fit an SM's 228 KiB of shared memory (1 KiB of it reserved a block), at most that:
// for 64 columns two up to k = 128, one past it; for 32, two (gemm_tiles.h, resident_smem_bytes).
inline constexpr std::int64_t resident_blocks_per_sm(int k, int sc = kResidentMax) {
  return std::min<std::int64_t>(kResidentBlocksPerSm, (228 << 10) / (resident_smem_bytes(true, k, sc) + (1 << 10)));
}
struct ResidentChoice {
  bool possible = false;  // k at most kResidentMaxK and a side of c at most kResidentMax
  bool use = false;
  bool few_rows = false;  // L = b^T, out = c^T (else L = a, out = c)
  bool lk = false;        // L's k contiguous: resident_f32_lk (else _lr)
  int sc = kResidentMax;  // the form's columns: 64, or 32 (_s32) where S is at most 32
  std::int64_t blocks = 0;
  double estimate_s = 0.0;
};
// cols: the form's columns (64 or 32; 0: 32 where S is at most 32, else 64). other_is_tiles:
// other_s is the tiles' estimate (taken against with kResidentMargin), not the short-k kernel's.
ResidentChoice choose_resident(std::int64_t m, std::int64_t n, std::int64_t k, bool a_col, bool b_col, int sms,
                               double other_s, int cols = 0, bool other_is_tiles = true);
// The tiles' estimate with a floor of their bytes at the tiles' streaming rate (what choose_short_k
// compares with; the tile model counts flops only).
double tiles_with_bytes_s(std::int64_t m, std::int64_t n, std::int64_t k, double tile_estimate_s);

// A float32 product's plan: its tiles, or the family that runs it instead (at most one of thin,
// short_k and resident has `use`). The families are weighed in one order: the tiles, the short-k
// kernel or the resident one, whichever is estimated fastest; then the thin kernels against that
// (not against the tiles alone: (65536 x 16) @ (16 x 4), column-major, went thin at 10.6 us where
// the short-k kernel takes 4.5; H100, session 51).
struct F32Plan {
  TileChoice tile;
  ThinChoice thin;
  ShortKChoice short_k;
  ResidentChoice resident;
};
// What a caller imposes on the families (the backend's PORTMAT_CUDA_ knobs: measurements, tests).
// thin, short_k, resident: -1 the model decides, 0 never, 1 wherever the family can run.
struct FamilyForce {
  int thin = -1, short_k = -1, resident = -1;
  int resident_cols = 0;           // the resident form's columns (choose_resident's cols)
  bool thin_wk = true;             // false: thin_dots where the model takes thin_dots_wk
  std::int64_t thin_slices = 0;    // > 0: k in about this many slices (with_thin_slices)
};
// m x k @ k x n (a_col, b_col: column-major operands) on `sms` SMs, given the tiles' choice (the
// model's, or what a knob forced; choose_f32_tile).
F32Plan choose_f32_plan(std::int64_t m, std::int64_t n, std::int64_t k, bool a_col, bool b_col, int sms,
                        const TileChoice& tile, const FamilyForce& force = {});

// The cluster rooms of 64x64c that an H100's driver reports (cuOccupancyMaxActiveClusters, session
// 43): the driver's answer where there is no GPU to ask (the C++ tests,
// bench/diagnostics/cuda_plan_probe.cpp).
std::int64_t h100_cluster_room(const GemmTile& tile, int slices, bool spread);

}  // namespace portmat::cuda
