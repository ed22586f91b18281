// gemm_direct.cl: C = A * B for CPU OpenCL runtimes that vectorize across work-items (Intel's
// OpenCL CPU runtime), with the arguments, dtypes, layouts and stacks of gemm.cl.
//
// gemm.cl stages slices of A and B in local memory behind barriers: on a GPU that is the point,
// on a CPU runtime local memory is ordinary memory and every barrier splits the work-group's loop.
// Here there is neither. Work-item (j, i) computes column j of C over MWG rows from i * MWG; the
// work-items of a work-group (the host makes it NDIMC wide along dimension 0, one high) take
// consecutive columns, so a runtime that packs neighbouring work-items into SIMD lanes loads B's
// row segment as one vector and broadcasts each element of A to every lane, keeping MWG vector
// accumulators. Any M, N, K (rows past M and columns past N are skipped).
//
// Chosen per device by gemm_params.cpp (DIRECT=1): Intel's CPU runtime. PoCL does not vectorize
// it (5.9 GFLOP/s at n = 1024 against 57 on Intel's, same machine), and keeps gemm.cl.

// ---- tunables -----------------------------------------------------------------------------------
#ifndef REAL_KIND
#define REAL_KIND 0  // 0: float32, 1: float64, 2: uint (32-bit), 3: ulong (64-bit), as in gemm.cl
#endif
#ifndef MWG
#define MWG 8  // rows of C per work-item: the vector accumulators each keeps
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
