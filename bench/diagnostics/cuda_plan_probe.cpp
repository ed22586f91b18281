// The float32 plan the CUDA backend's model gives each product, without a GPU: what
// cuda_plan_moves.py compares between two revisions of src/cuda/tile_choice.cpp. It asks
// choose_f32_plan, as CudaDevice::plan (cuda_backend.cpp) does without knobs, on an H100 or H200
// (132 SMs, h100_cluster_room: the 64x64c cluster rooms an H100's driver reports), and prints, per input line "M K N LAYOUT"
// (LAYOUT rr, rc, cr or cc), the PORTMAT_CUDA_ knobs that force that plan, or "-" where no knob
// can (every tile shared, stream-K).
//
//   g++ -O2 -std=c++17 -Isrc bench/diagnostics/cuda_plan_probe.cpp src/cuda/tile_choice.cpp -o probe
#include <cstdint>
#include <iostream>
#include <string>

#include "cuda/tile_choice.hpp"

namespace pc = portmat::cuda;

namespace {
// PORTMAT_CUDA_SPLIT_TILE's name for a split's batched (or cluster) kernel, by its tile's name.
std::string split_tile(const std::string& name) {
  for (const char* n : {"64x128_sl", "128x64_sl", "64x128", "128x64", "64x64c", "64x64"})
    if (name.find(std::string("_f32_") + n) != std::string::npos) return n;
  return "";
}
}  // namespace

int main() {
  long m, k, n;
  std::string layout;
  while (std::cin >> m >> k >> n >> layout) {
    const bool a_col = layout[0] == 'c', b_col = layout[1] == 'c';
    const auto tile = pc::choose_f32_tile(m, n, k, 132, true, true, pc::h100_cluster_room);
    const pc::F32Plan p = pc::choose_f32_plan(m, n, k, a_col, b_col, 132, tile);
    std::string knobs;
    if (p.thin.use)
      knobs = "PORTMAT_CUDA_THIN=1";
    else if (p.resident.use)
      knobs = "PORTMAT_CUDA_RESIDENT=1,PORTMAT_CUDA_THIN=0";
    else if (p.short_k.use)
      knobs = "PORTMAT_CUDA_SHORT_K=1,PORTMAT_CUDA_RESIDENT=0,PORTMAT_CUDA_THIN=0";
    else if (tile.share_all)
      knobs = "-";
    else if (tile.split > 1)
      knobs = "PORTMAT_CUDA_SPLIT_K=" + std::to_string(tile.split) + ",PORTMAT_CUDA_SPLIT_TILE=" + split_tile(tile.tile->name);
    else
      knobs = "PORTMAT_CUDA_TILE=" + std::string(tile.tile->name).substr(std::string(tile.tile->name).find("_f32_") + 5);
    std::cout << m << " " << k << " " << n << " " << layout << " " << knobs << "\n";
  }
}
