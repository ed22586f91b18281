// The float32 tile model (tile_choice.hpp says what it estimates and why).
#include "cuda/tile_choice.hpp"

#include <algorithm>

namespace portmat::cuda {

namespace {

// A tile shape the model weighs: its data-parallel kernel, its stream-K partner (or none), and
// the rate one SM reaches on it. H200, device-resident, 2026-12-01 (docs/cuda.md, "Tiles for mid
// sizes and thin sides"): 128x256 on _ws 51.2 TFLOP/s over 132 SMs (_fp 50.2); 64x128_fp 0.265
// TFLOP/s per SM, with one block on every SM at n = 1024 as with four in turn at 2048; 128x64_fp
// 0.26; 64x64 about 0.2.
struct Candidate {
  const GemmTile* dp;
  const GemmTile* sk;
  double flops_per_sm;
};

// A stream-K block's cost beyond its share of the work: its pipeline's start (two slabs at its
// SM's rate) and, per part of a split tile, a hand-over to the next block in k order (flag, fence,
// one red.global.add of the tile), about 1 us plus 0.11 ns per element of the tile. Fitted to
// every-tile-shared runs on the H200: a 64x64 result shared by 396 blocks of 128x64_sk took
// 750 us (1.9 us a hand-over), by 132 of _wsk 600 us (4.5 us); the costs beyond the work at
// n = 768-1536 (8-24 us) and at (4096 x 4096) @ (4096 x 64) (24 us) follow from them.
constexpr double kHandOverS = 1.0e-6, kHandOverPerElementS = 1.1e-10, kStartSlabs = 2.0;
// Sharing must win by this factor: where the model cannot tell them apart (n = 2048: one wave of
// 128x256 tiles, 0.99x cuBLAS data-parallel, 0.97x shared) the simpler grid stays.
constexpr double kShareMargin = 1.03;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

TileChoice choose_f32_tile(std::int64_t m, std::int64_t n, std::int64_t k, int sms, bool warp_specialized,
                           bool whole) {
  const Candidate candidates[] = {
      {warp_specialized ? &kF32_128x256_ws : &kF32_128x256_fp, warp_specialized ? &kF32_128x256_wsk : &kF32_128x256_sk,
       warp_specialized ? 388e9 : 380e9},
      {&kF32_64x128_fp, &kF32_64x128_sk, 265e9},
      {&kF32_128x64_fp, &kF32_128x64_sk, 260e9},
      {&kF32_64x64, nullptr, 200e9}};
  const std::int64_t s = std::max(1, sms);
  const std::int64_t k_tiles = std::max<std::int64_t>(1, ceil_div(k, 16));
  TileChoice best{nullptr, false, 0, 0.0};
  auto consider = [&](const GemmTile* tile, bool share_all, std::int64_t blocks, double t) {
    if (!best.tile || t < best.estimate_s) best = {tile, share_all, blocks, t};
  };
  for (const Candidate& c : candidates) {
    const GemmTile& t = *c.dp;
    const bool big = &c == &candidates[0];
    const std::int64_t tiles = ceil_div(m, t.bm) * ceil_div(n, t.bn);
    const double tile_s = 2.0 * t.bm * t.bn * static_cast<double>(std::max<std::int64_t>(k, 1)) / c.flops_per_sm;
    const double start_s = kStartSlabs * 2.0 * t.bm * t.bn * 16.0 / c.flops_per_sm;
    const double hand_over_s = kHandOverS + kHandOverPerElementS * t.bm * t.bn;
    if (big && tiles >= s) {  // launch()'s hybrid grid: whole waves, then the rest shared
      consider(c.sk, false, 0, static_cast<double>(tiles) * tile_s / s + start_s + hand_over_s);
      continue;
    }
    // Data-parallel: the busiest SM runs ceil(tiles / SMs) tiles in turn. (128x256: its stream-K
    // tile, which launch() runs data-parallel below a wave.)
    consider(big ? c.sk : c.dp, false, 0, static_cast<double>(ceil_div(tiles, s)) * tile_s);
    if (!c.sk || !whole) continue;
    // Every tile shared by w blocks (at most as many as fit on the GPU at once, each with at least
    // kMinSkSlabs slabs): the work spread over min(w, SMs) SMs, plus the start and, per block a
    // tile is split into, a hand-over.
    for (std::int64_t w = s * t.min_blocks; w >= 2; w = w > s ? s : w / 2) {
      if (tiles * k_tiles < w * kMinSkSlabs) continue;
      const double parts = std::max(1.0, static_cast<double>(w) / static_cast<double>(tiles));
      consider(c.sk, true, w,
               kShareMargin * (static_cast<double>(tiles) * tile_s / static_cast<double>(std::min(w, s)) + start_s +
                               parts * hand_over_s));
    }
  }
  return best;
}

}  // namespace portmat::cuda
