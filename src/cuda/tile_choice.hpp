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

#include <cstdint>

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
  // workspace, then their sum into c (cuda_backend.cpp, launch_split).
  std::int64_t split = 0;
};

// m x k @ k x n on `sms` multiprocessors; warp_specialized: the sm_90a kernels (_ws, _wsk) run
// here; whole: the product is alone on the GPU (device-resident), so its blocks may wait on each
// other (stream-K); the NumPy path's row chunks overlap on two streams and stay data-parallel.
TileChoice choose_f32_tile(std::int64_t m, std::int64_t n, std::int64_t k, int sms, bool warp_specialized,
                           bool whole);

}  // namespace portmat::cuda
