// Strided-batched products, c[i] = a[i] @ b[i] for every matrix i of a stack, in one launch
// (numpy.matmul's stacks; issue 15), and the complex-to-real rewrite of b that lets complex
// products run on the real kernels.
//
// Matrix i of each operand starts i * stride elements after matrix 0 (GemmArgs::stride_a, _b, _c);
// a stride of 0 reads the same matrix for every i (a broadcast operand, read in place).
//  - Large matrices: the data-parallel tiles (_fpb, 64x64b, float64 64x64b) are the 2-D kernels'
//    bodies with blockIdx.y choosing the matrix (batch_member); the host launches at most 65535
//    matrices per grid.
//  - Small matrices (gemm_small_body, the _small kernels): one block of 64 threads computes a
//    32x32 tile of one matrix, 4x4 per thread, through 32-deep k slabs in shared memory. A 1-D grid
//    of matrices x tiles: a stack of 10000 32x32 products is 10000 blocks, up to ~24 resident per
//    SM, whose global loads hide each other's latency, so no cp.async ring is needed. Why not the
//    64x64 tile: a 32x32 product would leave three quarters of it idle, and the stack is bound by
//    memory (12 bytes of operands and result per 64 flops at 32^3), not arithmetic.
//  - split_sum_body: split-K (cuda_backend.cpp, launch_split): the pieces of one product over
//    slices of k are a stack of products into a workspace (the kernels above), and this kernel adds
//    them into c in a fixed order.
//  - complex_b_body: B'' (2K x 2N real, row-major) from a complex b (K x N), so that
//    [re c, im c] interleaved = [re a, im a] interleaved @ B'' (core/batch.hpp, complex_b, says why
//    this keeps NumPy's accuracy): every real kernel then multiplies complex matrices.
#pragma once

#include "gemm_common.cuh"

namespace portmat::cuda {
namespace {

// The arguments of matrix i of a strided batch.
template <class T>
__device__ __forceinline__ GemmArgs batch_member(const GemmArgs& p, long long i) {
  GemmArgs q = p;
  q.a = static_cast<const T*>(p.a) + i * p.stride_a;
  q.b = static_cast<const T*>(p.b) + i * p.stride_b;
  q.c = static_cast<T*>(p.c) + i * p.stride_c;
  if (p.k_last > 0 && i == gridDim.y - 1) q.k = p.k_last;
  return q;
}

constexpr int kSmallTile = 32;     // the tile: 32x32 of c, k slabs 32 deep
constexpr int kSmallThreads = 64;  // 8 x 8 threads, 4x4 of c each

// One operand's 32x32 slab into shared memory as s[r][c], c contiguous there: a's (m, k) or b's
// (k, n). In global memory element (r, c) is at g[r * ld + c] when ROW_CONTIG, else g[c * ld + r].
// Copied by cp.async, so no register holds the data in flight (with 16 blocks per SM a thread has
// 64 registers, too few to hold its loads): 16-byte copies along the contiguous side where `vec`
// (base and ld aligned) and the vector lies inside the matrix, element copies elsewhere; elements
// outside the matrix are zero-filled (src-size 0, reading nothing: g itself stands in as address).
template <class T, bool ROW_CONTIG, int S>
__device__ __forceinline__ void small_slab(const T* g, long long ld, int rows, int cols, int r0, int c0,
                                           bool vec, T (*s)[S]) {
  constexpr int V = 16 / sizeof(T);  // elements per 16-byte vector
  constexpr int kPerLine = kSmallTile / V;
  constexpr int kCopies = kSmallTile * kPerLine / kSmallThreads;
#pragma unroll
  for (int j = 0; j < kCopies; ++j) {
    const int idx = threadIdx.x + j * kSmallThreads;
    const int outer = idx / kPerLine, inner = (idx % kPerLine) * V;
    const int r = ROW_CONTIG ? outer : inner, c = ROW_CONTIG ? inner : outer;
    const int gr = r0 + r, gc = c0 + c;  // the vector's first element in the matrix
    // along the vector: columns gc.. (ROW_CONTIG) or rows gr..; across it: row gr or column gc
    const int along = ROW_CONTIG ? gc : gr, along_end = ROW_CONTIG ? cols : rows;
    const bool across_in = ROW_CONTIG ? gr < rows : gc < cols;
    const T* src = ROW_CONTIG ? g + gr * ld + gc : g + gc * ld + gr;
    if (ROW_CONTIG && vec && across_in && along + V <= along_end) {
      cp_async_16(&s[r][c], src, 16);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const bool in = across_in && along + e < along_end;
        T* dst = ROW_CONTIG ? &s[r][c + e] : &s[r + e][c];
        cp_async_elem<sizeof(T)>(dst, in ? src + e : g, in ? int(sizeof(T)) : 0);
      }
    }
  }
}

// Block blockIdx.x: matrix blockIdx.x / tiles, tile blockIdx.x % tiles (row by row), where tiles
// = ceil(m / 32) * ceil(n / 32); the grid's last matrix has k = k_last where that is set. A_KMAJOR: a row-major; B_KMAJOR: b column-major (gemm.cu's names).
template <class T, bool A_KMAJOR, bool B_KMAJOR>
__device__ __forceinline__ void gemm_small_body(const GemmArgs& p) {
  constexpr int T_ = kSmallTile, S = kSmallTile + 16 / sizeof(T);  // rows padded by 16 bytes
  __shared__ __align__(16) T As[T_][S];  // [m][k]
  __shared__ __align__(16) T Bs[T_][S];  // [k][n]
  const int tiles_n = (p.n + T_ - 1) / T_, tiles = ((p.m + T_ - 1) / T_) * tiles_n;
  const long long i = blockIdx.x / tiles;
  const int tile = blockIdx.x % tiles;
  const int m0 = tile / tiles_n * T_, n0 = tile % tiles_n * T_;
  const T* a = static_cast<const T*>(p.a) + i * p.stride_a;
  const T* b = static_cast<const T*>(p.b) + i * p.stride_b;
  T* c = static_cast<T*>(p.c) + i * p.stride_c;
  const int k = p.k_last > 0 && i == gridDim.x / tiles - 1 ? p.k_last : p.k;
  const int tx = threadIdx.x % 8, ty = threadIdx.x / 8;

  T acc[4][4];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[r][q] = T(0);

  for (int k0 = 0; k0 < k; k0 += T_) {
    small_slab<T, A_KMAJOR>(a, p.lda, p.m, k, m0, k0, p.a_vec, As);
    small_slab<T, !B_KMAJOR>(b, p.ldb, k, p.n, k0, n0, p.b_vec, Bs);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    // Two k per step (a's pairs as 8- or 16-byte loads): few enough registers (64 for float32) for
    // 16 blocks per SM, whose loads overlap each other's arithmetic.
#pragma unroll
    for (int kk = 0; kk < T_; kk += 2) {
      T av[4][2], bv[2][4];  // av[r][q] = a(row r, k kk + q); bv[q][j] = b(k kk + q, column j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        using T2 = std::conditional_t<sizeof(T) == 4, float2, double2>;
        const T2 x = *reinterpret_cast<const T2*>(&As[ty * 4 + r][kk]);
        av[r][0] = x.x, av[r][1] = x.y;
      }
#pragma unroll
      for (int q = 0; q < 2; ++q) lds4(&Bs[kk + q][tx * 4], bv[q], 0);
#pragma unroll
      for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[r][j] = fma(av[r][q], bv[q][j], acc[r][j]);
    }
    __syncthreads();
  }

  const int col = n0 + tx * 4;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = m0 + ty * 4 + r;
    if (row >= p.m) break;
    T* dst = c + row * p.ldc + col;
    if (p.c_vec && col + 4 <= p.n) {
      store4(dst, acc[r]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (col + j < p.n) dst[j] = acc[r][j];
    }
  }
}

// B'' of matrix blockIdx.y of a stack (ComplexBArgs): each thread one complex element b(k, n),
// read along b's contiguous side, written as the 2x2 real block [re im; -im re] at rows 2k, 2k + 1
// and columns 2n, 2n + 1 of the row-major (2K x 2N) result.
template <class T>
__device__ __forceinline__ void complex_b_body(const ComplexBArgs& p) {
  using T2 = std::conditional_t<sizeof(T) == 4, float2, double2>;
  const long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<long long>(p.k) * p.n) return;
  const long long matrix = blockIdx.y;
  const int k = p.b_col ? static_cast<int>(e % p.k) : static_cast<int>(e / p.n);
  const int n = p.b_col ? static_cast<int>(e / p.k) : static_cast<int>(e % p.n);
  const T2* b = static_cast<const T2*>(p.b) + matrix * p.stride_b;
  const T2 v = p.b_col ? b[n * p.ldb + k] : b[k * p.ldb + n];
  T2* out = static_cast<T2*>(p.out) + matrix * p.stride_out;  // rows of 2N reals = N pairs
  out[(2LL * k) * p.n + n] = v;
  T2 w;
  w.x = -v.y, w.y = v.x;
  out[(2LL * k + 1) * p.n + n] = w;
}

// A split-K product's sum (SplitSumArgs), a launch of its own after the stack of its parts. A unit
// of c is four adjacent elements (vec) or one; p.groups threads share a unit (split_sum_groups),
// thread g adding the parts of its run [g * per, (g + 1) * per) in index order (its loads in flight
// together), then the first adds the runs' sums in run order through shared memory: the same
// result on every run. A block of kSplitSumThreads holds kSplitSumThreads / groups units.
__device__ __forceinline__ void split_sum_body(const SplitSumArgs& p) {
  __shared__ float4 runs[kSplitSumThreads];
  const int G = p.groups, units_per_block = kSplitSumThreads / G;
  const int g = static_cast<int>(threadIdx.x) / units_per_block, ul = static_cast<int>(threadIdx.x) % units_per_block;
  const long long u = static_cast<long long>(blockIdx.x) * units_per_block + ul;
  const long long n_units = p.vec ? p.n / 4 : p.n;
  const bool live = u < static_cast<long long>(p.m) * n_units;
  const int per = (p.count + G - 1) / G, q0 = g * per, q1 = min(p.count, q0 + per);
  const long long row = live ? u / n_units : 0, col = live ? (u % n_units) * (p.vec ? 4 : 1) : 0;
  const float* w = static_cast<const float*>(p.parts) + row * p.n + col;
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
  // The run kSplitSumPartsPerThread parts at a time, their loads in flight together before the
  // first add (a loop, or the remainder of an unrolled one, waited for each in turn), in order.
  for (int q = live ? q0 : q1; q < q1; q += kSplitSumPartsPerThread) {
    float4 v[kSplitSumPartsPerThread];
#pragma unroll
    for (int u = 0; u < kSplitSumPartsPerThread; ++u)
      v[u] = q + u >= q1 ? make_float4(0.f, 0.f, 0.f, 0.f)
             : p.vec     ? *reinterpret_cast<const float4*>(w + (q + u) * p.part_stride)
                         : make_float4(w[(q + u) * p.part_stride], 0.f, 0.f, 0.f);
#pragma unroll
    for (int u = 0; u < kSplitSumPartsPerThread; ++u)
      if (q + u < q1) {
        if (q + u == q0)
          s = v[u];
        else
          s.x += v[u].x, s.y += v[u].y, s.z += v[u].z, s.w += v[u].w;
      }
  }
  if (G > 1) {
    runs[threadIdx.x] = s;
    __syncthreads();
    if (g != 0) return;
    for (int h = 1; h < G && h * per < p.count; ++h) {
      const float4 v = runs[h * units_per_block + ul];
      s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
  }
  if (!live) return;
  float* c = static_cast<float*>(p.c) + row * p.ldc + col;
  if (p.vec)
    *reinterpret_cast<float4*>(c) = s;
  else
    *c = s.x;
}

}  // namespace
}  // namespace portmat::cuda
