// gemm.cl: C = A * B for any M, N, K; the portable kernel every OpenCL device runs, in float32,
// float64 and the wrapping 32- and 64-bit unsigned products that carry the integer dtypes.
//
// The seed's design, generalised: each work-group computes an MWG x NWG block of C, staging
// KWG-deep slices of A and B in local memory (double-buffered: the next slice is fetched from
// global memory into registers while the current one is multiplied, so one barrier per slice
// suffices); each work-item accumulates an MWI x NWI register tile by outer products, reading
// local memory as VWM/VWN-wide vectors. Any M, N, K: loads outside the matrices read 0 and stores
// outside are skipped (compiled out with EDGES = 0 when the sizes are multiples of the tiles).
// A and B may each be row-major or column-major (a transposed view) with any leading dimension.
// A stack of products (np.matmul's batches) is one launch: the third NDRange dimension.
//
// The host (opencl_backend.cpp) prepends #defines for the tunables below, chosen per device and
// problem (gemm_params.cpp); compiled programs are cached per (device, defines).

// ---- tunables (defaults are for a 256-work-item GPU work-group) ---------------------------------
#ifndef REAL_KIND
#define REAL_KIND 0  // 0: float32, 1: float64, 2: uint (32-bit), 3: ulong (64-bit): the integer
                     // dtypes' wrapping products, the same bits for signed and unsigned
#endif
#ifndef MWG
#define MWG 128  // rows of C per work-group
#endif
#ifndef NWG
#define NWG 128  // columns of C per work-group
#endif
#ifndef KWG
#define KWG 16  // depth of one local-memory slice
#endif
#ifndef MDIMC
#define MDIMC 16  // work-items along M
#endif
#ifndef NDIMC
#define NDIMC 16  // work-items along N
#endif
#ifndef VWM
#define VWM 4  // vector width of local-memory reads along M (2, 4 or 8)
#endif
#ifndef VWN
#define VWN 4  // vector width of local-memory reads along N (2, 4 or 8)
#endif
#ifndef PADA
#define PADA 4  // extra elements per local row of A (a multiple of VWM): spreads stores over banks
#endif
#ifndef PADB
#define PADB 0  // extra elements per local row of B (a multiple of VWN)
#endif
#ifndef A_COL_MAJOR
#define A_COL_MAJOR 0  // 1: A(i,k) at A[k*lda + i] (a transposed view)
#endif
#ifndef B_COL_MAJOR
#define B_COL_MAJOR 0  // 1: B(k,j) at B[j*ldb + k]
#endif
#ifndef EDGES
#define EDGES 1  // 0 only when M % MWG == 0, N % NWG == 0 and K % KWG == 0
#endif
#ifndef GVW
#define GVW 1  // vector width of global loads (1, 2, 4, 8); > 1 needs EDGES = 0 and aligned rows
#endif
#ifndef MAXREGS
#define MAXREGS 0  // > 0: the host caps registers with NVIDIA's -cl-nv-maxrregcount, and the kernel
                   // drops reqd_work_group_size, whose .reqntid would make the JIT ignore the cap
#endif
#ifndef DBF
#define DBF 0  // 1: double-buffered fragments: each work-item reads the next k step's A and B values
               // from local memory while it multiplies the current ones, also across a slice's end
               // (the next slice is stored and the barrier passed before the last k step's
               // multiply-adds). Needs an even KWG.
#endif

#ifndef GROUPM
#define GROUPM 1  // > 1: work-groups run in groups of GROUPM block rows, column by column within a
                  // group (the launch order is row by row otherwise), so that the blocks resident at
                  // once share A's and B's panels in the L2 cache
#endif

#ifndef ASYNC
#define ASYNC 0  // >= 2: a ring of ASYNC slices in local memory, filled ASYNC - 1 slices ahead of the
                 // multiply-adds by cp.async (NVIDIA GPUs of compute capability 8.0 or later, through
                 // inline PTX: the host allows it on NVIDIA's driver only) for the operands that are
                 // contiguous along the same index in both memories (no registers hold those copies);
                 // a transposed operand is staged through registers one slice ahead. 0: both
                 // operands staged through registers, two slices (any device).
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
// One multiply-add: fused for floating point, wrapping for the unsigned integers.
#if REAL_KIND >= 2
#define MADD(a, b, c) ((a) * (b) + (c))
#else
#define MADD(a, b, c) fma((a), (b), (c))
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define REALVM CAT(REAL, VWM)  // e.g. float4
#define REALVN CAT(REAL, VWN)
#define VSTOREM CAT(vstore, VWM)
#define VSTOREN CAT(vstore, VWN)
#define REALVG CAT(REAL, GVW)
#define VSTOREG CAT(vstore, GVW)

#define MWI (MWG / MDIMC)            // rows of C per work-item
#define NWI (NWG / NDIMC)            // columns of C per work-item
#define NTHREADS (MDIMC * NDIMC)     // work-items per work-group
#define LDA_LOCAL (MWG + PADA)       // local row length of the A slice, stored k-major
#define LDB_LOCAL (NWG + PADB)
#define LPTA (MWG * KWG / NTHREADS)  // A elements each work-item moves per slice
#define LPTB (NWG * KWG / NTHREADS)

#if MWG % (MDIMC * VWM) != 0 || NWG % (NDIMC * VWN) != 0
#error "MWG must be a multiple of MDIMC*VWM and NWG of NDIMC*VWN"
#endif
#if (MWG * KWG) % NTHREADS != 0 || (NWG * KWG) % NTHREADS != 0
#error "each slice must divide evenly among the work-items"
#endif
#if GVW > 1 && (EDGES || KWG % GVW != 0 || MWG % GVW != 0 || NWG % GVW != 0 || LPTA % GVW != 0 || LPTB % GVW != 0)
#error "vector global loads need whole vectors in every slice and no edges"
#endif
#if PADA % VWM != 0 || PADB % VWN != 0
#error "padding must keep local rows vector-aligned"
#endif
#if DBF && KWG % 2 != 0
#error "double-buffered fragments need an even KWG"
#endif
#if ASYNC == 1 || ASYNC > 8
#error "ASYNC is 0 (off) or 2-8 slices in the ring"
#endif
#define NBUF (ASYNC ? ASYNC : 2)  // slices of A and of B in local memory

// Work-item (tm, tn) owns rows  mi*MDIMC*VWM + tm*VWM + v  (mi < MWI/VWM, v < VWM) of the block and
// columns ni*NDIMC*VWN + tn*VWN + w: neighbouring work-items read neighbouring vectors, so a warp's
// local-memory reads are contiguous (no bank conflicts) and its stores to C are coalesced.

// Loads slice [k0, k0+KWG) of A rows [row0, row0+MWG) into registers. Consecutive work-items take
// consecutive GVW-wide vectors along A's contiguous dimension, so global reads coalesce (the seed's
// float4 loads when GVW = 4).
inline void load_a(__global const real* A, const int lda, const int M, const int K,
                   const int row0, const int k0, const int tid, real ra[LPTA]) {
#pragma unroll
  for (int r = 0; r < LPTA / GVW; ++r) {
    const int idx = tid + r * NTHREADS;
#if A_COL_MAJOR
    const int m = (idx % (MWG / GVW)) * GVW, k = idx / (MWG / GVW);
#else
    const int k = (idx % (KWG / GVW)) * GVW, m = idx / (KWG / GVW);
#endif
#if EDGES
    // Clamp the address into the matrix as well as zeroing the value: a compiler may turn the
    // select into an unconditional load, which must then still be in bounds.
    const int gm = min(row0 + m, M - 1), gk = min(k0 + k, K - 1);
#else
    const int gm = row0 + m, gk = k0 + k;
#endif
#if A_COL_MAJOR
    const long at = (long)gk * lda + gm;
#else
    const long at = (long)gm * lda + gk;
#endif
#if GVW > 1
    VSTOREG(*(__global const REALVG*)&A[at], 0, &ra[r * GVW]);
#elif EDGES
    ra[r] = (row0 + m < M && k0 + k < K) ? A[at] : (real)0;
#else
    ra[r] = A[at];
#endif
  }
}

// Stores them k-major (As[k][m]), so the compute loop reads A's column k as vectors.
inline void store_a(__local real* As, const int tid, const real ra[LPTA]) {
#pragma unroll
  for (int r = 0; r < LPTA / GVW; ++r) {
    const int idx = tid + r * NTHREADS;
#if A_COL_MAJOR
    const int m = (idx % (MWG / GVW)) * GVW, k = idx / (MWG / GVW);
#pragma unroll
    for (int e = 0; e < GVW; ++e) As[k * LDA_LOCAL + m + e] = ra[r * GVW + e];
#else
    const int k = (idx % (KWG / GVW)) * GVW, m = idx / (KWG / GVW);
#pragma unroll
    for (int e = 0; e < GVW; ++e) As[(k + e) * LDA_LOCAL + m] = ra[r * GVW + e];
#endif
  }
}

inline void load_b(__global const real* B, const int ldb, const int N, const int K,
                   const int col0, const int k0, const int tid, real rb[LPTB]) {
#pragma unroll
  for (int r = 0; r < LPTB / GVW; ++r) {
    const int idx = tid + r * NTHREADS;
#if B_COL_MAJOR
    const int k = (idx % (KWG / GVW)) * GVW, n = idx / (KWG / GVW);
#else
    const int n = (idx % (NWG / GVW)) * GVW, k = idx / (NWG / GVW);
#endif
#if EDGES
    const int gn = min(col0 + n, N - 1), gk = min(k0 + k, K - 1);
#else
    const int gn = col0 + n, gk = k0 + k;
#endif
#if B_COL_MAJOR
    const long at = (long)gn * ldb + gk;
#else
    const long at = (long)gk * ldb + gn;
#endif
#if GVW > 1
    VSTOREG(*(__global const REALVG*)&B[at], 0, &rb[r * GVW]);
#elif EDGES
    rb[r] = (col0 + n < N && k0 + k < K) ? B[at] : (real)0;
#else
    rb[r] = B[at];
#endif
  }
}

inline void store_b(__local real* Bs, const int tid, const real rb[LPTB]) {
#pragma unroll
  for (int r = 0; r < LPTB / GVW; ++r) {
    const int idx = tid + r * NTHREADS;
#if B_COL_MAJOR
    const int k = (idx % (KWG / GVW)) * GVW, n = idx / (KWG / GVW);
#pragma unroll
    for (int e = 0; e < GVW; ++e) Bs[(k + e) * LDB_LOCAL + n] = rb[r * GVW + e];
#else
    const int n = (idx % (NWG / GVW)) * GVW, k = idx / (NWG / GVW);
#pragma unroll
    for (int e = 0; e < GVW; ++e) Bs[k * LDB_LOCAL + n + e] = rb[r * GVW + e];
#endif
  }
}

#if ASYNC
// ---- cp.async copies (PTX ISA 7.0, sm_80+) ----------------------------------------------------
// A local pointer cast to an integer is its offset in the shared window (the address cp.async
// wants); a global pointer's is its global address.
#if PTX_ASM_PLAIN
#define PTX_ASM asm volatile
#else
#define PTX_ASM __asm__ __volatile__  // the GNU spelling: clang's OpenCL C has no plain `asm`
#endif
#define STR_(x) #x
#define STR(x) STR_(x)
#if REAL_KIND == 1 || REAL_KIND == 3
#define REAL_BYTES 8
#else
#define REAL_BYTES 4
#endif
#define ELEM_BYTES STR(REAL_BYTES)
// One element; src_bytes 0 writes a zero (outside the matrix: the address is clamped inside).
inline void copy_elem_async(__local real* dst, __global const real* src, const uint src_bytes) {
  PTX_ASM("cp.async.ca.shared.global [%0], [%1], " ELEM_BYTES ", %2;" ::"r"((uint)(ulong)dst),
               "l"((ulong)src), "r"(src_bytes) : "memory");
}
// GVW contiguous elements to GVW contiguous elements, 16 bytes (or all of them when fewer) at a time.
#if GVW > 1
#if GVW * REAL_BYTES >= 16
#define COPY_ELEMS (16 / REAL_BYTES)
#define COPY_INSN "cp.async.cg.shared.global [%0], [%1], 16;"
#elif GVW * REAL_BYTES == 8
#define COPY_ELEMS GVW
#define COPY_INSN "cp.async.ca.shared.global [%0], [%1], 8;"
#endif
inline void copy_vec_async(__local real* dst, __global const real* src) {
#pragma unroll
  for (int e = 0; e < GVW; e += COPY_ELEMS)
    PTX_ASM(COPY_INSN ::"r"((uint)(ulong)(dst + e)), "l"((ulong)(src + e)) : "memory");
}
#endif
inline void copies_commit(void) { PTX_ASM("cp.async.commit_group;" ::: "memory"); }
// This work-item's copies but the newest ASYNC - 2 groups are done (a barrier then makes every
// work-item's visible).
#if ASYNC == 2
#define WAIT_PENDING 0
#elif ASYNC == 3
#define WAIT_PENDING 1
#elif ASYNC == 4
#define WAIT_PENDING 2
#elif ASYNC == 5
#define WAIT_PENDING 3
#elif ASYNC == 6
#define WAIT_PENDING 4
#elif ASYNC == 7
#define WAIT_PENDING 5
#else
#define WAIT_PENDING 6
#endif
inline void copies_wait(void) { PTX_ASM("cp.async.wait_group " STR(WAIT_PENDING) ";" ::: "memory"); }

// Slice [k0, k0+KWG) of an operand whose block index is contiguous in global memory as in local
// memory (a column-major A's rows, a row-major B's columns: X(k, i) at X[k*ld + i], local
// X[k*ldl + i]): the block [first, first+width) into xs, the same work-item to element mapping as
// load_a / load_b; as vectors when GVW > 1 and the local rows keep their alignment, else element by
// element (edges zero-filled). width, ldl and per_item (LPTA or LPTB) are the callers' constants.
inline void copy_contiguous_async(__global const real* X, const int ld, const int extent, const int K,
                                  const int first, const int k0, const int tid, __local real* xs,
                                  const int width, const int ldl, const int per_item) {
#pragma unroll
  for (int r = 0; r < per_item / GVW; ++r) {
    const int idx = tid + r * NTHREADS;
    const int i = (idx % (width / GVW)) * GVW, k = idx / (width / GVW);
#if EDGES  // GVW == 1 here
    const int gi = min(first + i, extent - 1), gk = min(k0 + k, K - 1);
    const uint bytes = (first + i < extent && k0 + k < K) ? sizeof(real) : 0;
#else
    const int gi = first + i, gk = k0 + k;
    const uint bytes = sizeof(real);
#endif
    __global const real* src = X + ((long)gk * ld + gi);
#if GVW > 1
    if (ldl % GVW == 0) {
      copy_vec_async(&xs[k * ldl + i], src);
      continue;
    }
#endif
#pragma unroll
    for (int e = 0; e < GVW; ++e) copy_elem_async(&xs[k * ldl + i + e], src + e, bytes);
  }
}

// Which operands cp.async copies: those contiguous along the same index in both memories.
#define A_ASYNC A_COL_MAJOR
#define B_ASYNC (!B_COL_MAJOR)

inline void copy_slice_async(__global const real* A, const int lda, __global const real* B, const int ldb,
                             const int M, const int N, const int K, const int row0, const int col0, const int k0,
                             const int tid, __local real* As, __local real* Bs) {
#if A_ASYNC
  copy_contiguous_async(A, lda, M, K, row0, k0, tid, As, MWG, LDA_LOCAL, LPTA);
#endif
#if B_ASYNC
  copy_contiguous_async(B, ldb, N, K, col0, k0, tid, Bs, NWG, LDB_LOCAL, LPTB);
#endif
}
#endif  // ASYNC

// ---- the register-staged copies -----------------------------------------------------------------
// The next slice of the operands the ring does not copy (with ASYNC = 0: both) into registers, and
// from there into local memory.
#if !defined(A_ASYNC)
#define A_ASYNC 0
#define B_ASYNC 0
#endif
inline void load_slice_regs(__global const real* A, const int lda, __global const real* B, const int ldb,
                            const int M, const int N, const int K, const int row0, const int col0, const int k0,
                            const int tid, real ra[LPTA], real rb[LPTB]) {
#if !A_ASYNC
  load_a(A, lda, M, K, row0, k0, tid, ra);
#endif
#if !B_ASYNC
  load_b(B, ldb, N, K, col0, k0, tid, rb);
#endif
}
inline void store_slice_regs(__local real* As, __local real* Bs, const int tid, const real ra[LPTA],
                             const real rb[LPTB]) {
#if !A_ASYNC
  store_a(As, tid, ra);
#endif
#if !B_ASYNC
  store_b(Bs, tid, rb);
#endif
}

// Reads row k of a slice's A and B into a work-item's fragments: its MWI values of A's column k and
// NWI values of B's row k, as VWM- and VWN-wide vectors.
inline void load_frags(__local const real* as, __local const real* bs, const int k, const int tm,
                       const int tn, real a_reg[MWI], real b_reg[NWI]) {
#pragma unroll
  for (int mi = 0; mi < MWI / VWM; ++mi)
    VSTOREM(*(__local const REALVM*)&as[k * LDA_LOCAL + mi * MDIMC * VWM + tm * VWM], 0, &a_reg[mi * VWM]);
#pragma unroll
  for (int ni = 0; ni < NWI / VWN; ++ni)
    VSTOREN(*(__local const REALVN*)&bs[k * LDB_LOCAL + ni * NDIMC * VWN + tn * VWN], 0, &b_reg[ni * VWN]);
}

// The multiply-adds of one slice in local memory into a work-item's accumulators (the loops
// without DBF): for each k step, its fragments, then MWI x NWI multiply-adds.
inline void madd_slice(__local const real* as, __local const real* bs, const int tm, const int tn,
                       real acc[MWI][NWI]) {
#pragma unroll
  for (int k = 0; k < KWG; ++k) {
    real a_reg[MWI], b_reg[NWI];
    load_frags(as, bs, k, tm, tn, a_reg, b_reg);
#pragma unroll
    for (int i = 0; i < MWI; ++i)
#pragma unroll
      for (int j = 0; j < NWI; ++j) acc[i][j] = MADD(a_reg[i], b_reg[j], acc[i][j]);
  }
}

#if MAXREGS
__kernel
#else
__kernel __attribute__((reqd_work_group_size(NDIMC, MDIMC, 1)))
#endif
void gemm(const int M, const int N, const int K,
          __global const real* restrict A, const long a_offset, const int lda,
          __global const real* restrict B, const long b_offset, const int ldb,
          __global real* restrict C, const long c_offset, const int ldc,
          const long a_stride, const long b_stride, const long c_stride) {
  // Aligned for the vector reads below: OpenCL only promises a float's alignment otherwise.
  __local real As[NBUF][KWG * LDA_LOCAL] __attribute__((aligned(64)));
  __local real Bs[NBUF][KWG * LDB_LOCAL] __attribute__((aligned(64)));

  const int tn = get_local_id(0), tm = get_local_id(1);
  const int tid = tm * NDIMC + tn;
#if GROUPM > 1
  // Block (bm, bn) of the launch's linear order: GROUPM block rows at a time, down each column.
  const int blocks_n = get_num_groups(0), blocks_m = get_num_groups(1);
  const int linear = get_group_id(1) * blocks_n + get_group_id(0);
  const int first_m = linear / (GROUPM * blocks_n) * GROUPM, in_group = linear % (GROUPM * blocks_n);
  const int rows_here = min(blocks_m - first_m, GROUPM);
  const int row0 = (first_m + in_group % rows_here) * MWG, col0 = in_group / rows_here * NWG;
#else
  const int row0 = get_group_id(1) * MWG, col0 = get_group_id(0) * NWG;
#endif
  // A stack: work-group dimension 2 is the matrix, each operand's matrices `stride` elements
  // apart (0: one matrix for every product, a broadcast operand read in place).
  const long matrix = get_group_id(2);
  A += a_offset + matrix * a_stride;
  B += b_offset + matrix * b_stride;
  C += c_offset + matrix * c_stride;

  real acc[MWI][NWI];
#pragma unroll
  for (int i = 0; i < MWI; ++i)
#pragma unroll
    for (int j = 0; j < NWI; ++j) acc[i][j] = (real)0;

  const int num_slices = (K + KWG - 1) / KWG;
#if ASYNC
  // The ring. Operands whose slices are contiguous in both memories (a column-major A, a row-major
  // B: A_ASYNC, B_ASYNC) are copied by cp.async, ASYNC - 1 slices ahead, one commit group per slice
  // (empty past the end, so that wait_group's count always means "all but the newest ASYNC - 2").
  // An operand that is transposed on the way (a row-major A is k-contiguous) goes through
  // registers one slice ahead as in the register path: as 4-byte cp.async copies it ran 35 TFLOP/s
  // against 47 on an H200 (docs/opencl.md).
  real ra[LPTA], rb[LPTB];
#pragma unroll
  for (int st = 0; st < ASYNC - 1; ++st) {
    if (st < num_slices) copy_slice_async(A, lda, B, ldb, M, N, K, row0, col0, st * KWG, tid, As[st], Bs[st]);
    copies_commit();
  }
  load_slice_regs(A, lda, B, ldb, M, N, K, row0, col0, 0, tid, ra, rb);
  store_slice_regs(As[0], Bs[0], tid, ra, rb);
#if DBF
  // Fragments double-buffered as in the register path below; at a slice's last k step the next
  // slice is stored (the register-staged operand) and waited for, and the barrier passed (every
  // work-item has read this slice's last fragments, so its ring slot takes slice s + ASYNC),
  // before that step's multiply-adds.
  real fa[2][MWI], fb[2][NWI];
  copies_wait();
  barrier(CLK_LOCAL_MEM_FENCE);
  if (ASYNC - 1 < num_slices)
    copy_slice_async(A, lda, B, ldb, M, N, K, row0, col0, (ASYNC - 1) * KWG, tid, As[ASYNC - 1], Bs[ASYNC - 1]);
  copies_commit();
  load_frags(As[0], Bs[0], 0, tm, tn, fa[0], fb[0]);
  for (int s = 0; s < num_slices; ++s) {
    const int cur = s % ASYNC, nxt = (s + 1) % ASYNC;
    if (s + 1 < num_slices) load_slice_regs(A, lda, B, ldb, M, N, K, row0, col0, (s + 1) * KWG, tid, ra, rb);
#pragma unroll
    for (int k = 0; k < KWG; ++k) {
      if (k + 1 < KWG) {
        load_frags(As[cur], Bs[cur], k + 1, tm, tn, fa[(k + 1) & 1], fb[(k + 1) & 1]);
      } else if (s + 1 < num_slices) {
        // Slot nxt was last read in slice s + 1 - ASYNC <= s - 1, before the previous barrier.
        store_slice_regs(As[nxt], Bs[nxt], tid, ra, rb);
        copies_wait();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (s + ASYNC < num_slices)
          copy_slice_async(A, lda, B, ldb, M, N, K, row0, col0, (s + ASYNC) * KWG, tid, As[cur], Bs[cur]);
        copies_commit();
        load_frags(As[nxt], Bs[nxt], 0, tm, tn, fa[0], fb[0]);
      }
#pragma unroll
      for (int i = 0; i < MWI; ++i)
#pragma unroll
        for (int j = 0; j < NWI; ++j) acc[i][j] = MADD(fa[k & 1][i], fb[k & 1][j], acc[i][j]);
    }
  }
#else
  for (int s = 0; s < num_slices; ++s) {
    // Slice s has landed (this work-item's copies; the barrier: everyone's, and the stores of the
    // register-staged operand), and every work-item is done with slice s - 1, whose ring slot now
    // takes slice s + ASYNC - 1.
    copies_wait();
    barrier(CLK_LOCAL_MEM_FENCE);
    if (s + ASYNC - 1 < num_slices) {
      const int slot = (s + ASYNC - 1) % ASYNC;
      copy_slice_async(A, lda, B, ldb, M, N, K, row0, col0, (s + ASYNC - 1) * KWG, tid, As[slot], Bs[slot]);
    }
    copies_commit();
    const bool more = s + 1 < num_slices;
    if (more) load_slice_regs(A, lda, B, ldb, M, N, K, row0, col0, (s + 1) * KWG, tid, ra, rb);
    madd_slice(As[s % ASYNC], Bs[s % ASYNC], tm, tn, acc);
    // Slot (s + 1) % ASYNC was last read in slice s + 1 - ASYNC <= s - 1, before this slice's barrier.
    if (more) store_slice_regs(As[(s + 1) % ASYNC], Bs[(s + 1) % ASYNC], tid, ra, rb);
  }
#endif
#else  // ASYNC == 0: the next slice staged through registers
  real ra[LPTA], rb[LPTB];
  load_a(A, lda, M, K, row0, 0, tid, ra);
  load_b(B, ldb, N, K, col0, 0, tid, rb);
  store_a(As[0], tid, ra);
  store_b(Bs[0], tid, rb);
  barrier(CLK_LOCAL_MEM_FENCE);

#if DBF
  real fa[2][MWI], fb[2][NWI];  // fragments of k steps k (even: [0], odd: [1]) and k + 1
  load_frags(As[0], Bs[0], 0, tm, tn, fa[0], fb[0]);
  for (int s = 0; s < num_slices; ++s) {
    const int cur = s & 1;
    const bool more = s + 1 < num_slices;
    if (more) {
      load_a(A, lda, M, K, row0, (s + 1) * KWG, tid, ra);
      load_b(B, ldb, N, K, col0, (s + 1) * KWG, tid, rb);
    }
#pragma unroll
    for (int k = 0; k < KWG; ++k) {
      if (k + 1 < KWG) {
        load_frags(As[cur], Bs[cur], k + 1, tm, tn, fa[(k + 1) & 1], fb[(k + 1) & 1]);
      } else if (more) {
        // The other buffer was last read before the previous slice's barrier: safe to fill. Then
        // one barrier, and the next slice's first fragments load under this step's multiply-adds.
        store_a(As[cur ^ 1], tid, ra);
        store_b(Bs[cur ^ 1], tid, rb);
        barrier(CLK_LOCAL_MEM_FENCE);
        load_frags(As[cur ^ 1], Bs[cur ^ 1], 0, tm, tn, fa[0], fb[0]);
      }
#pragma unroll
      for (int i = 0; i < MWI; ++i)
#pragma unroll
        for (int j = 0; j < NWI; ++j) acc[i][j] = MADD(fa[k & 1][i], fb[k & 1][j], acc[i][j]);
    }
  }
#else
  for (int s = 0; s < num_slices; ++s) {
    const int cur = s & 1;
    const bool more = s + 1 < num_slices;
    if (more) {  // fetch the next slice while this one is multiplied
      load_a(A, lda, M, K, row0, (s + 1) * KWG, tid, ra);
      load_b(B, ldb, N, K, col0, (s + 1) * KWG, tid, rb);
    }
    madd_slice(As[cur], Bs[cur], tm, tn, acc);
    if (more) {  // the other buffer was last read before the previous barrier: safe to fill
      store_a(As[cur ^ 1], tid, ra);
      store_b(Bs[cur ^ 1], tid, rb);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#endif
#endif  // ASYNC

#pragma unroll
  for (int mi = 0; mi < MWI / VWM; ++mi)
#pragma unroll
    for (int v = 0; v < VWM; ++v) {
      const int row = row0 + mi * MDIMC * VWM + tm * VWM + v;
#if EDGES
      if (row >= M) continue;
#endif
      __global real* c_row = C + (long)row * ldc;
#pragma unroll
      for (int ni = 0; ni < NWI / VWN; ++ni)
#pragma unroll
        for (int w = 0; w < VWN; ++w) {
          const int col = col0 + ni * NDIMC * VWN + tn * VWN + w;
#if EDGES
          if (col < N)
#endif
            c_row[col] = acc[mi * VWM + v][ni * VWN + w];
        }
    }
}
