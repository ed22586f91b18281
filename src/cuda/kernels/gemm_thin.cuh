// Thin products (issue 16): c = a @ b where one side of c has at most 16 entries: matrix-vector
// products, a few rows of a against a large b, a large a against a few columns of b. Such a
// product reads its long operand once and does at most 16 multiply-adds per element read, so it is
// bound by memory, not arithmetic; the tiled kernels (64 or 128 wide) would idle most of a tile
// and read the long operand through shared memory for nothing. Here every element of the long
// operand is loaded once, straight into registers (streaming loads: it is not read again), and the
// short operand, a few kilobytes a chunk, sits in shared memory (thin_dots_wk, whose warps each
// read their own k of it, loads it straight into registers).
//
// The problem is seen as out (R x S) = L (R x K) . Sh (K x S), S <= 16 (the host, launch_thin,
// maps a, b and c onto it: few columns of c: L = a; few rows: L = b^T and out = c^T). Two kernels,
// by which index of L is contiguous:
//  - thin_dots: k contiguous (a row-major a with few columns of b; a column-major b with few rows
//    of a). Each warp owns RW rows; its lanes read 4 consecutive k of each row (a warp: 512
//    contiguous bytes a row), take the short operand's matching 4 x S block from shared memory
//    (float4 units, rows padded so the 8 lanes of a quarter warp hit distinct banks), and keep
//    RW x S partial sums, summed across the warp at the end (warp_reduce_many: 62 shuffles for 64
//    sums, not 5 per sum).
//  - thin_axpy: r contiguous (a row-major b with few rows of a; a column-major a with few columns
//    of b). Each thread owns 4 consecutive r (a warp: 512 contiguous bytes a k); the 8 warps of a
//    block take every 8th k each of every 256-deep chunk, the short operand's row k a broadcast from
//    shared memory, and the warps' 4 x S sums meet in shared memory at the end. With at most 4
//    short columns, a block of 128 whole, aligned rows keeps its next batch of loads in flight
//    while it multiplies this one (thin_axpy_pipelined); other blocks run thin_axpy_plain.
// The grid: blockIdx.x the block's rows, blockIdx.y a slice of k (kslice deep) when the rows alone
// are too few blocks to keep the memory system busy; then every slice writes its partial result
// into a workspace (out_step apart) and thin_sum adds them in slice order: deterministic.
#pragma once

#include "gemm_common.cuh"

namespace portmat::cuda {
namespace {

constexpr int kThinThreads = 256;  // 8 warps
constexpr int kThinWarps = kThinThreads / 32;
constexpr int kThinChunk = 256;    // k per pass through shared memory (a multiple of 4 * 32)
static_assert(kThinChunk == kThinWarps * 32, "thin_axpy: each warp takes 32 k of a chunk");

// thin_dots' shared-memory unit (a float4 of 4 consecutive k) for group g (k / 4 within the chunk)
// and short column s: the columns of a group are contiguous, and groups SC + 1 units apart, so
// that lanes g .. g + 7 reading one column s hit 8 distinct 16-byte bank groups (SC + 1 is odd)
// while s stays a constant offset from a lane's group (an XOR swizzle by g made every (g, s) an
// address register of its own: 128 registers were not enough at 16 columns).
template <int SC>
constexpr int thin_dots_pitch() {
  return SC == 1 ? 1 : SC + 1;
}
template <int SC>
__device__ __forceinline__ int thin_dots_unit(int g, int s) {
  return g * thin_dots_pitch<SC>() + s;
}

// Element e of a chunk of the short operand (kThinChunk rows of k by SC columns): its row kl within the
// chunk and its column s. Consecutive elements run along k where k is contiguous in memory, so
// that consecutive threads read consecutive addresses; else along s.
template <int SC>
__device__ __forceinline__ void thin_short_place(const ThinArgs& p, int e, int& kl, int& s) {
  if (p.sk == 1)
    kl = e % kThinChunk, s = e / kThinChunk;
  else
    s = e % SC, kl = e / SC;
}
// ... and its value in the chunk that starts at kc: zero past k1 and past s.
template <int SC>
__device__ __forceinline__ float thin_short_element(const ThinArgs& p, int kc, int k1, int e, int& kl, int& s) {
  thin_short_place<SC>(p, e, kl, s);
  const int k = kc + kl;
  return k < k1 && s < p.s ? static_cast<const float*>(p.sh)[k * p.sk + s * p.ss] : 0.0f;
}

// The short operand's rows [kc, kc + kThinChunk) into shared memory, zeros past k1 and past s: as
// thin_dots_unit's units (DOTS) or row by row, S contiguous (thin_axpy).
template <int SC, bool DOTS>
__device__ __forceinline__ void thin_load_short(const ThinArgs& p, int kc, int k1, float* sh) {
  for (int e = threadIdx.x; e < kThinChunk * SC; e += kThinThreads) {
    int kl, s;
    const float v = thin_short_element<SC>(p, kc, k1, e, kl, s);
    if constexpr (DOTS)
      sh[thin_dots_unit<SC>(kl >> 2, s) * 4 + (kl & 3)] = v;
    else
      sh[kl * SC + s] = v;
  }
}

// Reduces V partial sums (one per lane each) across the warp: in each round half of the values
// move to the partner lane and are added there, so 64 sums take 32 + 16 + 8 + 4 + 2 shuffles.
// Afterwards (V >= 32) lane l holds the full sums of indices j + (V / 32) * l in v[j], j < V / 32;
// (V < 32) every lane holds the sum of index l >> log2(32 / V) in v[0].
template <int H, int O, int V>
__device__ __forceinline__ void warp_reduce_round(float (&v)[V], int lane) {
  if constexpr (O >= 1 && H >= 1) {
    const bool upper = lane & O;
#pragma unroll
    for (int j = 0; j < H; ++j) {
      const float send = upper ? v[j] : v[j + H];
      const float keep = upper ? v[j + H] : v[j];
      v[j] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
    warp_reduce_round<H / 2, O / 2>(v, lane);
  } else if constexpr (O >= 1) {
    v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
    warp_reduce_round<0, O / 2>(v, lane);
  }
}
template <int V>
__device__ __forceinline__ void warp_reduce_many(float (&v)[V], int lane) {
  static_assert((V & (V - 1)) == 0 && V <= 64, "a power of two, at most 64");
  warp_reduce_round<V / 2, 16>(v, lane);
}

// Four elements from x, `step` apart, of which the first `count` exist (zeros past them): one
// 16-byte load where `vec` (step 1 and x aligned) and all four exist. STREAM: streaming loads
// (__ldcs: read once); else through the read-only cache (__ldg: a strided operand whose lines the
// next loads of the lane meet again).
template <bool STREAM = true>
__device__ __forceinline__ float4 thin_load4_upto(const float* x, int count, bool vec, long long step = 1) {
  auto load = [](const float* q) { return STREAM ? __ldcs(q) : __ldg(q); };
  if (vec && count >= 4) return __ldcs(reinterpret_cast<const float4*>(x));
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (count > 0) v.x = load(x);
  if (count > 1) v.y = load(x + step);
  if (count > 2) v.z = load(x + 2 * step);
  if (count > 3) v.w = load(x + 3 * step);
  return v;
}

// Part c (0-3: x, y, z, w) of v; c a constant once unrolled, so no local memory.
__device__ __forceinline__ float float4_part(const float4& v, int c) {
  return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}

// Four consecutive elements of L from (r, k) along k (thin_dots) or along r (thin_axpy, CONTIG_R),
// zeros outside the matrix or past k1; one 16-byte streaming load where aligned and whole.
template <bool CONTIG_R>
__device__ __forceinline__ float4 thin_load4(const ThinArgs& p, int r, int k, int k1) {
  const float* L = static_cast<const float*>(p.l);
  if constexpr (!CONTIG_R) {
    if (r >= p.r) return make_float4(0.f, 0.f, 0.f, 0.f);
    return thin_load4_upto(L + r * p.ldl + k, k1 - k, p.vec);
  } else {
    if (k >= k1) return make_float4(0.f, 0.f, 0.f, 0.f);
    return thin_load4_upto(L + k * p.ldl + r, p.r - r, p.vec);
  }
}

// Four consecutive k (from k, a multiple of 4) of the short operand's column s, zeros past k1 and
// past s, straight from memory: thin_dots_wk's warps each read their own k of it, so it needs no
// trip through shared memory. Where k is its contiguous index (sk = 1), 16 bytes at a time where
// `aligned` (its base and column stride allow it); else four loads sk apart.
__device__ __forceinline__ float4 thin_short4(const ThinArgs& p, int s, int k, int k1, bool aligned) {
  if (s >= p.s) return make_float4(0.f, 0.f, 0.f, 0.f);
  const float* x = static_cast<const float*>(p.sh) + s * p.ss + k * p.sk;
  if (p.sk == 1) return thin_load4_upto(x, k1 - k, aligned);
  return thin_load4_upto<false>(x, k1 - k, false, p.sk);
}

// Whether this block is the last of its row of blocks (blockIdx.x) to finish its slice: every
// block fences its part and counts itself in at p.counter[blockIdx.x]; the last one clears it.
__device__ __forceinline__ bool thin_last_slice_done(const ThinArgs& p) {
  __shared__ bool last;
  __threadfence();  // this block's part, before it counts itself in
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(p.counter + blockIdx.x, 1) == static_cast<int>(gridDim.y) - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// A split thin product's slices summed in the same launch (ThinArgs::counter): the last block of
// each row of blocks adds the parts of its rows (rows_per_block of them) in slice order, as
// thin_sum does in its own launch, so the bits are thin_sum's. The parts come through L2 (__ldcg:
// other SMs wrote them). Saves the second launch, 2-3 us of a product that takes 10-30.
constexpr int kThinSumBatch = 8;
// The sum of count parts step apart from w, in order: kThinSumBatch at a time, all their loads in
// flight before the first add (a loop over them, or its remainder after unrolling, waited for each
// load in turn). THROUGH_L2: __ldcg loads (parts that other SMs of this launch wrote).
template <bool THROUGH_L2>
__device__ __forceinline__ float thin_sum_parts(const float* w, int count, long long step) {
  float sum = 0.f;
  for (int q0 = 0; q0 < count; q0 += kThinSumBatch) {
    float v[kThinSumBatch];
#pragma unroll
    for (int u = 0; u < kThinSumBatch; ++u)
      v[u] = q0 + u >= count ? 0.f : THROUGH_L2 ? __ldcg(w + (q0 + u) * step) : w[(q0 + u) * step];
#pragma unroll
    for (int u = 0; u < kThinSumBatch; ++u)
      if (q0 + u < count) sum = q0 + u == 0 ? v[u] : sum + v[u];
  }
  return sum;
}
__device__ __forceinline__ void thin_last_block_sum(const ThinArgs& p, int rows_per_block) {
  if (!thin_last_slice_done(p)) return;
  const float* parts = static_cast<const float*>(p.out);
  float* c = static_cast<float*>(p.c);
  const int r0 = blockIdx.x * rows_per_block, count = static_cast<int>(gridDim.y);
  const bool r_fast = p.crs == 1;  // consecutive threads along c's contiguous index
  for (int e = threadIdx.x; e < rows_per_block * p.s; e += kThinThreads) {
    const int r = r0 + (r_fast ? e % rows_per_block : e / p.s), s = r_fast ? e / rows_per_block : e % p.s;
    if (r >= p.r) continue;
    c[r * p.crs + s * p.css] = thin_sum_parts<true>(parts + r * p.ors + s * p.oss, count, p.out_step);
  }
  if (threadIdx.x == 0) p.counter[blockIdx.x] = 0;  // for the next launch on this stream
}

// A split thin product's slices summed through the cluster's shared memory (ThinArgs::cluster:
// each cluster is the gridDim.y slices of one row of blocks). Every block has put its part,
// rows_per_block x SC as part[s * rows_per_block + row], into its shared memory; block rank q then
// adds rows [q * share, (q + 1) * share) of every block's part in slice order (thin_sum's order:
// the same bits) and writes them to c. What thin_last_block_sum does without the parts' round trip
// through L2, the fences and the count: the cluster's barrier is the only wait.
template <int SC>
__device__ __forceinline__ void thin_cluster_sum(const ThinArgs& p, const float* part, int rows_per_block) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cluster_barrier();
  const unsigned rank = cluster_rank(), parts = cluster_blocks();
  const int share = (rows_per_block + static_cast<int>(parts) - 1) / static_cast<int>(parts);
  const int row0 = static_cast<int>(rank) * share, r0 = blockIdx.x * rows_per_block;
  const bool r_fast = p.crs == 1;  // consecutive threads along c's contiguous index
  unsigned base[kClusterMaxSlices];  // each block's part in the cluster's shared window, mapped once
#pragma unroll
  for (int q = 0; q < kClusterMaxSlices; ++q)
    if (q < static_cast<int>(parts)) base[q] = cluster_map(smem_addr(part), q);
  float* c = static_cast<float*>(p.c);
  for (int e = threadIdx.x; e < share * SC; e += kThinThreads) {
    const int row = row0 + (r_fast ? e % share : e / SC), s = r_fast ? e / share : e % SC;
    if (row >= rows_per_block || r0 + row >= p.r || s >= p.s) continue;
    const unsigned off = static_cast<unsigned>((s * rows_per_block + row) * sizeof(float));
    float v[kClusterMaxSlices];
#pragma unroll
    for (int q = 0; q < kClusterMaxSlices; ++q) {  // every load in flight before the first add
      v[q] = 0.f;
      if (q < static_cast<int>(parts))
        asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v[q]) : "r"(base[q] + off));
    }
    float sum = v[0];
#pragma unroll
    for (int q = 1; q < kClusterMaxSlices; ++q)
      if (q < static_cast<int>(parts)) sum += v[q];
    c[static_cast<long long>(r0 + row) * p.crs + s * p.css] = sum;
  }
  // No block leaves (its shared memory with it) while another may still read its part.
  cluster_barrier();
#else
  __trap();  // the host launches clusters on sm_90 and later only
#endif
}

// thin_dots_wk's slices summed in the same launch (ThinArgs::counter): the last block to finish
// (thin_last_slice_done) reads every slice's V values (through L2: other SMs wrote
// them) and adds them in a fixed order, each thread the slices t, t + 256, ... in turn, then the
// threads' sums in a fixed tree: the same bits every run (a different order from thin_sum's). A
// dot product paid a second launch for this, about as long as its whole read (issue 16).
template <int V, int SC>
__device__ __forceinline__ void thin_wk_sum_slices(const ThinArgs& p, float* red) {
  if (!thin_last_slice_done(p)) return;  // gridDim.x is 1: counter[0]
  const float* parts = static_cast<const float*>(p.out);
  float x[V];
#pragma unroll
  for (int v = 0; v < V; ++v) x[v] = 0.f;
  for (int q = threadIdx.x; q < static_cast<int>(gridDim.y); q += kThinThreads)
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int r = v / SC, s = v % SC;
      if (r < p.r && s < p.s) x[v] += __ldcg(parts + q * p.out_step + r * p.ors + s * p.oss);
    }
  // red: the block's shared memory, free now (every warp is past its last read of it).
#pragma unroll
  for (int v = 0; v < V; ++v) red[v * kThinThreads + threadIdx.x] = x[v];
  for (int half = kThinThreads / 2; half >= 1; half /= 2) {
    __syncthreads();
    if (threadIdx.x < half)
#pragma unroll
      for (int v = 0; v < V; ++v) red[v * kThinThreads + threadIdx.x] += red[v * kThinThreads + threadIdx.x + half];
  }
  __syncthreads();
  if (threadIdx.x < V) {
    const int r = threadIdx.x / SC, s = threadIdx.x % SC;
    if (r < p.r && s < p.s) static_cast<float*>(p.c)[r * p.crs + s * p.css] = red[threadIdx.x * kThinThreads];
  }
  if (threadIdx.x == 0) *p.counter = 0;  // for the next launch on this stream
}

// WK (warps split k; thin_dots_wk, for at most RW rows of L and SC <= 4, e.g. a dot product): the
// 8 warps of a block share its RW rows and each takes its own kThinChunk of an 8 times deeper
// chunk, so all of them read L (else 7 of 8 idle); their sums meet in shared memory in warp order.
template <int SC, bool WK = false>
__device__ __forceinline__ void thin_dots_body(const ThinArgs& p) {
  constexpr int RW = thin_dots_rows_per_warp(SC);
  constexpr int G = kThinChunk / 128;  // float4 groups of a row per lane and chunk
  constexpr int V = RW * SC;
  static_assert(!WK || SC <= 4, "thin_dots_wk: at most 4 short columns");
  // thin_dots: a chunk of the short operand (thin_dots_unit's units); thin_dots_wk: its sum of
  // the slices' parts (thin_wk_sum_slices, V values a thread).
  __shared__ __align__(16) float sh[WK ? V * kThinThreads : kThinChunk / 4 * thin_dots_pitch<SC>() * 4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = WK ? blockIdx.x * RW : (blockIdx.x * kThinWarps + warp) * RW;
  const long long k0 = static_cast<long long>(blockIdx.y) * p.kslice;
  const int k1 = static_cast<int>(min(static_cast<long long>(p.k), k0 + p.kslice));
  float acc[V];
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = 0.f;
  // thin_dots_wk: each lane loads the 4 x SC values of the short operand that its own loads of L
  // meet, beside them, with no shared memory and no barrier: 16 bytes at a time where its k is
  // contiguous (thin_short4) or where its rows are (rows_4), else one value at a time. Staged
  // through shared memory (one element a thread at a time, two barriers a chunk), a lone block read
  // a dot product at 0.73 ns a k, 11 GB/s, against 0.37 straight (H100, session 51); (1 x 4096) @
  // (4096 x 4), row-major, took 5.3 us staged, 6.3 with a value a load (its loads 64 bytes apart
  // across a warp) and 3.0 column-major (session 52). The same products and sums in the same
  // order as thin_dots': the same bits.
  if constexpr (WK) {
    const bool base16 = (reinterpret_cast<unsigned long long>(p.sh) & 15) == 0;
    const bool aligned = base16 && (p.s == 1 || (p.ss & 3) == 0);
    // rows_4: the short operand is whole rows of SC floats, one after another (ss = 1, sk = S = SC:
    // a row-major (K x 2) or (K x 4) b, a column-major a of 2 or 4 rows), 16-byte aligned.
    const bool rows_4 = base16 && p.ss == 1 && p.sk == SC && p.s == SC;
    const int kw = warp * kThinChunk;  // this warp's part of a pass
    for (int kc = static_cast<int>(k0); kc < k1; kc += kThinChunk * kThinWarps) {
      float4 x[RW][G], w[SC][G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int kk = kc + kw + (g * 32 + lane) * 4;
#pragma unroll
        for (int rw = 0; rw < RW; ++rw) x[rw][g] = thin_load4<false>(p, r0 + rw, kk, k1);
        if (SC > 1 && rows_4 && kk + 3 < k1) {
          // The lane's 4 k of every column: 4 x SC consecutive floats (element j * SC + s: k j,
          // column s), SC 16-byte loads.
          const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>(p.sh) + static_cast<long long>(kk) * SC);
          float4 v[SC];
#pragma unroll
          for (int i = 0; i < SC; ++i) v[i] = __ldcs(q + i);
          auto at = [&](int e) { return float4_part(v[e / 4], e % 4); };
#pragma unroll
          for (int s = 0; s < SC; ++s) w[s][g] = make_float4(at(s), at(SC + s), at(2 * SC + s), at(3 * SC + s));
        } else {
#pragma unroll
          for (int s = 0; s < SC; ++s) w[s][g] = thin_short4(p, s, kk, k1, aligned);
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int s = 0; s < SC; ++s)
#pragma unroll
          for (int rw = 0; rw < RW; ++rw) {
            float& a = acc[rw * SC + s];
            a = fmaf(x[rw][g].x, w[s][g].x, a);
            a = fmaf(x[rw][g].y, w[s][g].y, a);
            a = fmaf(x[rw][g].z, w[s][g].z, a);
            a = fmaf(x[rw][g].w, w[s][g].w, a);
          }
    }
  } else {
    for (int kc = static_cast<int>(k0); kc < k1; kc += kThinChunk) {
      // The chunk's first group of L first (in flight across the barriers), then the short operand.
      // With 16 columns a lane holds one group of each row at a time (with two, 128 registers were
      // not enough: ptxas spilled).
      constexpr int GA = SC >= 16 ? 1 : G;  // groups loaded at a time
      float4 x[RW][GA];
#pragma unroll
      for (int rw = 0; rw < RW; ++rw)
#pragma unroll
        for (int g = 0; g < GA; ++g) x[rw][g] = thin_load4<false>(p, r0 + rw, kc + (g * 32 + lane) * 4, k1);
      __syncthreads();  // the previous chunk's reads of sh are done
      thin_load_short<SC, true>(p, kc, k1, sh);
      __syncthreads();
#pragma unroll
      for (int g0 = 0; g0 < G; g0 += GA) {
        if (g0 > 0)
#pragma unroll
          for (int rw = 0; rw < RW; ++rw)
#pragma unroll
            for (int g = 0; g < GA; ++g)
              x[rw][g] = thin_load4<false>(p, r0 + rw, kc + ((g0 + g) * 32 + lane) * 4, k1);
#pragma unroll
        for (int g = 0; g < GA; ++g)
#pragma unroll
          for (int s = 0; s < SC; ++s) {
            const float4 w =
                *reinterpret_cast<const float4*>(sh + thin_dots_unit<SC>((g0 + g) * 32 + lane, s) * 4);
#pragma unroll
            for (int rw = 0; rw < RW; ++rw) {
              float& a = acc[rw * SC + s];
              a = fmaf(x[rw][g].x, w.x, a);
              a = fmaf(x[rw][g].y, w.y, a);
              a = fmaf(x[rw][g].z, w.z, a);
              a = fmaf(x[rw][g].w, w.w, a);
            }
          }
      }
    }
  }
  warp_reduce_many(acc, lane);
  float* out = static_cast<float*>(p.out) + blockIdx.y * p.out_step;
  if constexpr (WK) {
    static_assert(V <= 32, "thin_dots_wk: one sum a lane at most");
    // Lane l holds the sum of index l / (32 / V) (warp_reduce_many); the warps' sums are added in
    // warp order by the first V threads.
    __shared__ float part[kThinWarps][V];
    constexpr int kShare = 32 / V;
    if (lane % kShare == 0) part[warp][lane / kShare] = acc[0];
    __syncthreads();
    if (threadIdx.x < V) {
      float sum = part[0][threadIdx.x];
#pragma unroll
      for (int w = 1; w < kThinWarps; ++w) sum += part[w][threadIdx.x];
      const int r = r0 + threadIdx.x / SC, s = threadIdx.x % SC;
      if (r < p.r && s < p.s) out[r * p.ors + s * p.oss] = sum;
    }
    if (gridDim.y > 1 && p.counter) thin_wk_sum_slices<V, SC>(p, sh);
    return;
  }
  constexpr int kHeld = V >= 32 ? V / 32 : 1;
  // The index (rw * SC + s) of the sum in this lane's acc[j] (warp_reduce_many), or -1 where the
  // lane holds a copy that another lane stores.
  auto held = [&](int j) {
    if constexpr (V >= 32) {
      return j + kHeld * lane;
    } else {
      constexpr int kShare = 32 / V;  // lanes holding the same sum
      return lane % kShare ? -1 : lane / kShare;
    }
  };
  constexpr int kRows = kThinWarps * RW;  // the block's rows
  if (p.cluster) {  // the block's part into shared memory (free once every warp is past it)
    static_assert(kRows * SC <= sizeof(sh) / sizeof(float), "thin_dots: the part fits the chunk's buffer");
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kHeld; ++j)
      if (const int idx = held(j); idx >= 0) sh[(idx % SC) * kRows + warp * RW + idx / SC] = acc[j];
    thin_cluster_sum<SC>(p, sh, kRows);
    return;
  }
#pragma unroll
  for (int j = 0; j < kHeld; ++j) {
    const int idx = held(j);
    if (idx < 0) continue;
    const int r = r0 + idx / SC, s = idx % SC;
    if (r < p.r && s < p.s) out[r * p.ors + s * p.oss] = acc[j];
  }
  if (gridDim.y > 1 && p.counter) thin_last_block_sum(p, kThinWarps * RW);
}

// thin_axpy's shared memory: a chunk of the short operand (two for thin_axpy_pipelined), and at
// the end the warps' sums (4 warps' 4 x SC x 32 lanes).
template <int SC>
constexpr int thin_axpy_shared_floats() {
  return 2 * kThinChunk * SC > 4 * SC * 128 ? 2 * kThinChunk * SC : 4 * SC * 128;
}

// thin_axpy's end: the 8 warps' sums, pairwise through shared memory in a fixed order (warps 4-7
// onto 0-3, 2-3 onto 0-1, 1 onto 0), warp 0's stores of the block's 128 rows, and with slices the
// last block's sum of them.
template <int SC>
__device__ __forceinline__ void thin_axpy_finish(const ThinArgs& p, float* sh, float (&acc)[SC][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = blockIdx.x * 128 + lane * 4;
#pragma unroll
  for (int half = kThinWarps / 2; half >= 1; half /= 2) {
    __syncthreads();
    if (warp >= half && warp < 2 * half)
#pragma unroll
      for (int s = 0; s < SC; ++s)
        *reinterpret_cast<float4*>(sh + ((warp - half) * SC + s) * 128 + lane * 4) =
            make_float4(acc[s][0], acc[s][1], acc[s][2], acc[s][3]);
    __syncthreads();
    if (warp < half)
#pragma unroll
      for (int s = 0; s < SC; ++s) {
        const float4 q = *reinterpret_cast<const float4*>(sh + (warp * SC + s) * 128 + lane * 4);
        acc[s][0] += q.x, acc[s][1] += q.y, acc[s][2] += q.z, acc[s][3] += q.w;
      }
  }
  if (p.cluster) {  // warp 0's sums as the block's part, where it read them from
    if (warp == 0)
#pragma unroll
      for (int s = 0; s < SC; ++s)
        *reinterpret_cast<float4*>(sh + s * 128 + lane * 4) = make_float4(acc[s][0], acc[s][1], acc[s][2], acc[s][3]);
    thin_cluster_sum<SC>(p, sh, 128);
    return;
  }
  if (warp == 0) {
    float* out = static_cast<float*>(p.out) + blockIdx.y * p.out_step;
#pragma unroll
    for (int s = 0; s < SC; ++s) {
      if (s >= p.s) break;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (r0 + j < p.r) out[(r0 + j) * p.ors + s * p.oss] = acc[s][j];
    }
  }
  if (gridDim.y > 1 && p.counter) thin_last_block_sum(p, 128);
}

// thin_axpy for any block (a ragged last one, L not 16-byte aligned) and any short side: one batch
// of loads at a time, the short operand's chunk between two barriers.
template <int SC>
__device__ __forceinline__ void thin_axpy_plain(const ThinArgs& p, float* sh) {
  constexpr int U = 8;  // k per batch of loads in flight (16 for one or two columns: no faster)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = blockIdx.x * 128 + lane * 4;
  const long long k0 = static_cast<long long>(blockIdx.y) * p.kslice;
  const int k1 = static_cast<int>(min(static_cast<long long>(p.k), k0 + p.kslice));
  float acc[SC][4];
#pragma unroll
  for (int s = 0; s < SC; ++s) acc[s][0] = acc[s][1] = acc[s][2] = acc[s][3] = 0.f;
  for (int kc = static_cast<int>(k0); kc < k1; kc += kThinChunk) {
    __syncthreads();  // the previous chunk's reads of sh are done
    thin_load_short<SC, false>(p, kc, k1, sh);
    __syncthreads();
    // This warp's 32 k of the chunk, every 8th from its own (so a short k still keeps every warp
    // busy: a product with k = 16 ran on one warp of eight, 4.7x slower than the tiles).
    const int kw = kc + warp;
    const float* shw = sh + warp * SC;
#pragma unroll 1
    for (int i = 0; i < 32; i += U) {
      if (kc + i * kThinWarps >= k1) break;
      float4 x[U];
#pragma unroll
      for (int u = 0; u < U; ++u) x[u] = thin_load4<true>(p, r0, kw + (i + u) * kThinWarps, k1);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float* w = shw + (i + u) * kThinWarps * SC;  // the same address in every lane: a broadcast
        float ws[SC];
        if constexpr (SC >= 4) {
#pragma unroll
          for (int s = 0; s < SC; s += 4) {
            const float4 q = *reinterpret_cast<const float4*>(w + s);
            ws[s] = q.x, ws[s + 1] = q.y, ws[s + 2] = q.z, ws[s + 3] = q.w;
          }
        } else {
#pragma unroll
          for (int s = 0; s < SC; ++s) ws[s] = w[s];
        }
#pragma unroll
        for (int s = 0; s < SC; ++s) {
          acc[s][0] = fmaf(x[u].x, ws[s], acc[s][0]);
          acc[s][1] = fmaf(x[u].y, ws[s], acc[s][1]);
          acc[s][2] = fmaf(x[u].z, ws[s], acc[s][2]);
          acc[s][3] = fmaf(x[u].w, ws[s], acc[s][3]);
        }
      }
    }
  }
  thin_axpy_finish<SC>(p, sh, acc);
}

// thin_axpy with its loads ahead of their use, for a block whose 128 rows are all in L and
// 16-byte aligned (each load one float4, or zeros past the slice) and at most 4 short columns:
// each warp's next batch of L (or the next chunk's first) is in flight while it multiplies the
// current one, and the short operand's next chunk is loaded into registers during this chunk and
// stored into the other of two shared buffers, so a chunk takes one barrier and no load waits
// behind it. thin_axpy_plain loads a batch, waits for it, multiplies, and loads the short chunk
// between two barriers with no L loads in flight. H100 (session 44, the kernel alone under the
// profiler): (1 x 4096) @ (4096 x 4096) in 8 slices 24.8 us against 25.9, (4 x 8192) @ (8192 x
// 2048) 23.6 against 25.7; queued, in 4 slices, 27.4 against 29.3 and 40.0 against 47.1. Two
// batches in flight take 100-128 registers: 4 rows a batch at 2 and 4 columns (8 spilled).
template <int SC>
__device__ __forceinline__ void thin_axpy_pipelined(const ThinArgs& p, float* sh) {
  static_assert(SC <= 4, "thin_axpy_pipelined: two batches of loads and the sums in 128 registers");
  constexpr int U = SC == 1 ? 8 : 4, kBatches = 32 / U;
  constexpr int kShortPerThread = kThinChunk * SC / kThinThreads;  // = SC
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = blockIdx.x * 128 + lane * 4;
  const long long k0 = static_cast<long long>(blockIdx.y) * p.kslice;
  const int k1 = static_cast<int>(min(static_cast<long long>(p.k), k0 + p.kslice));
  const float* lr = static_cast<const float*>(p.l) + r0;
  auto load_short = [&](int kc, float (&v)[kShortPerThread]) {  // this thread's elements of a chunk
#pragma unroll
    for (int j = 0; j < kShortPerThread; ++j) {
      int kl, s;
      v[j] = thin_short_element<SC>(p, kc, k1, threadIdx.x + j * kThinThreads, kl, s);
    }
  };
  float acc[SC][4];
#pragma unroll
  for (int s = 0; s < SC; ++s) acc[s][0] = acc[s][1] = acc[s][2] = acc[s][3] = 0.f;
  float4 x[U];
  float sv[kShortPerThread];
  int kc = static_cast<int>(k0);
  auto load_batch = [&](float4 (&v)[U], int k) {  // k, k + 8, ..., k + 8 (U - 1): this warp's
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ku = k + u * kThinWarps;
      v[u] = ku < k1 ? __ldcs(reinterpret_cast<const float4*>(lr + ku * p.ldl)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto fma_batch = [&](const float4 (&v)[U], const float* w) {  // w: the batch's short rows
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float* wu = w + u * kThinWarps * SC;  // the same address in every lane: a broadcast
      float ws[SC];
      if constexpr (SC >= 4) {
        const float4 q = *reinterpret_cast<const float4*>(wu);
        ws[0] = q.x, ws[1] = q.y, ws[2] = q.z, ws[3] = q.w;
      } else {
#pragma unroll
        for (int s = 0; s < SC; ++s) ws[s] = wu[s];
      }
#pragma unroll
      for (int s = 0; s < SC; ++s) {
        acc[s][0] = fmaf(v[u].x, ws[s], acc[s][0]);
        acc[s][1] = fmaf(v[u].y, ws[s], acc[s][1]);
        acc[s][2] = fmaf(v[u].z, ws[s], acc[s][2]);
        acc[s][3] = fmaf(v[u].w, ws[s], acc[s][3]);
      }
    }
  };
  if (kc < k1) {
    load_batch(x, kc + warp);
    load_short(kc, sv);
  }
  for (int buf = 0; kc < k1; kc += kThinChunk, buf ^= 1) {
    float* shb = sh + buf * kThinChunk * SC;
#pragma unroll
    for (int j = 0; j < kShortPerThread; ++j) {
      int kl, s;
      thin_short_place<SC>(p, threadIdx.x + j * kThinThreads, kl, s);
      shb[kl * SC + s] = sv[j];
    }
    __syncthreads();  // this chunk's short rows are in; the buffer written next was read two chunks ago
    const int next = kc + kThinChunk;
    if (next < k1) load_short(next, sv);
    const float* shw = shb + warp * SC;
    // Batches in pairs, x and y in turn: each batch's loads are issued before the other's FMAs.
    float4 y[U];
#pragma unroll 1
    for (int b = 0; b < kBatches; b += 2) {
      load_batch(y, kc + warp + (b + 1) * U * kThinWarps);
      fma_batch(x, shw + b * U * kThinWarps * SC);
      if (b + 2 < kBatches)
        load_batch(x, kc + warp + (b + 2) * U * kThinWarps);
      else if (next < k1)
        load_batch(x, next + warp);
      fma_batch(y, shw + (b + 1) * U * kThinWarps * SC);
    }
  }
  thin_axpy_finish<SC>(p, sh, acc);
}

template <int SC>
__device__ __forceinline__ void thin_axpy_body(const ThinArgs& p) {
  __shared__ __align__(16) float sh[thin_axpy_shared_floats<SC>()];
  if constexpr (SC <= 4)
    if (p.vec && (blockIdx.x + 1) * 128 <= p.r) return thin_axpy_pipelined<SC>(p, sh);
  thin_axpy_plain<SC>(p, sh);
}

// The sum of a thin product's slices (ThinSumArgs). One group (p.group = p.count): a thread per
// element of c, the parts added in slice order; consecutive threads walk the index that is
// contiguous in c. Several groups: a block per 32 elements of c, its warp w adding group w's parts
// in order (lanes along c's contiguous index), then warp 0 the groups' sums in group order. A
// product of 16 x 16 results in 256 slices (16 x 65536 @ 65536 x 16) took 32 rounds of 8 loads
// through L2 on one block's threads; in groups, 4 on 8 blocks.
__device__ __forceinline__ void thin_sum_body(const ThinSumArgs& p) {
  const long long total = static_cast<long long>(p.r) * p.s;
  const bool grouped = p.group < p.count;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long e =
      static_cast<long long>(blockIdx.x) * thin_sum_block_elements(grouped) + (grouped ? lane : threadIdx.x);
  long long r = 0, s = 0;
  if (p.ors == 1)
    r = e % p.r, s = e / p.r;
  else
    s = e % p.s, r = e / p.s;
  const float* w = static_cast<const float*>(p.parts) + r * p.prs + s * p.pss;
  if (!grouped) {
    if (e < total) static_cast<float*>(p.c)[r * p.ors + s * p.oss] = thin_sum_parts<false>(w, p.count, p.part_stride);
    return;
  }
  static_assert(kThinSumGroups == kThinWarps && kThinSumThreads == 32 * kThinWarps,
                "thin_sum: a group a warp of a 256-thread block");
  __shared__ float group_sums[kThinSumGroups][32];
  const int groups = (p.count + p.group - 1) / p.group, q0 = warp * p.group;
  if (warp < groups && e < total)
    group_sums[warp][lane] = thin_sum_parts<false>(w + q0 * p.part_stride, min(p.group, p.count - q0), p.part_stride);
  __syncthreads();
  if (warp == 0 && e < total) {
    float sum = group_sums[0][lane];
    for (int g = 1; g < groups; ++g) sum += group_sums[g][lane];
    static_cast<float*>(p.c)[r * p.ors + s * p.oss] = sum;
  }
}

}  // namespace
}  // namespace portmat::cuda
