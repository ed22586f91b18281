// The pieces that every family of gemm kernels shares. gemm.cu, the one translation unit of the
// fatbin, includes this header and then one header per family (gemm_body.cuh, gemm_body_db.cuh,
// gemm_body_fp.cuh, gemm_body_ws.cuh); gemm.cu also states the contract they all implement.
// Here: the cp.async wrappers, the shared-memory fragment loads and the outer-product k step, the
// stores and the epilogue (store_acc), the block swizzle, the slab copies (SlabLoader), and the
// stream-K part schedule and hand-over protocol that both the _sk kernels (gemm_body_fp) and the
// _wsk kernels (gemm_body_ws) follow. Everything is device code in an anonymous namespace, inlined
// into the kernels of gemm.cu: not meant for any other translation unit.
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

#include "gemm_tiles.h"

namespace portmat::cuda {
namespace {

// Programmatic dependent launch (sm_90 and later; the host launches every kernel with
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, cuda_backend.cpp launch_kernel): the next
// kernel on the stream is launched as soon as every block of this one has exited, before the
// memory flush and the stream's own bookkeeping, so that part of the launch latency between two
// short products (1-2 us of an 8 us product at n = 256) overlaps the first. Every kernel's entry
// point (gemm.cu) calls this first, before it touches global memory: the wait returns once the
// grid before it has completed and its writes are visible. Without a prerequisite grid (a launch
// without the attribute, or the first on its stream) it returns at once; before sm_90 it is left
// out. No kernel triggers its dependents early (griddepcontrol.launch_dependents): the next grid
// would then be placed in the SMs' free slots while this one runs and refill the rest greedily,
// three blocks on some SMs where two an SM were meant (H100, session 43: (8192 x 256) @ (256 x
// 256) 40.9 us with the trigger at the kernel's start, 30.3 at its exit; docs/cuda.md, "Launches
// that overlap").
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16-byte copy; bytes past src_bytes (0..16) are filled with zeros and not read.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
template <int BYTES>
__device__ __forceinline__ void cp_async_elem(void* dst, const void* src, int src_bytes) {
  static_assert(BYTES == 4 || BYTES == 8, "element copies are 4 or 8 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src),
               "n"(BYTES), "r"(src_bytes));
}
// A whole element copy from src + OFF bytes (OFF an immediate in the instruction's address).
template <int BYTES, int OFF>
__device__ __forceinline__ void cp_async_elem_at(void* dst, const void* src) {
  static_assert(BYTES == 4 || BYTES == 8, "element copies are 4 or 8 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1+%2], %3;\n" ::"r"(smem_addr(dst)), "l"(src),
               "n"(OFF), "n"(BYTES));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four consecutive elements from 16-byte-aligned shared memory.
template <int N>
__device__ __forceinline__ void lds4(const float* p, float (&v)[N], int at) {
  const float4 x = *reinterpret_cast<const float4*>(p);
  v[at] = x.x, v[at + 1] = x.y, v[at + 2] = x.z, v[at + 3] = x.w;
}
template <int N>
__device__ __forceinline__ void lds4(const double* p, double (&v)[N], int at) {
  const double2 x = reinterpret_cast<const double2*>(p)[0], y = reinterpret_cast<const double2*>(p)[1];
  v[at] = x.x, v[at + 1] = x.y, v[at + 2] = y.x, v[at + 3] = y.y;
}
template <int N>
__device__ __forceinline__ void lds4(const unsigned* p, unsigned (&v)[N], int at) {
  const uint4 x = *reinterpret_cast<const uint4*>(p);
  v[at] = x.x, v[at + 1] = x.y, v[at + 2] = x.z, v[at + 3] = x.w;
}
template <int N>
__device__ __forceinline__ void lds4(const unsigned long long* p, unsigned long long (&v)[N], int at) {
  const ulonglong2 x = reinterpret_cast<const ulonglong2*>(p)[0], y = reinterpret_cast<const ulonglong2*>(p)[1];
  v[at] = x.x, v[at + 1] = x.y, v[at + 2] = y.x, v[at + 3] = y.y;
}

// One multiply-add: FMA for floating point (one rounding, as the CPU kernels), the wrapping
// product and sum for the unsigned integers that carry every integer dtype (int32 and uint32 are
// the same bits modulo 2^32; core/matmul.cpp, route()).
__device__ __forceinline__ float madd(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double madd(double a, double b, double c) { return fma(a, b, c); }
__device__ __forceinline__ unsigned madd(unsigned a, unsigned b, unsigned c) { return a * b + c; }
__device__ __forceinline__ unsigned long long madd(unsigned long long a, unsigned long long b, unsigned long long c) {
  return a * b + c;
}

// A thread's fragment of one k step from a shared-memory row: R groups of 4 consecutive elements,
// 4 * L apart (L: the lanes along that side of the warp tile).
template <int R, int L, class T, int N>
__device__ __forceinline__ void lds_fragment(const T* row, T (&v)[N]) {
#pragma unroll
  for (int r = 0; r < R; ++r) lds4(row + r * 4 * L, v, 4 * r);
}

// One k step of a thread's register tile: acc += a (column) x b (row), one FMA per entry. With
// SERPENTINE the odd rows run right to left (gemm_body_fp's SCHED says why the order matters).
template <bool SERPENTINE = false, class T, int MI, int NJ>
__device__ __forceinline__ void outer_fma(T (&acc)[MI][NJ], const T (&a)[MI], const T (&b)[NJ]) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) {
      const int j = SERPENTINE && i % 2 ? NJ - 1 - jj : jj;
      acc[i][j] = madd(a[i], b[j], acc[i][j]);
    }
}

__device__ __forceinline__ void store4(float* p, const float* v) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(double* p, const double* v) {
  reinterpret_cast<double2*>(p)[0] = make_double2(v[0], v[1]);
  reinterpret_cast<double2*>(p)[1] = make_double2(v[2], v[3]);
}
__device__ __forceinline__ void store4(unsigned* p, const unsigned* v) {
  *reinterpret_cast<uint4*>(p) = make_uint4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(unsigned long long* p, const unsigned long long* v) {
  reinterpret_cast<ulonglong2*>(p)[0] = make_ulonglong2(v[0], v[1]);
  reinterpret_cast<ulonglong2*>(p)[1] = make_ulonglong2(v[2], v[3]);
}

// c[0..3] += v[0..3] (global memory, relaxed, no return value): one 16-byte reduction on sm_90,
// four 4-byte ones before.
__device__ __forceinline__ void red_add4(float* c, const float* v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(c), "f"(v[0]), "f"(v[1]),
               "f"(v[2]), "f"(v[3])
               : "memory");
#else
  for (int j = 0; j < 4; ++j) atomicAdd(c + j, v[j]);
#endif
}

// Block swizzle, shared by every kernel here: block `pid` computes the BM x BN tile at (m0, n0);
// consecutive block ids walk down a group of `group_m` tile rows before moving right, so the
// blocks resident at one time read few distinct a-panels and b-panels.
struct TileOrigin {
  int m0, n0;
};
template <int BM, int BN>
__device__ __forceinline__ TileOrigin swizzled_tile(const GemmArgs& p, int pid) {
  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int width = p.group_m * tiles_n;
  const int first_m = (pid / width) * p.group_m;
  const int group_rows = min(tiles_m - first_m, p.group_m);
  return TileOrigin{(first_m + (pid % width) % group_rows) * BM, ((pid % width) / group_rows) * BN};
}

// The epilogue of every kernel here: this thread's accumulators acc[i][4r .. 4r+3] go to row
// row_of(i) of c, columns col0 + r * 4 * LN .. + 3; 4-wide where the row is aligned and whole,
// element by element at the edges, nothing past c's last row or column. With `add` (compiled in
// only where MAY_ADD: the stream-K kernels, float32) they are added to c instead of stored.
template <class T, int RM, int RN, int LN, bool MAY_ADD = false, class RowOf>
__device__ __forceinline__ void store_acc(const GemmArgs& p, const T (&acc)[4 * RM][4 * RN],
                                          RowOf row_of, int col0, bool add = false) {
  T* c = static_cast<T*>(p.c);
#pragma unroll
  for (int i = 0; i < 4 * RM; ++i) {
    const int row = row_of(i);
    if (row >= p.m) continue;
    T* crow = c + row * p.ldc;
#pragma unroll
    for (int r = 0; r < RN; ++r) {
      const int col = col0 + r * 4 * LN;
      if (p.c_vec && col + 3 < p.n) {
        if constexpr (MAY_ADD) {
          if (add) {
            red_add4(crow + col, &acc[i][4 * r]);
            continue;
          }
        }
        store4(crow + col, &acc[i][4 * r]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (col + j < p.n) {
            if constexpr (MAY_ADD) {
              if (add) {
                atomicAdd(crow + col + j, acc[i][4 * r + j]);
                continue;
              }
            }
            crow[col + j] = acc[i][4 * r + j];
          }
      }
    }
  }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Thread-block clusters (sm_90). cluster_barrier: every thread of every block of the cluster waits
// until all have arrived, and the shared-memory writes before it are visible to the reads after.
__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ unsigned cluster_rank() {  // this block's rank in its cluster
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
__device__ __forceinline__ unsigned cluster_blocks() {  // the blocks of the cluster
  unsigned blocks;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(blocks));
  return blocks;
}
// The address, in the cluster's shared window, of block `rank`'s variable at this block's shared
// address `at` (for ld.shared::cluster).
__device__ __forceinline__ unsigned cluster_map(unsigned at, int rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(at), "r"(rank));
  return remote;
}
#endif

// Split-K in one launch, the epilogue of the cluster kernel (GemmTile::cluster: 64x64c;
// sm_90 thread-block clusters; cuda_backend.cpp, launch_split). The launch's clusters are 1 x p x 1
// blocks: the p slices of k (blockIdx.y) of one tile (blockIdx.x), each holding its slice's partial
// tile in registers. Each block writes its part into its own shared memory as a dense BM x BN
// tile (`tile`, the pipeline's buffers, free once every warp is past the k loop); after a cluster
// barrier, the block of rank r sums rows r, r + p, r + 2p, ... of the tile over all p blocks'
// shared memory (distributed shared memory: mapa, ld.shared::cluster), parts in slice order, and
// stores them to c; a second barrier keeps every block's shared memory alive until the others
// have read it. What split_sum (gemm_batched.cuh) does, without the parts' round trip through
// global memory or a second launch, and with the same additions in the same order: the result is
// the same on every run. row_of(i): the row of c of acc[i]; col0: this thread's first column
// (store_acc's contract); m0, n0: the tile's origin.
template <int BM, int BN, int THREADS, int RM, int RN, int LN, class RowOf>
__device__ __forceinline__ void cluster_sum_store(const GemmArgs& p, const float (&acc)[4 * RM][4 * RN],
                                                  RowOf row_of, int col0, int m0, int n0, float* tile) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __syncthreads();  // every warp is done reading the pipeline's buffers
#pragma unroll
  for (int i = 0; i < 4 * RM; ++i)
#pragma unroll
    for (int r = 0; r < RN; ++r) store4(tile + (row_of(i) - m0) * BN + (col0 - n0) + r * 4 * LN, &acc[i][4 * r]);
  cluster_barrier();
  const unsigned rank = cluster_rank(), parts = cluster_blocks();
  unsigned base[kClusterMaxSlices];  // each block's tile in the cluster's shared window
#pragma unroll
  for (int q = 0; q < kClusterMaxSlices; ++q)
    if (q < static_cast<int>(parts)) base[q] = cluster_map(smem_addr(tile), q);
  constexpr int kVecs = BN / 4;  // float4s per row
  const int rows = min(BM, p.m - m0), cols = min(BN, p.n - n0);
  const int mine = rows > static_cast<int>(rank) ? (rows - static_cast<int>(rank) + parts - 1) / parts : 0;
  float* c = static_cast<float*>(p.c);
  for (int e = threadIdx.x; e < mine * kVecs; e += THREADS) {
    const int row = static_cast<int>(rank) + (e / kVecs) * static_cast<int>(parts), col = (e % kVecs) * 4;
    if (col >= cols) continue;
    const unsigned off = static_cast<unsigned>((row * BN + col) * sizeof(float));
    float s[4], v[4];
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(s[0]), "=f"(s[1]), "=f"(s[2]), "=f"(s[3]) : "r"(base[0] + off));
#pragma unroll
    for (int q = 1; q < kClusterMaxSlices; ++q) {
      if (q >= static_cast<int>(parts)) break;
      asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]) : "r"(base[q] + off));
#pragma unroll
      for (int j = 0; j < 4; ++j) s[j] += v[j];
    }
    float* dst = c + static_cast<long long>(m0 + row) * p.ldc + n0 + col;
    if (p.c_vec && col + 3 < cols) {
      store4(dst, s);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (col + j < cols) dst[j] = s[j];
    }
  }
  cluster_barrier();
#else
  __trap();  // the host launches cluster kernels on sm_90 and later only
#endif
}

// Copies one bk-deep slab of an operand into shared memory. `ROWS` is the operand's extent along
// M (for a) or N (for b): the index that is contiguous in shared memory (stride `S` per k).
// K_MAJOR: the global layout has k contiguous (element (r, k) at g[r * ld + k]); otherwise r is
// contiguous (g[k * ld + r]). A thread's pieces sit at compile-time distances from its first one,
// so the per-slab cost is a few address adds and the copies themselves.
template <class T, int ROWS, int BK, int S, int THREADS, bool K_MAJOR>
struct SlabLoader {
  static constexpr int kChunk = 16 / sizeof(T);  // elements per 16-byte copy
  // K_MAJOR: element copies, k fastest in groups of 8: a warp stores 4 rows x 8 k, which with the
  // row stride S = ROWS + 4 are 32 different banks (float32). Piece i of thread tid is element
  // e = i * THREADS + tid: row (e / 8) % ROWS, k (e / (8 ROWS)) * 8 + e % 8.
  static constexpr int kKGroup = 8;
  static constexpr int kRowsPerPass = THREADS / kKGroup;  // rows one pass of all threads covers
  // Otherwise: 16-byte chunks, a row of the slab is ROWS / kChunk chunks; piece i of thread tid is
  // chunk tid % kChunksPerK of k = i * kKPerPass + tid / kChunksPerK.
  static constexpr int kChunksPerK = ROWS / kChunk;
  static constexpr int kKPerPass = THREADS / kChunksPerK;
  static constexpr int kPer = K_MAJOR ? ROWS * BK / THREADS : BK * kChunksPerK / THREADS;
  static_assert(BK % kKGroup == 0, "bk must be a multiple of 8");
  static_assert(ROWS % kChunk == 0, "tile rows must be whole 16-byte chunks");
  static_assert(!K_MAJOR || (ROWS % kRowsPerPass == 0 && (kKGroup * ROWS) % THREADS == 0),
                "k-major pieces must sit at fixed distances");
  static_assert(K_MAJOR || (THREADS % kChunksPerK == 0 && BK % kKPerPass == 0),
                "m-contiguous pieces must sit at fixed distances");

  const T* base;  // the operand: the (unread) source of zero-filling copies
  const T* g;     // this thread's first piece in k-slab 0 (may point outside: used only when ok)
  long long ld;
  int r;          // this thread's first row (absolute)
  int kq;         // this thread's first k within a slab
  int rows, k, vec;

  __device__ __forceinline__ SlabLoader(const T* g_, long long ld_, int rows_, int k_, int vec_,
                                        int r0, int tid)
      : base(g_), ld(ld_), rows(rows_), k(k_), vec(vec_) {
    if constexpr (K_MAJOR) {
      r = r0 + tid / kKGroup;
      kq = tid % kKGroup;
      g = g_ + r * ld + kq;
    } else {
      r = r0 + (tid % kChunksPerK) * kChunk;
      kq = tid / kChunksPerK;
      g = g_ + kq * ld + r;
    }
  }

  __device__ __forceinline__ void load(T* slab, int r0, int k0, bool full) const {
    if constexpr (K_MAJOR) {
      const T* src0 = g + k0;
      T* dst0 = slab + kq * S + (r - r0);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        constexpr int kPassesPerK = ROWS / kRowsPerPass;
        const int dr = (i % kPassesPerK) * kRowsPerPass, dk = (i / kPassesPerK) * kKGroup;
        const bool ok = full || (r + dr < rows && k0 + kq + dk < k);
        cp_async_elem<sizeof(T)>(dst0 + dk * S + dr, ok ? src0 + dr * ld + dk : base,
                                 ok ? int(sizeof(T)) : 0);
      }
    } else {
      const T* src0 = g + k0 * ld;
      T* dst0 = slab + kq * S + (r - r0);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int dk = i * kKPerPass;
        const int gk = k0 + kq + dk;
        if (full && vec) {
          cp_async_16(dst0 + dk * S, src0 + dk * ld, 16);
        } else if (vec) {
          const int valid = gk < k ? min(max(rows - r, 0), kChunk) : 0;
          cp_async_16(dst0 + dk * S, valid ? src0 + dk * ld : base, valid * int(sizeof(T)));
        } else {
#pragma unroll
          for (int j = 0; j < kChunk; ++j) {
            const bool ok = gk < k && r + j < rows;
            cp_async_elem<sizeof(T)>(dst0 + dk * S + j, ok ? src0 + dk * ld + j : base,
                                     ok ? int(sizeof(T)) : 0);
          }
        }
      }
    }
  }

  // The same copies for a slab with no edge (rows, k and, for 16-byte copies, alignment all
  // checked by the caller): no predicates, no selects. `src` is this thread's first piece of the
  // slab (g + k0, or g + k0 * ld), a running pointer: it is left at the next slab's first piece.
  // The pieces of one row pass (k-major) sit at compile-time distances (immediate offsets in the
  // copy); the passes, and the k rows of an m-contiguous operand, are a fixed multiple of ld apart
  // (one 64-bit add each; the last of these adds is the step to the next slab).
  __device__ __forceinline__ void load_full(T* slab, int r0, const T*& src) const {
    T* dst0 = slab + kq * S + (r - r0);
    if constexpr (K_MAJOR) {
      constexpr int kPassesPerK = ROWS / kRowsPerPass;
      const long long pass_step = kRowsPerPass * ld;
      const T* row = src;
#pragma unroll
      for (int j = 0; j < kPassesPerK; ++j, row += pass_step)
        copy_row(dst0 + j * kRowsPerPass, row, std::make_integer_sequence<int, BK / kKGroup>{});
      src += BK;
    } else {
      const long long k_step = kKPerPass * ld;
#pragma unroll
      for (int i = 0; i < kPer; ++i, src += k_step) cp_async_16(dst0 + i * kKPerPass * S, src, 16);
    }
  }
  // K_MAJOR, one row pass of load_full: the row's k groups, kKGroup elements apart.
  template <int... I>
  __device__ __forceinline__ static void copy_row(T* dst, const T* src, std::integer_sequence<int, I...>) {
    (cp_async_elem_at<sizeof(T), I * kKGroup * int(sizeof(T))>(dst + I * kKGroup * S, src), ...);
  }
  // Elements between the first pieces of consecutive slabs.
  __device__ __forceinline__ long long slab_step() const { return K_MAJOR ? BK : BK * ld; }
};

// ---- stream-K: shared by gemm_body_fp and gemm_body_ws (SK: the _sk and _wsk kernels) -----------
// Stream-K (gemm_body_fp with SK): the stream-K kernels see only the last sk_tiles tiles
// (swizzled indices sk_first ..; the host runs the tiles before them as a separate launch of the
// data-parallel _fp kernel). Block i of sk_blocks takes an equal run of those tiles' sk_tiles *
// k_tiles slabs (tile-major, at least one slab): sk_parts() parts, each slabs [kb, ke) of one
// tile pid: the tail of its first tile, whole tiles, the head of its last tile (or, for a run
// inside one tile, a single middle part).
struct SkPart {
  int pid, kb, ke;
};
__device__ __forceinline__ long long sk_run_begin(const GemmArgs& p, int ctaid, int k_tiles) {
  return ctaid * (static_cast<long long>(p.sk_tiles) * k_tiles) / p.sk_blocks;
}
__device__ __forceinline__ int sk_parts(const GemmArgs& p, int ctaid, int k_tiles) {
  const long long s = sk_run_begin(p, ctaid, k_tiles), e = sk_run_begin(p, ctaid + 1, k_tiles);
  return static_cast<int>((e - 1) / k_tiles - s / k_tiles) + 1;
}
__device__ __forceinline__ SkPart sk_part(const GemmArgs& p, int ctaid, int q, int k_tiles) {
  const long long s = sk_run_begin(p, ctaid, k_tiles), e = sk_run_begin(p, ctaid + 1, k_tiles);
  const int tile = static_cast<int>(s / k_tiles) + q;
  const long long t0 = static_cast<long long>(tile) * k_tiles;
  const int kb = q == 0 ? static_cast<int>(s - t0) : 0;
  const int ke = static_cast<int>(min(static_cast<long long>(k_tiles), e - t0));
  return SkPart{p.sk_first + tile, kb, ke};
}

// A split tile's parts meet in c without zeroing it first, in k order: the block with slabs
// [0, x) of the tile stores them; each later part (block i + 1 after block i) waits for
// sk_flags[i], raised by block i once its part is in c, clears it for the next launch on the
// stream and adds its sums to c (reductions in L2); a part that ends before the tile's last slab
// raises its own block's flag. So c = ((head + middle) + tail) on every run (deterministic). A
// block runs its parts last to first: the head of its last tile, which waits for nobody, comes
// first, and a block only ever waits for a lower-numbered one, which the hardware started no
// later than itself, so the waits end (they are short: a head is done before the next block's
// part is computed). A wait of over a minute means a broken invariant: the kernel faults (a
// launch error) rather than hang.
// sync: the barrier over the threads that store c (__syncthreads, or the computing warps' named
// barrier in gemm_body_ws).
struct BlockSync {
  __device__ void operator()() const { __syncthreads(); }
};
template <class Sync = BlockSync>
__device__ __forceinline__ void sk_signal(int* flag, Sync sync = {}) {
  __threadfence();  // this thread's stores of the head, visible at device scope
  sync();           // ... for every thread of the block
  if (threadIdx.x == 0) asm volatile("st.release.gpu.global.b32 [%0], 1;\n" ::"l"(flag) : "memory");
}
template <class Sync = BlockSync>
__device__ __forceinline__ void sk_wait(int* flag, Sync sync = {}) {
  if (threadIdx.x == 0) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int v = 0;;) {
      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
      if (v) break;
      __nanosleep(256);
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      if (t - t0 > 60ull * 1000000000ull) {  // a broken invariant: fail the launch
        asm volatile("st.global.u32 [%0], 0;\n" ::"l"(0ull) : "memory");  // (a trap here would
        break;  // keep ptxas from giving gemm_body_ws's computing warps their setmaxnreg budget)
      }
    }
    *reinterpret_cast<volatile int*>(flag) = 0;
  }
  sync();
}

}  // namespace
}  // namespace portmat::cuda
