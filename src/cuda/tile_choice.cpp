// The float32 tile model (tile_choice.hpp says what it estimates and why).
#include "cuda/tile_choice.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace portmat::cuda {

namespace {

// A tile shape the model weighs: its data-parallel kernel, its stream-K partner (or none), and
// the rate one SM reaches on it. H200, device-resident, 2026-12-01 (docs/cuda.md, "Tiles for mid
// sizes and thin sides"): 128x256 on _ws 51.2 TFLOP/s over 132 SMs (_fp 50.2); 64x128_fp 0.265
// TFLOP/s per SM, with one block on every SM at n = 1024 as with four in turn at 2048; 128x64_fp
// 0.26; 64x64 about 0.2 with several blocks an SM, 0.15-0.17 alone (n = 256 and 512: 13.9 and 25.1 us).
struct Candidate {
  const GemmTile* dp;
  const GemmTile* sk;
  double flops_per_sm;
  const GemmTile* split = nullptr;    // its batched kernel, for split-K
  const GemmTile* cluster = nullptr;  // its one-launch split-K kernel (sm_90 clusters)
  // Split-K's long slices (at least kSplitLongSlice deep) where an SM runs two or more of them at
  // once (0: flops_per_sm). 64x64b: a block alone on its SM keeps too few copies in flight to
  // stream a long slice. (64 x 65536) @ (65536 x 64): 132 slices of 512 (one an SM) 29.6 us, 264
  // of 256 (two) 26.1, 528 of 128 26.0; (32 x 65536) @ (65536 x 32) 29.8, 25.2, 25.5; (64 x
  // 131072) @ (131072 x 64) 47.9, 43.3, 43.7 (H200, session 32, split_sum in runs): 200 GFLOP/s an
  // SM against 170 alone, as the 64x64 rates above. Shorter slices were not measured this way.
  double split_shared_flops_per_sm = 0.0;
  // Its data-parallel grid's rate over a short run where SMs run as many of its blocks at once as
  // fit (min_blocks; 0: flops_per_sm): 64x64 at 4 an SM (H200, session 39, queued, us, with k =
  // 64, 128, 256: (64 x 64) @ (64 x 65536) 20.4, (65536 x 128) @ (128 x 64) 40.7, (64 x 128) @
  // (128 x 65536) 37.0, (65536 x 256) @ (256 x 64) 71.1, (64 x 256) @ (256 x 65536) 67.0: 199-243
  // GFLOP/s an SM, rising with k; (32768 x 256) @ (256 x 64), 512 tiles, 38.9: 209), where 2 an SM
  // ran at 158-190 ((16384 x 128) @ (128 x 64) 12.9, (16384 x 256) @ (256 x 64) 22.3).
  double crowded_flops_per_sm = 0.0;
};

// A stream-K block's cost beyond its share of the work: its pipeline's start (two slabs at its
// SM's rate) and, per part of a split tile, a hand-over to the next block in k order (flag, fence,
// one red.global.add of the tile), about 1 us plus 0.11 ns per element of the tile. Fitted to
// every-tile-shared runs on the H200: a 64x64 result shared by 396 blocks of 128x64_sk took
// 750 us (1.9 us a hand-over), by 132 of _wsk 600 us (4.5 us); the costs beyond the work at
// n = 768-1536 (8-24 us) and at (4096 x 4096) @ (4096 x 64) (24 us) follow from them.
constexpr double kHandOverS = 1.0e-6, kHandOverPerElementS = 1.1e-10, kStartSlabs = 2.0;
// The 64-wide tiles' every-tile-shared grids ran 7-9.5 us over their estimates at n = 640 and 768
// (29.6-31.8 and 41.6-41.9 us against 22.6 and 32.3), where split-K measured 22.1-24.6 and
// 32.6-34.4: that much is added to them (session 14).
constexpr double kSmallShareS = 9.5e-6;
// Split-K (TileChoice::split): p slices of k, each a stack member of the tile's batched kernel,
// then a second launch (split_sum) that reads every part and writes c. Beyond the slices' work
// that costs about 6 us (the second launch's gap and start, the first's extra blocks) plus the
// parts' bytes at 5 TB/s (they are still in L2): fitted on the H200 (session 14) to 336 split
// runs from n = 256 to 1024 and the suite's thin products, with 11-12% mean (log) error. Since
// launches overlap (programmatic dependent launches, session 43) the second launch costs less: on
// an H100 the split products of estimates under 15 us ran a median 3.2 us under the estimate
// (session 50), and 3 us is what the choice among all the families fitted best (session 51,
// kTileStartS).
// Slice counts tried: every p up to 16, then steps up to three blocks an SM.
constexpr double kSplitSumS = 3.0e-6, kSplitSumBytesPerS = 5.0e12;
constexpr std::int64_t kSplitParts[] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 24, 32, 48, 64, 96, 132,
                                        198, 264, 396};
// Split-K in one launch (the cluster kernels, sm_90): the p slices of a tile are a cluster whose
// blocks sum their parts through each other's shared memory, so the second launch and the parts'
// trip through global memory go; what it costs instead: two cluster barriers and the sum, each
// block writing its part into shared memory and reading a tile's worth of the cluster's. Fitted
// on the H200 (session 21, cuda_split_sweep.py; beyond the slices' work at the rates above):
// 1.8-4.8 us at n = 256-512, so 2.5 us, plus the tile's bytes at 100 GB/s a block. A cluster's
// blocks run on one GPC (a group of about 16 SMs) at once, so fewer clusters than blocks / p fit
// on the GPU (ClusterRoom): clusters beyond those run as further waves. 2 us since session 51
// (kTileStartS): the cluster splits of small estimates ran a median 1.1 us under them on an H100.
constexpr double kClusterSumS = 2.0e-6, kClusterSumBytesPerS = 100e9;
// Sharing must win by this factor: where the model cannot tell them apart (n = 2048: one wave of
// 128x256 tiles, 0.99x cuBLAS data-parallel, 0.97x shared) the simpler grid stays.
constexpr double kShareMargin = 1.03;
// Candidate::split_shared_flops_per_sm applies to slices at least this deep.
constexpr std::int64_t kSplitLongSlice = 256;
// Candidate::crowded_flops_per_sm applies to split-K's slices (two to min_blocks of them on an SM)
// at least this deep; before, they counted as turns at the rate of a block alone. H100, session 44
// (cuda_vs_cublas.py, the 13 of 3000 shapes, squares and random ones, whose choice this moves,
// all to 64x64b; the old choice forced and the new one, knobs set in both, us, two rounds): 576^3
// 22.4-22.5 / 18.9-19.5, (147 x 2996) @ (2996 x 149) 26.1-26.5 / 18.2-21.5, (45 x 8644) @ (8644 x
// 265) 30.0-30.5 / 23.3-24.2, (156 x 19392) @ (19392 x 36) 30.3-32.8 / 23.6-25.0, (659 x 4507) @
// (4507 x 24) 24.3-28.0 / 19.2-21.5, the other eight 1-21% faster. (Those runs carry a few us
// of host time for the knobs: (298 x 1397) @ (1397 x 280) took 18.0-18.2 us on its old choice
// without them, 18.8-20.1 on the new with them.) In the same sweep 64x64b's split runs from n =
// 384 to 704 took their work at 215 GFLOP/s an SM (170 alone) plus 2.4-5 us. Shorter slices are
// mostly their pipeline's start: (384 x 3072) @ (3072 x 48) in 64 slices of 48 lost to 128x64_slb
// in 32 (session 35: 17.2 against 14.0 us). A product of one tile keeps the long slices' rate,
// split_shared_flops_per_sm: each slice streams its own part of a and b, which no other tile's
// blocks share through L2, and there the crowded rate's choice lost ((64 x 65536) @ (65536 x 64)
// in 396 slices 25.4-25.9 us against 24.6 in 264; (32 x 65536) @ (65536 x 32) 24.2-24.6 against
// 23.5).
constexpr std::int64_t kCrowdedSliceMin = 128;
// A data-parallel tile's run of at most this many 16-deep slabs (k <= 256) is short: its pipeline's
// start and its stores are a fair part of it, and how its blocks share the SMs shows (below).
constexpr std::int64_t kShortRunSlabs = 16;
// A short run's last wave of co-resident blocks, where it has at most one block an SM, costs this
// many turns rather than one. H200, session 39 (cuda_vs_cublas.py, PORTMAT_CUDA_TILE=128x64_fp or
// 64x128_fp, queued, us): 512 tiles on 132 SMs of 3 slots each leave 116 for a second wave, which
// took 2.6, 1.9, 2.8 and 2.1 turns of the first wave's rate ((65536 x 128) @ (128 x 64) 44.8 where
// four turns are 32.3, (65536 x 256) @ (256 x 64) 78.5 for 64.5, (64 x 64) @ (64 x 65536) 23.1 for
// 15.8, (64 x 128) @ (128 x 65536) 40.0 for 31.7): a short run alone on an SM hides none of its
// start and end (128 tiles of 128x64_fp, one an SM: (16384 x 128) @ (128 x 64) 14.4 for 8.1), and
// the blocks need not spread one an SM. Within one wave the turns hold ((32768 x 256) @ (256 x 64)
// 33.9 for 32.3, (8192 x 256) @ (256 x 256) 31.0 for 31.7), and at long k too: 64x128_fp's 512
// tiles at n = 2048 ran at the rate of its one wave at n = 1024 (docs/cuda.md).
constexpr double kSparseTailTurns = 2.3;
// The 128x256 tile (one block an SM) on a short run: each turn costs this much beyond its
// multiply-adds at the tile's rate (its pipeline's start and the 128 KiB of c it stores, which
// no other block on the SM overlaps). H100, session 39, PORTMAT_CUDA_TILE=128x256_wsk, data-
// parallel grids, us: (6144 x 96) @ (96 x 640) 46.3 in 2 turns of 16.2, (6144 x 128) @ (128 x
// 640) 58.6 in 2 of 21.6, (16384 x 64) @ (64 x 640) 54.2 in 3 of 10.8, (8192 x 256) @ (256 x 256)
// 47.8 in 1 of 43.2: 7.0, 7.7, 7.3 and 4.6 us a turn (the first three ran 1.3-1.6x the 64x64
// tile's time).
constexpr double kBigShortRunTurnS = 7.0e-6;
// A data-parallel grid's launch and the wait for its last block, before and after its turns. The
// turns alone left the tiles' small products (estimates under 15 us) a median 1.7 us short of
// what an H100 measured (session 50: 355 products, queued; a 64x64 tile with k = 16 took 2.9 us
// for 0.8), while the split-K estimates, which carry a start and a sum, ran over: so the tiles won
// where split-K, the short-k kernel or the thin kernels were faster. With this start, the thin
// kernels' kThinStartS at the same 1.7 us, kSplitSumS 6 -> 3 us, kClusterSumS 2.5 -> 2 us and the
// short-k kernel's start and k term (kShortKStartS), the choice of 1648 products whose plan any
// of 577 such models moves (all of them timed in every plan, two runs on an H100, session 51,
// bench/diagnostics/cuda_plans_ab.py; docs/cuda.md "A start for every family") took 1.031x the
// fastest plan's time (geometric mean, queued; 1.054x as graph replays) where the old model took
// 1.073x (1.113x). Checked on products the fit never saw: of 6000 drawn at random (sides 1-16384,
// every layout), 2037 change plan; timed old against new, the new plan took 1.031x the faster of
// the two where the old took 1.119x (graph replays 1.048x and 1.170x), 10055 us in all against
// 10870; 612 ran over 10% faster, 200 over 10% slower.
constexpr double kTileStartS = 1.7e-6;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The bytes a float32 (m x k) @ (k x n) reads once and writes once.
double f32_bytes(std::int64_t m, std::int64_t n, std::int64_t k) {
  return 4.0 * (static_cast<double>(m) * k + static_cast<double>(k) * n + static_cast<double>(m) * n);
}

}  // namespace

// 64x128_sl and 128x64_sl (sliced k: 8 warps on the tile; its registers allow one block an SM; the
// second measured in session 35: docs/cuda.md, "Sliced k on the 128x64 tile"). 64x128_sl: 57.1 us
// at n = 1024 on the H200 (128 tiles, one block on each SM; session 26) against 61.4 for
// 64x128_fp, so 290 GFLOP/s per SM. Weighed only where its grid is at most one block an SM, data-
// parallel or split (_slb): past that it runs in turns while the 4-warp tiles share SMs, which the
// turns of the estimate do not see. Measured (H200, 2026-12-03, against the model without it):
// n = 512 in 4 slices 14.6 us against 15.6, (64 x 4096) @ (4096 x 4096) 61.1 against 64.1,
// (64 x 16384) @ (16384 x 256) 25.5 against 28.2; with more blocks than SMs it lost: n = 768 in 7
// slices (504 blocks) 43.1 against 34.4, (8192 x 256) @ (256 x 256) (256 tiles) 33.8 against 30.8.
constexpr double kSlicedFlopsPerSm = 290e9;

TileChoice choose_f32_tile(std::int64_t m, std::int64_t n, std::int64_t k, int sms, bool warp_specialized,
                           bool whole, const ClusterRoom& room, int sliced) {
  const Candidate candidates[] = {
      {warp_specialized ? &kF32_128x256_ws : &kF32_128x256_fp, warp_specialized ? &kF32_128x256_wsk : &kF32_128x256_sk,
       warp_specialized ? 388e9 : 380e9},
      {&kF32_64x128_fp, &kF32_64x128_sk, 265e9, &kF32_64x128_fpb},
      {&kF32_128x64_fp, &kF32_128x64_sk, 260e9, &kF32_128x64_fpb},
      {&kF32_64x64, nullptr, 170e9, &kF32_64x64b, &kF32_64x64c, 200e9, 215e9},
      {&kF32_64x128_sl, nullptr, kSlicedFlopsPerSm, sliced >= 2 ? &kF32_64x128_slb : nullptr},
      {&kF32_128x64_sl, nullptr, kSlicedFlopsPerSm, sliced >= 2 ? &kF32_128x64_slb : nullptr}};
  const std::int64_t s = std::max(1, sms);
  const std::int64_t k_tiles = std::max<std::int64_t>(1, ceil_div(k, 16));
  TileChoice best{nullptr, false, 0, 0.0};
  std::int64_t best_grid = 0;  // the blocks of best's grid(s)
  auto consider = [&](const GemmTile* tile, bool share_all, std::int64_t blocks, double t, std::int64_t split,
                      std::int64_t grid) {
    if (!best.tile || t < best.estimate_s) best = {tile, share_all, blocks, t, split}, best_grid = grid;
  };
  for (const Candidate& c : candidates) {
    const GemmTile& t = *c.dp;
    const bool big = &c == &candidates[0];
    const std::int64_t tiles = ceil_div(m, t.bm) * ceil_div(n, t.bn);
    // The sliced tiles (last in the list): only grids of at most one block an SM.
    const bool one_block_an_sm = t.k_groups > 1;
    if (one_block_an_sm && (sliced < 1 || tiles > s)) continue;
    // Their split-K only where the best of the others so far is a grid of at most one block an SM
    // too: two or more 4-warp blocks an SM hide their stalls as the sliced tile's 8 warps do, and
    // keep more copies in flight. Against such grids 128x64_slb lost (H200, session 35, us: (192 x
    // 65536) @ (65536 x 48) 84.3 in 64 slices against 60.9 for 64x64b in 132 (396 blocks), (3072 x
    // 1536) @ (1536 x 48) 29.7 in 5 against 28.7 for 128x64_fpb in 11 (264), (768 x 16384) @ (16384
    // x 32) 70.0 in 20 against 66.5 in 64 (384)); against one block an SM it won ((4096 x 4096) @
    // (4096 x 64) in 4 slices 65.1 against 68.1 for 128x64_fpb, (8192 x 512) @ (512 x 64) in 2 22.8
    // against 24.2 for 64x64, (384 x 3072) @ (3072 x 48) in 32 14.0 against 17.2).
    const bool sliced_split_here = !one_block_an_sm || best_grid <= s;
    const double tile_s = 2.0 * t.bm * t.bn * static_cast<double>(std::max<std::int64_t>(k, 1)) / c.flops_per_sm;
    const double start_s = kStartSlabs * 2.0 * t.bm * t.bn * 16.0 / c.flops_per_sm;
    const double hand_over_s = kHandOverS + kHandOverPerElementS * t.bm * t.bn;
    const bool short_run = k_tiles <= kShortRunSlabs;
    // Data-parallel: the busiest SM runs ceil(tiles / SMs) tiles in turn (128x256: its stream-K
    // tile, which launch() runs data-parallel below a wave, a turn of a short run costing
    // kBigShortRunTurnS more); for a short run of a tile that shares its SM, a sparse last wave
    // costs kSparseTailTurns turns, and where the busiest SM holds two blocks or more, the SMs run
    // at crowded_flops_per_sm. (Until session 56: where it held min_blocks. H200, session 54: 64x64
    // ran 214 GFLOP/s a turn with two blocks on most SMs, against the 170 the model gave it below
    // four. Out of sample, an H100 on 2026-12-08: the 46 of 6000 random products (seed 54) this
    // moved, all from a 128x64 or 64x128 tile to 64x64, took 0.730x their old plans' time under
    // graph replay, every one faster. docs/cuda.md, "A start for every family".)
    double turns = static_cast<double>(ceil_div(tiles, s));
    double dp_tile_s = big && short_run ? tile_s + kBigShortRunTurnS : tile_s;
    if (!big && short_run && t.min_blocks > 1) {
      const std::int64_t wave = s * t.min_blocks, rest = tiles % wave;
      if (tiles > wave && rest > 0 && rest <= s)
        turns = static_cast<double>(tiles / wave * t.min_blocks) + kSparseTailTurns;
      if (c.crowded_flops_per_sm > 0 && ceil_div(tiles, s) >= 2)
        dp_tile_s = tile_s * c.flops_per_sm / c.crowded_flops_per_sm;
    }
    const double data_parallel_s = kTileStartS + turns * dp_tile_s;
    // launch()'s hybrid grid: whole waves, then the rest shared, where the rest gives each of the
    // SMs' blocks kMinSkSlabs slabs (the warp-specialized _wsk shares no more than the rest);
    // otherwise launch() runs it data-parallel, as estimated above.
    if (big && tiles >= s) {
      const bool hybrid = !warp_specialized || (tiles % s) * k_tiles >= s * kMinSkSlabs;
      consider(c.sk, false, 0, hybrid ? static_cast<double>(tiles) * tile_s / s + start_s + hand_over_s : data_parallel_s,
               0, tiles);
      continue;
    }
    consider(big ? c.sk : c.dp, false, 0, data_parallel_s, 0, tiles);
    if (!whole) continue;
    // Split k into p slices (the tile's batched kernel over the slices, then their sum): the
    // busiest SM runs its share of the slices (kc slabs each), plus a pipeline start and the sum.
    if (c.split && sliced_split_here)
      for (const std::int64_t p : kSplitParts) {
        if (p > k_tiles) break;
        const std::int64_t kc = split_depth(k, p), parts = ceil_div(k, kc);
        if (parts < 2 || kSplitMaxBytes < 4.0 * m * n * parts) continue;
        // An SM runs up to min_blocks slices at once; past that the grid takes whole extra waves
        // (H200, n = 768: 5 slices in 360 blocks 32.6 us, 6 in 432 43.0, 8 in 576 40.5).
        const std::int64_t blocks = tiles * parts, per_sm = ceil_div(blocks, s), mb = c.split->min_blocks;
        const bool shared = per_sm >= 2 && kc >= kSplitLongSlice && c.split_shared_flops_per_sm > 0;
        // Slices that share their SMs (at most min_blocks an SM, one wave) of a product of several
        // tiles run at the tile's crowded rate where they are at least kCrowdedSliceMin deep, as its
        // data-parallel blocks do.
        const bool crowded = tiles >= 2 && per_sm >= 2 && per_sm <= mb && kc >= kCrowdedSliceMin && !shared &&
                             c.crowded_flops_per_sm > 0;
        const double rate = shared ? c.split_shared_flops_per_sm : crowded ? c.crowded_flops_per_sm : c.flops_per_sm;
        const double slice_s = 2.0 * t.bm * t.bn * static_cast<double>(kc) / rate;
        // A sliced slice of at most one of its 32-deep slabs (or one and a half) gives the ring
        // nothing to overlap, and at 16 leaves a k group idle: (192 x 1024) @ (1024 x 32) 128x64_slb
        // in 64 slices of 16 10.8 us against 8.8 for 64x64b in 32, (128 x 3072) @ (3072 x 48) in 96
        // of 32 10.8 against 10.0 for 64x64b in 64.
        if (one_block_an_sm && (blocks > s || kc < 2 * t.bk)) continue;
        const std::int64_t turns = per_sm <= mb ? per_sm : ceil_div(blocks, s * mb) * mb;
        consider(c.split, false, 0,
                 kShareMargin * (static_cast<double>(turns) * slice_s + start_s + kSplitSumS +
                                 4.0 * m * n * (parts + 1) / kSplitSumBytesPerS),
                 p, blocks);
      }
    // The same slices as one launch of a cluster kernel (at most kClusterMaxSlices of them): the
    // slices' work as above, the sum in the cluster's shared memory instead of the second launch.
    if (room && c.cluster)
      for (std::int64_t p = 2; p <= kClusterMaxSlices && p <= k_tiles; ++p) {
        const std::int64_t kc = split_depth(k, p), parts = ceil_div(k, kc);
        const std::int64_t active = parts < 2 ? 0 : room(*c.cluster, static_cast<int>(parts), false);
        if (active <= 0) continue;
        const double slice_s = 2.0 * t.bm * t.bn * static_cast<double>(kc) / c.flops_per_sm;
        // Waves of `active` clusters. In each, clusters that fit one block an SM spread over the
        // SMs; more are packed, min_blocks blocks on an SM (gemm_tiles.h: why 64x64 is the only
        // cluster kernel). What fits one an SM is room's spread, not SMs / slices: a cluster's
        // blocks share a GPC, and the H100's 132 SMs hold 66, 39, 30, 22, 17, 15 and 15 clusters
        // of 2-8 (its driver, session 43). There n = 320 (25 tiles) in 5 slices took 9.3 us, 4
        // slices 7.6; n = 256 (16 tiles) in 8 slices 7.2, in 6 6.7.
        const std::int64_t waves = ceil_div(tiles, active), in_wave = std::min(tiles, active);
        const std::int64_t spread = room(*c.cluster, static_cast<int>(parts), true);
        const std::int64_t turns = waves * (in_wave <= spread ? 1 : c.cluster->min_blocks);
        consider(c.cluster, false, 0,
                 kShareMargin * (static_cast<double>(turns) * slice_s + start_s + kClusterSumS +
                                 4.0 * t.bm * t.bn / kClusterSumBytesPerS),
                 p, tiles * parts);
      }
    if (!c.sk) continue;
    // Every tile shared by w blocks (at most as many as fit on the GPU at once, each with at least
    // kMinSkSlabs slabs): the work spread over min(w, SMs) SMs, plus the start and, per block a
    // tile is split into, a hand-over.
    for (std::int64_t w = s * t.min_blocks; w >= 2; w = w > s ? s : w / 2) {
      if (tiles * k_tiles < w * kMinSkSlabs) continue;
      // A short run of the 4-warp tiles only where no block's run crosses from one tile into the
      // next (w >= tiles): each crossing is a pipeline start and a hand-over that the estimate
      // leaves out, and such grids lost to the data-parallel ones wherever measured (H200, session
      // 39, us, every tile shared / 64x64: 128x64_sk in 396 blocks, (65536 x 128) @ (128 x 64) 62.4
      // / 40.7, (65536 x 256) @ (256 x 64) 91.0 / 71.1; 64x128_sk, (64 x 256) @ (256 x 65536)
      // 78.9 / 67.0).
      if (!big && short_run && w < tiles) continue;
      const double parts = std::max(1.0, static_cast<double>(w) / static_cast<double>(tiles));
      consider(c.sk, true, w,
               kShareMargin * (static_cast<double>(tiles) * tile_s / static_cast<double>(std::min(w, s)) + start_s +
                               parts * hand_over_s + (big ? 0.0 : kSmallShareS)),
               0, w);
    }
  }
  return best;
}

namespace {

// The thin kernels' costs, H200 (session 15, bench/diagnostics/cuda_thin_sweep.py):
//  - large products stream L at 3.0 TB/s with one short column, 2.8 with two, 2.6 with four,
//    2.1-2.4 with eight and 1.3-1.9 with sixteen (more multiply-adds and shared-memory loads per
//    element): kThinBytesPerS by the padded short side;
//  - a grid of few blocks pulls about kThinBlockBytesPerS a block (its loads in flight, 32-64 KB,
//    over a microsecond of latency; n = 256: 4 blocks, 0.26 MB in 1.1-1.4 us beyond the start) and
//    does at most kThinBlockFmaPerS multiply-adds a block (16 x 256 @ 256 x 256: 1 M of them on 2
//    blocks in 8 us beyond the start, the 0.26 MB read in 1.6 us with one row of a). Blocks of the
//    wider kernels are slower by the same factor as their streams, and all of them where their
//    lanes or warps have nothing to read: thin_dots' warp reads 128 k of a row at a time (k = 16
//    left 7 of 8 lanes idle: 45 us where the tiles took 11) and each warp owns a few rows;
//    thin_axpy's warp reads 128 r;
//  - a launch costs kThinStartS before any data; a split grid adds its sum (the parts at 5 TB/s,
//    and kThinSumS for thin_sum's launch or kThinFusedSumS where the last block of each row of
//    blocks adds the slices in the same launch: thin_sum_fused). Products under kThinSmallBytes are
//    not split: there the second launch dominated (256 x 256 @ 256 x 1: 5.1 us in one slice, 8.4-8.6 in 2-4; 1 x 256 @
//    256 x 256: 6.5 against 8.8-11). Past it the split that gives the grid a block or two an SM was
//    faster than the model of one slice said (4096 x 4096 @ 4096 x 4: 23.7-24.8 us in 2-4 slices,
//    26.8 in one; 1024 x 1024 @ 1024 x 16: 9.9 in 4, 13.5 in one), so it stands. Except for
//    thin_dots_wk (a dot product, a few rows by a few columns): its one row of blocks is one block,
//    which the rule left to read all of a (1 x 65536) @ (65536 x 1) alone, while its slices are
//    summed in the same launch (thin_wk_sum_slices) (session 51).
// Refitted on an H100 (session 49, 2026-12-07; bench/diagnostics/cuda_thin_slices.py: 167 thin
// products, both layouts, each at 1-64 forced slices, queued; docs/cuda.md): with the fused sum
// at 1 us and 60 GB/s a block the model's count was 1.049x the best count's time (geometric
// mean), 15 products over 1.25x (a short k cut into 4 slices: (8192 x 256) @ (256 x 4), a
// column-major a, 9.5 us against 4.9 in one; a long k in too few: (8 x 1024) @ (1024 x 1024) 10.7
// in 4 against 6.9 in 16). With kThinFusedSumS 2 us (what session 45 measured for the fused sum)
// and kThinBlockBytesPerS 40 GB/s: 1.029x, 7 over 1.25x.
// kThinStartS, where the thin kernels stand against the others (choose_thin's `use`; a start common
// to every slice count moves no count): 4 us (session 15's, when launches were slower) put the thin
// products of that sweep at 1.5x their measured time on average, the small ones (estimates under 8
// us) at 1.7x; 1-1.5 us fits them (mean log error -0.09 and +0.03 at 1 us, -0.12 and -0.07 at 1.5).
// And where the choice is close: an H100 timed 927 products (the thin kernels forced on and off;
// 384 of them drawn at random from a grid of R = 16-65536, S = 1-16, k = 16-65536, every layout)
// and the choice under 4, 3, 2 and 1.5 us took 1.084, 1.071, 1.049 and 1.044x the faster one's time
// (geometric mean; the random 384: 1.038, 1.037, 1.034, 1.031); e.g. (1 x 256) @ (256 x 256) 4.6 us
// on the cluster split, 3.6 thin (session 50, docs/cuda.md "Thin against the others"). Session 51
// gave the tiles a start of their own (kTileStartS, 1.7 us) and this one the same: both are a
// launch and its last block's wait.
// kThinAxpyEndS: thin_axpy's blocks end by adding their 8 warps' sums, 128 x SC each, pairwise
// through shared memory (three rounds and their barriers), which the rates above do not see. In
// the same 927 products, what the small ones (estimates under 15 us) took beyond the estimate grew
// with the short columns for thin_axpy (medians, us: 2.3, 2.5, 2.3, 3.1, 4.4 for SC = 1, 2, 4, 8,
// 16) and not for thin_dots (1.2-2.2): so 0.2 us a short column for each wave of blocks. With it
// the choice took 1.035x the faster time (the random 384: 1.023x), where thin_axpy with 8-16
// columns at short k had lost to the tiles by up to 2.4x ((65536 x 16) @ (16 x 4), column-major:
// 10.6 us against 4.5). It moves none of the sweep's slice counts.
constexpr double kThinBytesPerS[] = {3.0e12, 2.8e12, 2.6e12, 2.2e12, 1.6e12};  // sc = 1, 2, 4, 8, 16
constexpr double kThinBlockBytesPerS = 40e9, kThinBlockFmaPerS = 60e9;
constexpr double kThinStartS = 1.7e-6, kThinSumS = 3.0e-6, kThinSumBytesPerS = 5.0e12, kThinAxpyEndS = 0.2e-6;
constexpr double kThinFusedSumS = 2.0e-6;  // the last blocks reading every slice's part, and the wait for them
constexpr double kThinFusedMaxS = 7.0e-6;  // past this estimate thin_sum's launch adds the slices (thin_sum_fused)
constexpr double kThinSmallBytes = 1 << 20;
constexpr double kThinShortWeight = 0.5;  // a byte of the short operand (L2) against one of L (memory)
constexpr std::int64_t kThinBlocksPerSm = 2;  // __launch_bounds__(256, 2)
// A thin_dots slice takes at least a chunk (kThinChunk, 256 k: one pass of the short operand
// through shared memory, its barriers, and the warps' closing shuffles): shallower slices fill
// more of the GPU's slots but pay a chunk's fixed costs for half of its work or less, which the
// rate model does not see. So where the model takes shallower slices, k goes into slices of one
// chunk instead (fewer of them). H100, session 46 (cuda_vs_cublas.py, graph replay, us; the
// model's 8 slices of 128 k -> 4 of 256): (1024 x 1024) @ (1024 x 16) 9.4 -> 7.6, (1024 x 1024)
// @ (1024 x 8) 6.4 -> 5.3, (1024 x 1024) @ (1024 x 4) 5.4 -> 4.8, (1024 x 1024) @ (1024 x 1) 4.6
// -> 4.4; (512 x 512) @ (512 x 1) 4 slices of 128 -> 2 of 256: 4.3 -> 3.6. thin_axpy's blocks
// close with less (no shuffles) and gained from shallow slices: (8 x 1024) @ (1024 x 1024) 10.6 in
// 4 slices, 7.3 in 8, 7.0 in 16; (1 x 1024) @ (1024 x 1024) 5.9 in 4, 5.3 in 8.
constexpr std::int64_t kThinMinSliceK = 256;
// thin_dots_wk (at most a warp's rows, at most 4 short columns: a dot product) is one block for
// each slice of k, so its time is a block's walk along its slice, not a stream's rate: a start,
// then each k at kThinWkSPerK by the short side (its lanes read the short operand straight into
// registers: thin_short4 in gemm_thin.cuh); a split grid adds its fused sum, the last block's.
// H100, session 51 (bench/diagnostics/cuda_plans_ab.py, 80 products of 1-4 rows by 1-4 columns,
// k = 1000-2^20, forced to 1-256 slices, queued): one block took 2.6 us at k = 1000 and 0.37-0.40
// ns a k more (2^20 k: 393 us); 2 to 256 slices ran about 3 us over their slices' walk, and a few
// ns more a slice (the last block reads every slice's part); the whole GPU's stream bounds it from
// below, the sum overlapping it. So a dot product of 8192 stays one block (4.6 us against 5.4 in 8
// slices) and one of 2^20 is 256 slices (7.1 us; 8.4 before the straight loads). Over those 80
// products the model's choice takes 1.009x the fastest plan timed (geometric mean), where the
// rate model above took 1.127x. Then the short operand was read straight only where its k is
// contiguous, else staged through shared memory: 1.7 us to start (its two barriers a chunk),
// 1.0-1.9 ns a k with 2-4 short columns, 5.2 us to sum; session 52 reads it straight in every
// layout (by whole rows of 2 or 4 floats, 16 bytes a load, where it is such rows; else a value a
// load where k is strided).
// Session 52 (H100, 60 products of 1-4 rows by 1-4 columns, k = 1000-2^20, rr and cc, forced to
// 1, 8, 64 and 256 slices, graph replay): one block's time a k grew with the short side (0.37,
// 0.41, 0.45 ns for 1, 2, 4 columns, k contiguous), with the short operand's k strided (0.46-0.57
// ns, by rows or a value a load), and with L's rows (about 0.02 ns a row). And a split of 2^20 in
// 84-142 slices took 13.5-15 us where 256 took 10.6: fewer blocks than the GPU's slots do not
// stream at its full rate (the rate model below says the same of thin_dots and thin_axpy), so the
// stream bound scales with the slots filled. Over the 60, the default took 1.032x the fastest
// forced plan before and 1.023x with the per-k terms alone (graph replay; the four 2^20 products
// with 6 and 8 results 1.18-1.28x).
constexpr double kThinWkBlockS = 0.9e-6;
constexpr double kThinWkSPerK[] = {0.37e-9, 0.41e-9, 0.45e-9};  // sc = 1, 2, 4; the short operand's k contiguous
constexpr double kThinWkStridedSPerK = 0.50e-9;  // its k strided (rows of 2 or 4 floats, or a value a load)
constexpr double kThinWkRowSPerK = 0.02e-9;       // each row of L beyond the first
constexpr double kThinWkSumS = 3.0e-6, kThinWkSumPartS = 3e-9;  // the fused sum, and each slice's part
constexpr double kThinWkBytesPerS = 3.0e12;       // the GPU's stream under a dot product's slices

}  // namespace

ThinChoice with_thin_slices(ThinChoice t, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t slices) {
  const std::int64_t grain = t.dots ? 128 : 64;
  const std::int64_t parts_max = std::max<std::int64_t>(1, kSplitMaxBytes / (4 * (t.few_rows ? n : m) * t.sc));
  t.kslice = ceil_div(ceil_div(k, std::clamp<std::int64_t>(slices, 1, std::min<std::int64_t>(parts_max, 65535))), grain) *
             grain;
  t.slices = ceil_div(k, t.kslice);
  return t;
}

// H200, session 23 (cuda_vs_cublas.py --shapes suite, PORTMAT_CUDA_THIN_FUSED=0 / 1, us, two
// launches -> fused, with the parts each thread of a last block adds): (1 x 2^20) @ (2^20 x 1)
// 13.2 -> 8.9 (thin_dots_wk's tree); (m x 4096) @ (4096 x 4096) for m = 1, 2, 4: 23.0-24.1 ->
// 21.7-23.5 (8, 8, 16 parts); (4096 x 4096) @ (4096 x n) for n = 4, 8, 16: within 1 us (3, 3, 6);
// but m = 8 and 16: 26.8 -> 27.8 (32) and 35.5 -> 40.0 (64), and (16 x 65536) @ (65536 x 16) 17.0
// -> 24.5 (264): one block adding them in turn is slower than thin_sum's grid.
// Session 52 (H100, since the launches overlap: programmatic dependent launches, session 43;
// bench/diagnostics/cuda_plans_ab.py, PORTMAT_CUDA_THIN_FUSED=0 against the default, 22 thin
// products of 1-16 short rows or columns, us, queued): thin_sum's launch was the faster wherever
// the product took more than a few microseconds, by 0.2-0.9 us at (m x 4096) @ (4096 x 4096) and
// (4096 x 4096) @ (4096 x n), 1.0 at (2048 x 2048) @ (2048 x 4), 1.6 at (1024 x 1024) @ (1024 x
// 16) (estimates 8.3-31 us); the fused sum only where the host's second launch is most of the
// time: (1024 x 1024) @ (1024 x 1) 4.6 against 6.8, (1 x 1024) @ (1024 x 1024) 6.0 against 6.3
// (estimates 5.8-6.0 us). So past kThinFusedMaxS of estimate the slices go to thin_sum. The
// estimate of a split (choose_thin) counts the fused sum either way: thin_sum measured no slower
// there.
namespace {
// Whether the last blocks of t's grid can add its slices (thin_sum_fused without its time rule):
// thin_dots_wk's tree always, else at most kThinFusedMaxLoads parts a thread.
bool thin_last_blocks_can_sum(const ThinChoice& t, std::int64_t s) {
  if (t.slices <= 1) return false;
  if (t.wk) return true;
  return ceil_div(t.rows_per_block * s, 256) * t.slices <= kThinFusedMaxLoads;
}
}  // namespace

bool thin_sum_fused(const ThinChoice& t, std::int64_t s) {
  return thin_last_blocks_can_sum(t, s) && (t.wk || t.estimate_s <= kThinFusedMaxS);
}

ThinChoice choose_thin(std::int64_t m, std::int64_t n, std::int64_t k, bool a_col, bool b_col, int sms,
                       double other_estimate_s) {
  ThinChoice t;
  if (std::min(m, n) > kThinMax || m <= 0 || n <= 0 || k <= 0) return t;
  t.possible = true;
  // The views: few columns (L = a, k contiguous when a is row-major), few rows (L = b^T, k
  // contiguous when b is column-major).
  const bool cols_ok = n <= kThinMax, rows_ok = m <= kThinMax;
  const bool cols_dots = !a_col, rows_dots = b_col;
  if (cols_ok && rows_ok)
    t.few_rows = rows_dots != cols_dots ? rows_dots : n > m;
  else
    t.few_rows = rows_ok;
  t.dots = t.few_rows ? rows_dots : cols_dots;
  const std::int64_t R = t.few_rows ? n : m, S = t.few_rows ? m : n;
  t.sc = S <= 1 ? 1 : S <= 2 ? 2 : S <= 4 ? 4 : S <= 8 ? 8 : 16;
  const int rw = thin_dots_rows_per_warp(t.sc);
  // At most one warp's rows (a dot product, a few rows of a): thin_dots_wk, whose 8 warps share
  // them and split k; in thin_dots 7 of the 8 would idle (a dot product ran at 0.25x cuBLAS).
  t.wk = t.dots && R <= rw && t.sc <= 4;
  t.rows_per_block = t.wk ? rw : t.dots ? 8 * rw : 128;
  const std::int64_t s_count = std::max(1, sms);
  const std::int64_t row_blocks = ceil_div(R, t.rows_per_block);
  // Slices of k until the grid has kThinBlocksPerSm blocks an SM (with_thin_slices: each at least a
  // float4 of every lane, thin_dots' 128 k, or 8 k of every warp, thin_axpy's 64; the parts within
  // split-K's workspace).
  const std::int64_t want = kThinBlocksPerSm * s_count;
  // The share of a block's lanes that have data: thin_dots' lanes along k (which also slows the
  // whole grid: a warp's load then brings a fraction of its 512 bytes) and its warps' rows;
  // thin_axpy's lanes along r.
  const int level = t.sc == 1 ? 0 : t.sc == 2 ? 1 : t.sc == 4 ? 2 : t.sc == 8 ? 3 : 4;
  const std::int64_t chunk = 256;  // k a block takes through shared memory at a time (not _wk)
  const double bytes = f32_bytes(R, S, k);
  // The short operand's k contiguous (ThinArgs::sk = 1: a row-major a of few rows, a column-major b
  // of few columns, or a vector), else thin_dots_wk reads it by rows or a value at a time.
  const bool short_k_contiguous = t.few_rows ? (!a_col || m == 1) : (b_col || n == 1);
  auto estimate = [&](std::int64_t kslice, std::int64_t parts) {
    const double blocks = static_cast<double>(row_blocks * parts);
    const double slots = static_cast<double>(kThinBlocksPerSm * s_count);
    const double turns = std::ceil(blocks / slots);  // waves of blocks, the last as long as a full one
    if (t.wk) {  // one block a slice (one row of blocks): its walk along k, or the GPU's stream
      const double per_k = (short_k_contiguous ? kThinWkSPerK[level] : kThinWkStridedSPerK) +
                           kThinWkRowSPerK * static_cast<double>(R - 1);
      const double walk = kThinWkBlockS + turns * static_cast<double>(std::min(k, kslice)) * per_k;
      const double sum = parts < 2 ? 0.0 : kThinWkSumS + kThinWkSumPartS * static_cast<double>(parts);
      // The stream: fewer blocks than the GPU's slots stream less (as below), so a split that fills
      // them beats one that only reaches the stream's rate on paper.
      const double stream = kThinWkBytesPerS * (0.5 + 0.5 * std::min(1.0, blocks / slots));
      return kThinStartS + std::max(walk + sum, bytes / stream);
    }
    const double lanes = t.dots ? std::min(1.0, static_cast<double>(std::min(k, kslice)) / 128.0)
                                : std::min(1.0, static_cast<double>(R) / 128.0);
    const double rows =
        t.dots ? std::min(1.0, static_cast<double>(R) / static_cast<double>(t.rows_per_block)) : 1.0;
    const double block_rate = kThinBlockBytesPerS * kThinBytesPerS[level] / kThinBytesPerS[0];
    // An SM with one block streams about three quarters of what it does with two (the block's
    // loads in flight): the full rate scaled by how many of the GPU's slots the grid fills.
    const double fill = std::min(1.0, blocks / slots);
    const double rate = lanes * std::min(kThinBytesPerS[level] * (0.5 + 0.5 * fill), blocks * block_rate * rows);
    const double fma_rate = static_cast<double>(std::min<std::int64_t>(row_blocks * parts, kThinBlocksPerSm * s_count)) *
                            kThinBlockFmaPerS * rows;
    // Every block reads the short operand's chunks of its slice (whole chunks, through L2), and a
    // grid past the GPU's slots runs in waves, the last as long as a full one.
    const double chunked = static_cast<double>(ceil_div(std::min(k, kslice), chunk) * chunk);
    const double short_bytes = blocks * chunked * t.sc * 4.0 * kThinShortWeight;
    const double waves = blocks > slots ? turns * slots / blocks : 1.0;
    double sec = kThinStartS + std::max((bytes + short_bytes) * waves / rate, static_cast<double>(R) * k * t.sc / fma_rate);
    if (!t.dots) sec += kThinAxpyEndS * t.sc * turns;
    ThinChoice sliced = t;
    sliced.slices = parts;
    if (parts > 1)  // the sum as fused wherever the last blocks can add it (see thin_sum_fused)
      sec += (thin_last_blocks_can_sum(sliced, S) ? kThinFusedSumS : kThinSumS) +
             4.0 * R * S * (parts + 1) / kThinSumBytesPerS;
    return sec;
  };
  // The slices: the count with the smallest estimate, from one up to what fills the slots (fewer
  // where that is a wave and a half: 4096 x 4096 @ 4096 x 16 ran 41 us in 2 slices, 52 in 3; more
  // than that slowed the dot product, 256 slices of 4096 8.9 us, 512 of 2048 10.7).
  t = with_thin_slices(t, m, n, k, 1);
  t.estimate_s = estimate(t.kslice, t.slices);
  const std::int64_t most = (bytes < kThinSmallBytes && !t.wk) || row_blocks >= want ? 1 : ceil_div(want, row_blocks);
  for (std::int64_t p = 2; p <= most; ++p) {
    const ThinChoice c = with_thin_slices(t, m, n, k, p);
    if (c.slices == t.slices) continue;
    if (const double e = estimate(c.kslice, c.slices); e < t.estimate_s) {
      t = c;
      t.estimate_s = e;
    }
  }
  if (t.dots && t.slices > 1 && t.kslice < kThinMinSliceK) {  // the same k in slices of a chunk
    t = with_thin_slices(t, m, n, k, std::max<std::int64_t>(1, k / kThinMinSliceK));
    t.estimate_s = estimate(t.kslice, t.slices);
  }
  t.use = t.estimate_s < other_estimate_s;
  return t;
}

namespace {
// The short-k kernel and the tiles, both as a start plus bytes at a streaming rate (the tile model's
// flops say little where c's bytes dominate). Fitted on the H200 (session 23, 2026-12-03,
// cuda_vs_cublas.py --shapes suite with PORTMAT_CUDA_SHORT_K=0 / 1, us, tiles -> short-k):
// (2048 x 1) @ (1 x 2048) 10.8 -> 7.6, (2048 x 8) @ (8 x 2048) 10.8 -> 10.4, (65536 x 16) @
// (16 x 16) 11.9 -> 7.5, (16 x 16) @ (16 x 65536) 9.2 -> 8.0, every product of at most 256 x 256
// results 0.1-1.5 us slower. So the tiles stream about 2.0 TB/s and the short-k kernel 2.8 (3.4 since
// its copies load 16 bytes a thread: session 31, graph-timed (65536 x 16) @ (16 x 16) 6.6 -> 5.2 us,
// (4096 x 32) @ (32 x 4096) 68 -> 49); its
// multiply-adds (shared-memory operands, 4 x 4 a thread) are taken at 20 TFLOP/s, and it must win
// by kShortKMargin (below a few MB the two are within the noise of a launch, and the tiles stay).
constexpr double kStreamStartS = 2.5e-6, kShortKBytesPerS = 3.4e12, kShortKFlops = 20e12;
// Session 51 (H100, 803 short-k products timed queued, bench/diagnostics/cuda_plans_ab.py): beyond
// its bytes the kernel took 2.7-2.8 us and a time along k, 0.05-0.06 us a k for results of at most
// 16 columns (each thread's chain of shared-memory loads and multiply-adds over k), 0.02-0.05 for
// the wider form; the 4 us start let it win small products at k = 17-32 where it ran 4.5-7 us
// against the tiles' 3.5. The start is what the choice fitted best (kTileStartS).
// Session 53 (H100, plans/small_products.txt: 280 products of k <= 32, every family forced; docs/cuda.md,
// "Small products: the short-k start"): under graph replay the tiles and the short-k kernel took
// 1.6-2.3 us on tiny products, where queued launches cannot tell plans apart; both starts (this and
// kStreamStartS) 1.5 us lower and a steeper k term took the choice from 1.059 to 1.021 of the best
// plan under graph replay, queued 1.021 -> 1.022. Out of sample (170 of the 417 products of 6000
// drawn at random whose plan this moved, cuda_plan_moves.py --base 6eff414 --random 6000 --seed 53):
// the new plans took 0.853x the old ones' time under graph replay, 0.896x queued, faster in 151 and
// 144 of the 170.
constexpr double kShortKStartS = 1.8e-6, kShortKNarrowPerKS = 0.11e-6, kShortKWidePerKS = 0.05e-6;
// The tiles' rate, 2.0 TB/s on those shapes (k <= 32); on k = 33-64 and a c as large as a (session
// 31: (65536 x 64) @ (64 x 64) 28.0 us, (16384 x 64) @ (64 x 64) 10.6, (262144 x 64) @ (64 x 64)
// 83.5, (100000 x 48) @ (48 x 40) 27.9) they streamed 1.6 TB/s beyond the start: a pipeline of
// 3-4 slabs that never fills.
constexpr double kTileBytesPerS = 2.0e12, kTileBytesPerSK64 = 1.6e12, kShortKMargin = 1.1;
}  // namespace

double tiles_with_bytes_s(std::int64_t m, std::int64_t n, std::int64_t k, double tile_estimate_s) {
  const double rate = k <= kShortKMax ? kTileBytesPerS : kTileBytesPerSK64;
  return std::max(tile_estimate_s, kStreamStartS + f32_bytes(m, n, k) / rate);
}

ShortKChoice choose_short_k(std::int64_t m, std::int64_t n, std::int64_t k, double tile_estimate_s) {
  ShortKChoice t;
  if (k <= 0 || k > kShortKMax || m <= 0 || n <= 0) return t;
  const int ct = n <= 16 ? 4 : 32;
  // 2 rows a thread (16-row blocks) where 4 (32-row blocks) would leave more rows idle: 16 x 16 @
  // 16 x 65536 ran 4.8 us against 5.5 (session 31).
  const int rt = ct == 32 && ceil_div(m, 16) * 16 < ceil_div(m, 32) * 32 ? 2 : 4;
  const std::int64_t tn = 4 * ct, tm = rt * (256 / ct);
  if (ceil_div(n, tn) > 65535 || ceil_div(m, tm) > INT32_MAX) return t;  // beyond its grid
  t.ct = ct;
  t.rt = rt;
  const double bytes = f32_bytes(m, n, k);
  t.estimate_s = kShortKStartS + (ct == 4 ? kShortKNarrowPerKS : kShortKWidePerKS) * static_cast<double>(k) +
                 std::max(bytes / kShortKBytesPerS, 2.0 * m * n * k / kShortKFlops);
  t.use = kShortKMargin * t.estimate_s < tiles_with_bytes_s(m, n, k, tile_estimate_s);
  return t;
}

namespace {
// The resident kernels' rates, fitted on the H200 (cuda_vs_cublas.py, queued, us). Session 32, with
// Sh copied by cp.async: resident_f32_lk did (65536 x 64) @ (64 x 64) in 22.0, (262144 x 64) @
// (64 x 64) 76.0, (100000 x 48) @ (48 x 40) 26.7, (16384 x 64) @ (64 x 64) 9.3: its multiply-adds
// (64 columns, k rounded up to 4) at about 235 GFLOP/s an SM beyond the start (212 in session 31,
// with Sh's plain loads), the bytes never the limit. It is taken where it is estimated faster at
// all (the tiles took 27.6, 82.9, 27.4 and 10.4 there), and only for
// L = a row-major (resident_f32_lk with c's rows as its rows): resident_f32_lr (L = b^T) ran no
// faster than the 64x128 tiles ((64 x 64) @ (64 x 65536) 23.5 against 23.2, (64 x 32) @ (32 x
// 65536) 17.1 against 15.1), and the lk kernel writes c^T element by element.
//
// Session 42, k of 65-256 in chunks (H100, 2026-12-06, queued us, resident / tiles): k = 96-128
// with two blocks an SM ran as estimated ((65536 x 96) @ (96 x 48) 30.3 / 34.5, (65536 x 128) @
// (128 x 64) 37.3 / 41.2, (65536 x 128) @ (128 x 32) 37.4 / 39.0, (100000 x 96) @ (96 x 40) 44.3 /
// 50.7), where the tiles' estimate with its bytes floor was 29.3 and 38.0 for the two it lost:
// the resident kernel is taken up to 1 / kResidentMargin of that estimate (the short-k kernel's
// estimate, which held, without it). Past k = 128, one block an SM of the 64-column form, it lost
// to the tiles ((65536 x 192) @ (192 x 32) 59.1 / 54.7, (65536 x 256) @ (256 x 64) 73.8 / 70.1;
// (16384 x 256) @ (256 x 64) 23.4 / 18.6): taken only where two blocks fit.
constexpr double kResidentBytesPerS = 3.0e12, kResidentFlopsPerSm = 235e9, kResidentMargin = 0.85;
}  // namespace

ResidentChoice choose_resident(std::int64_t m, std::int64_t n, std::int64_t k, bool a_col, bool b_col, int sms,
                               double other_s, int cols, bool other_is_tiles) {
  ResidentChoice t;
  if (k <= 0 || k > kResidentMaxK || m <= 0 || n <= 0 || std::min(m, n) > kResidentMax) return t;
  // Few columns: L = a; few rows: L = b^T; both: the longer side is L's rows.
  t.few_rows = m <= kResidentMax && (n > kResidentMax || n > m);
  const std::int64_t R = t.few_rows ? n : m, S = t.few_rows ? m : n;
  if (R > INT32_MAX) return t;
  t.possible = true;
  t.lk = t.few_rows ? b_col : !a_col;
  t.sc = cols == 64 || cols == 32 ? cols : S <= 32 ? 32 : kResidentMax;
  if (t.sc < S) t.sc = kResidentMax;
  const int rows = resident_tile_rows(t.sc);
  const std::int64_t s_count = std::max(1, sms), tiles = ceil_div(R, rows);
  const std::int64_t per_sm = resident_blocks_per_sm(static_cast<int>(k), t.sc);
  t.blocks = std::min(tiles, per_sm * s_count);
  const double bytes = f32_bytes(R, S, k);
  const double tile_flops = 2.0 * rows * t.sc * static_cast<double>((k + 3) / 4 * 4);
  const double busy_sms = static_cast<double>(std::min(t.blocks, s_count));
  const double compute_s = static_cast<double>(tiles) * tile_flops / (busy_sms * kResidentFlopsPerSm);
  const double work_s = std::max(bytes / kResidentBytesPerS, compute_s);
  t.estimate_s = kStreamStartS + work_s;
  // The margin weighs the work beyond the launch's start, which the others' estimates carry too: on
  // the whole estimate it took the resident kernel for products of a few us, whose start is most of
  // it (2 x 2 x 2 to (16384 x 128) @ (128 x 48)), where it ran about 1 us slower than the tiles or
  // the short-k kernel (H100, session 50, 181 such products forced both ways, queued: 705 us in all
  // against 609 for the others; (1024 x 1) @ (1 x 16) 3.8 against 2.8, 8 x 8 x 8 3.1 against 2.8).
  const double margin = other_is_tiles ? kResidentMargin : 1.0;
  t.use = !t.few_rows && t.lk && per_sm == kResidentBlocksPerSm &&
          kStreamStartS + margin * work_s < other_s;
  return t;
}

F32Plan choose_f32_plan(std::int64_t m, std::int64_t n, std::int64_t k, bool a_col, bool b_col, int sms,
                        const TileChoice& tile, const FamilyForce& force) {
  F32Plan p{};
  p.tile = tile;
  if (force.short_k != 0) {
    p.short_k = choose_short_k(m, n, k, tile.estimate_s);
    if (force.short_k == 1) p.short_k.use = p.short_k.ct != 0;
  }
  if (force.resident != 0) {
    const double other_s = p.short_k.use ? p.short_k.estimate_s : tiles_with_bytes_s(m, n, k, tile.estimate_s);
    p.resident = choose_resident(m, n, k, a_col, b_col, sms, other_s, force.resident_cols, !p.short_k.use);
    if (force.resident == 1) p.resident.use = p.resident.possible;
  }
  if (p.resident.use) p.short_k.use = false;
  if (force.thin != 0) {
    const double other_s = p.resident.use  ? p.resident.estimate_s
                           : p.short_k.use ? p.short_k.estimate_s
                                           : tile.estimate_s;
    p.thin = choose_thin(m, n, k, a_col, b_col, sms, other_s);
    if (force.thin == 1) p.thin.use = p.thin.possible;
    if (p.thin.wk && !force.thin_wk) {
      p.thin.wk = false;
      p.thin.rows_per_block = 8 * thin_dots_rows_per_warp(p.thin.sc);
    }
    if (force.thin_slices > 0 && p.thin.possible) p.thin = with_thin_slices(p.thin, m, n, k, force.thin_slices);
  }
  if (p.thin.use) p.short_k.use = p.resident.use = false;
  return p;
}

std::int64_t h100_cluster_room(const GemmTile& /*tile*/, int slices, bool spread) {
  static const std::int64_t spread_room[] = {0, 0, 66, 39, 30, 22, 17, 15, 15};
  static const std::int64_t packed_room[] = {0, 0, 264, 163, 124, 94, 79, 69, 62};
  return slices >= 2 && slices <= 8 ? (spread ? spread_room[slices] : packed_room[slices]) : 0;
}

}  // namespace portmat::cuda
