// gemm_direct.cl: C = A * B for CPU OpenCL runtimes, with the arguments, dtypes, layouts and stacks
// of gemm.cl, and no local memory or barriers.
//
// gemm.cl stages slices of A and B in local memory behind barriers: on a GPU that is the point,
// on a CPU runtime local memory is ordinary memory and every barrier splits the work-group's loop.
// Here there is neither. Two forms, by who vectorizes:
// - VECW = 1, the runtime (Intel's OpenCL CPU runtime): work-item (j, i) computes column j of C over
//   MWG rows from i * MWG; the work-items of a work-group (NDIMC wide along dimension 0, one high)
//   take consecutive columns, so a runtime that packs neighbouring work-items into SIMD lanes loads
//   B's row segment as one vector and broadcasts each element of A to every lane, keeping MWG
//   vector accumulators. PoCL does not vectorize it (5.9 GFLOP/s at n = 1024 against 57 on
//   Intel's, same machine).
// - VECW > 1, the kernel itself (PoCL): work-item (j, i) computes an MWG x (NVEC * VECW) tile of C
//   in OpenCL vector types, NVEC vectors of B's row per k against each of MWG broadcast elements
//   of A: the register tile of a CPU GEMM's micro-kernel. Work-groups are NDIMC x MDIMC tiles, so
//   that the work-items a runtime runs one after another share A's rows (along dimension 0) and,
//   across the group's rows, B's columns in cache. With PACKED = 1 the program also holds pack_a
//   and pack_b, which the host runs first (opencl_backend.cpp, enqueue_gemm_packed): A's rows in
//   panels of MWG and B's columns in panels of NVEC * VECW, each k-major, so that the product reads
//   two contiguous streams with no edge code (unpacked, B is read down a column strip, one line
//   and soon one page a row, and A along rows one leading dimension apart).
// Any M, N, K (rows past M and columns past N are skipped).
//
// Chosen per device by gemm_params.cpp (DIRECT=1).

// ---- tunables -----------------------------------------------------------------------------------
#ifndef REAL_KIND
#define REAL_KIND 0  // 0: float32, 1: float64, 2: uint (32-bit), 3: ulong (64-bit), as in gemm.cl
#endif
#ifndef MWG
#define MWG 8  // rows of C per work-item: the vector accumulators each keeps
#endif
#ifndef VECW
#define VECW 1  // 1: the runtime vectorizes across work-items; 2, 4, 8 or 16: each work-item's columns
                // as vectors of VECW (see above)
#endif
#ifndef NVEC
#define NVEC 1  // with VECW > 1: vectors of C's columns per work-item (its tile is MWG x NVEC*VECW)
#endif
#ifndef PACKED
#define PACKED 0  // with VECW > 1: A and B arrive as the panels pack_a and pack_b (below) write
#endif
#ifndef A_COL_MAJOR
#define A_COL_MAJOR 0  // 1: A(i,k) at A[k*lda + i] (a transposed view)
#endif
#ifndef B_COL_MAJOR
#define B_COL_MAJOR 0  // 1: B(k,j) at B[j*ldb + k]
#endif

// ---- derived ------------------------------------------------------------------------------------
#if REAL_KIND == 1
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define REAL double
#elif REAL_KIND == 2
#define REAL uint
#elif REAL_KIND == 3
#define REAL ulong
#else
#define REAL float
#endif
typedef REAL real;
#if REAL_KIND >= 2
#define MADD(a, b, c) ((a) * (b) + (c))
#else
#define MADD(a, b, c) fma((a), (b), (c))
#endif
// Indices within one matrix are ints: the host uses this kernel only for matrices that span fewer
// than 2^31 elements (long index arithmetic kept Intel's compiler from vectorizing: 57 -> 10-14
// GFLOP/s, as did `restrict` and moving the argument pointers themselves).
#if A_COL_MAJOR
#define A_AT(i, k) a[(k) * lda + (i)]
#else
#define A_AT(i, k) a[(i) * lda + (k)]
#endif
#if B_COL_MAJOR
#define B_AT(k, j) b[(j) * ldb + (k)]
#else
#define B_AT(k, j) b[(k) * ldb + (j)]
#endif

#if VECW > 1
#ifdef __clang__  // PoCL's and Intel's compilers: each vloadN / vstoreN (inlined) warned, on stderr,
#pragma clang diagnostic ignored "-Wpsabi"  // that a vector return without AVX changes the ABI
#pragma clang diagnostic ignored "-Wpass-failed"  // and that an UNROLL hint could not be taken
#endif
#if VECW != 2 && VECW != 4 && VECW != 8 && VECW != 16
#error "VECW must be 1, 2, 4, 8 or 16"
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define REALV CAT(REAL, VECW)  // e.g. float8
#define VLOADV CAT(vload, VECW)
#define VSTOREV CAT(vstore, VECW)
#define TILE_N (NVEC * VECW)  // columns of C per work-item
#define UNROLL _Pragma("unroll")  // the tile's loops unrolled, so that acc stays in registers

#if PACKED
// A's rows in panels of MWG, k-major: P[(p * K + k) * MWG + r] = A(p * MWG + r, k), 0 past M. A
// work-item per (k, panel): any work-group size.
__kernel void pack_a(const int M, const int K, __global const real* A, const long a_offset, const int lda,
                     __global real* P) {
  const int k = get_global_id(0), p = get_global_id(1);
  if (k >= K) return;
  __global const real* a = A + a_offset;
  __global real* out = P + ((long)p * K + k) * MWG;
  UNROLL for (int r = 0; r < MWG; ++r) {
    const int i = p * MWG + r;
    out[r] = i < M ? A_AT(i, k) : (real)0;
  }
}

// B's columns in panels of TILE_N, k-major: P[(q * K + k) * TILE_N + x] = B(k, q * TILE_N + x), 0
// past N.
__kernel void pack_b(const int N, const int K, __global const real* B, const long b_offset, const int ldb,
                     __global real* P) {
  const int k = get_global_id(0), q = get_global_id(1);
  if (k >= K) return;
  __global const real* b = B + b_offset;
  __global real* out = P + ((long)q * K + k) * TILE_N;
  UNROLL for (int x = 0; x < TILE_N; ++x) {
    const int j = q * TILE_N + x;
    out[x] = j < N ? B_AT(k, j) : (real)0;
  }
}

// The product of the panels: work-item (q, p) multiplies A's panel p by B's panel q, two
// contiguous streams with no edges; only the stores of the last rows and columns are guarded.
// The arguments are gemm's (A and B the panels; offsets, leading dimensions and strides unused).
__kernel void gemm(const int M, const int N, const int K,
                   __global const real* A, const long a_offset, const int lda,
                   __global const real* B, const long b_offset, const int ldb,
                   __global real* C, const long c_offset, const int ldc,
                   const long a_stride, const long b_stride, const long c_stride) {
  const int q = get_global_id(0), p = get_global_id(1);
  const int j0 = q * TILE_N, i0 = p * MWG;
  if (j0 >= N || i0 >= M) return;
  __global const real* a = A + (long)p * K * MWG;
  __global const real* b = B + (long)q * K * TILE_N;
  __global real* c = C + c_offset;
  REALV acc[MWG][NVEC];
  UNROLL for (int r = 0; r < MWG; ++r)
    UNROLL for (int v = 0; v < NVEC; ++v) acc[r][v] = (REALV)(0);
  for (int k = 0; k < K; ++k) {
    REALV bv[NVEC];
    UNROLL for (int v = 0; v < NVEC; ++v) bv[v] = VLOADV(v, b + k * TILE_N);
    UNROLL for (int r = 0; r < MWG; ++r) {
      const REALV av = (REALV)(a[k * MWG + r]);
      UNROLL for (int v = 0; v < NVEC; ++v) acc[r][v] = MADD(av, bv[v], acc[r][v]);
    }
  }
  const int rows = min(MWG, M - i0), cols = min(TILE_N, N - j0);
  UNROLL for (int r = 0; r < MWG; ++r) {
    if (r >= rows) break;
    if (cols == TILE_N) {
      UNROLL for (int v = 0; v < NVEC; ++v) VSTOREV(acc[r][v], v, c + ((i0 + r) * ldc + j0));
    } else {
      real row[TILE_N];
      UNROLL for (int v = 0; v < NVEC; ++v) VSTOREV(acc[r][v], v, row);
      for (int x = 0; x < cols; ++x) c[(i0 + r) * ldc + j0 + x] = row[x];
    }
  }
}

#else  // !PACKED

__kernel void gemm(const int M, const int N, const int K,
                   __global const real* A, const long a_offset, const int lda,
                   __global const real* B, const long b_offset, const int ldb,
                   __global real* C, const long c_offset, const int ldc,
                   const long a_stride, const long b_stride, const long c_stride) {
  const int j0 = get_global_id(0) * TILE_N;
  const int i0 = get_global_id(1) * MWG;
  if (j0 >= N || i0 >= M) return;
  const long batch = get_global_id(2);
  __global const real* a = A + (a_offset + batch * a_stride);  // this product's matrices
  __global const real* b = B + (b_offset + batch * b_stride);
  __global real* c = C + (c_offset + batch * c_stride);
  REALV acc[MWG][NVEC];
  UNROLL for (int r = 0; r < MWG; ++r)
    UNROLL for (int v = 0; v < NVEC; ++v) acc[r][v] = (REALV)(0);
  if (i0 + MWG <= M && j0 + TILE_N <= N) {  // a whole tile
    for (int k = 0; k < K; ++k) {
      REALV bv[NVEC];
#if B_COL_MAJOR
      real row[TILE_N];  // B's row segment is strided: gathered
      UNROLL for (int x = 0; x < TILE_N; ++x) row[x] = B_AT(k, j0 + x);
      UNROLL for (int v = 0; v < NVEC; ++v) bv[v] = VLOADV(v, row);
#else
      UNROLL for (int v = 0; v < NVEC; ++v) bv[v] = VLOADV(v, b + (k * ldb + j0));
#endif
      UNROLL for (int r = 0; r < MWG; ++r) {
        const REALV av = (REALV)(A_AT(i0 + r, k));
        UNROLL for (int v = 0; v < NVEC; ++v) acc[r][v] = MADD(av, bv[v], acc[r][v]);
      }
    }
    UNROLL for (int r = 0; r < MWG; ++r)
      UNROLL for (int v = 0; v < NVEC; ++v) VSTOREV(acc[r][v], v, c + ((i0 + r) * ldc + j0));
  } else {  // the last rows or columns: missing elements read as 0, stores guarded
    const int rows = min(MWG, M - i0), cols = min(TILE_N, N - j0);
    for (int k = 0; k < K; ++k) {
      real row[TILE_N];
      UNROLL for (int x = 0; x < TILE_N; ++x) row[x] = x < cols ? B_AT(k, j0 + x) : (real)0;
      REALV bv[NVEC];
      UNROLL for (int v = 0; v < NVEC; ++v) bv[v] = VLOADV(v, row);
      UNROLL for (int r = 0; r < MWG; ++r) {
        const REALV av = (REALV)(r < rows ? A_AT(i0 + r, k) : (real)0);
        UNROLL for (int v = 0; v < NVEC; ++v) acc[r][v] = MADD(av, bv[v], acc[r][v]);
      }
    }
    UNROLL for (int r = 0; r < MWG; ++r) {  // acc's indices constant: no loop to rows
      if (r >= rows) break;
      real row[TILE_N];
      UNROLL for (int v = 0; v < NVEC; ++v) VSTOREV(acc[r][v], v, row);
      for (int x = 0; x < cols; ++x) c[(i0 + r) * ldc + j0 + x] = row[x];
    }
  }
}
#endif  // PACKED

#else  // VECW == 1

__kernel void gemm(const int M, const int N, const int K,
                   __global const real* A, const long a_offset, const int lda,
                   __global const real* B, const long b_offset, const int ldb,
                   __global real* C, const long c_offset, const int ldc,
                   const long a_stride, const long b_stride, const long c_stride) {
  const int j = get_global_id(0);
  const int i0 = get_global_id(1) * MWG;
  if (j >= N) return;
  const long batch = get_global_id(2);
  __global const real* a = A + (a_offset + batch * a_stride);  // this product's matrices
  __global const real* b = B + (b_offset + batch * b_stride);
  __global real* c = C + (c_offset + batch * c_stride);
  real acc[MWG];
  for (int r = 0; r < MWG; ++r) acc[r] = 0;
  if (i0 + MWG <= M) {
    for (int k = 0; k < K; ++k) {
      const real bk = B_AT(k, j);
      for (int r = 0; r < MWG; ++r) acc[r] = MADD(A_AT(i0 + r, k), bk, acc[r]);
    }
    for (int r = 0; r < MWG; ++r) c[(i0 + r) * ldc + j] = acc[r];
  } else {  // the last rows
    const int rows = M - i0;
    for (int k = 0; k < K; ++k) {
      const real bk = B_AT(k, j);
      for (int r = 0; r < MWG; ++r)
        if (r < rows) acc[r] = MADD(A_AT(i0 + r, k), bk, acc[r]);
    }
    for (int r = 0; r < MWG; ++r)
      if (r < rows) c[(i0 + r) * ldc + j] = acc[r];
  }
}

#endif  // VECW
