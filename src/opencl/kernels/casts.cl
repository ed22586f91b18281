// Element casts between portmat's dtypes, complex b's real form, and padded 2-D copies, on OpenCL devices.
//
// What: `cast_elements` converts a contiguous array from one dtype to another, one work-item per element;
// `complex_b_f32` / `complex_b_f64` write a complex b (K x N, row-major) as the real (2K x 2N)
// matrix B'' whose product with a's interleaved parts gives c's (core/batch.hpp, complex_b).
// Why: portmat's device arrays of dtypes the gemm kernels lack (float16, bfloat16, bool, 8/16-bit
// integers) are multiplied in a wider one (float32, int32) and rounded back once, and complex ones
// through the real kernels, all on the device: no round trip to the host. The rules are
// core/casts.hpp's, element for element (the CPU backend's host loop and the CUDA kernels follow
// the same ones): float16 and bfloat16 are converted in software on their bits (no cl_khr_fp16
// needed), round to nearest even; integers wrap; to bool is != 0.
//
// dtype codes: portmat::DType's order (include/portmat/portmat.hpp).
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double wide_t;
#else
typedef float wide_t;  // no float64 arrays exist on such a device
#endif

#define T_F32 0
#define T_F64 1
#define T_F16 2
#define T_C64 3
#define T_C128 4
#define T_BOOL 5
#define T_I8 6
#define T_I16 7
#define T_I32 8
#define T_I64 9
#define T_U8 10
#define T_U16 11
#define T_U32 12
#define T_U64 13
#define T_BF16 14

float half_to_float(uint h) {
  const uint sign = (h & 0x8000u) << 16;
  uint exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, f;
  if (exp == 0 && mant == 0) {
    f = sign;
  } else if (exp == 0) {
    exp = 127 - 15 + 1;
    while (!(mant & 0x400u)) { mant <<= 1; --exp; }
    f = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  } else if (exp == 31) {
    f = sign | 0x7f800000u | (mant << 13);
  } else {
    f = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return as_float(f);
}

ushort float_to_half(float x) {
  const uint f = as_uint(x);
  const uint sign = (f >> 16) & 0x8000u, exp = (f >> 23) & 0xffu;
  uint mant = f & 0x7fffffu;
  if (exp == 0xffu) return (ushort)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  const int e = (int)exp - 127 + 15;
  if (e >= 31) return (ushort)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (ushort)sign;
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint m = mant >> shift;
    const uint rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (m & 1u))) ++m;
    return (ushort)(sign | m);
  }
  uint h = sign | ((uint)e << 10) | (mant >> 13);
  const uint rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return (ushort)h;
}

float bfloat_to_float(uint h) { return as_float(h << 16); }

ushort float_to_bfloat(float x) {
  uint f = as_uint(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return (ushort)((f >> 16) | 0x40u);
  f += 0x7fffu + ((f >> 16) & 1u);
  return (ushort)(f >> 16);
}

// The carrier: floating-point sources in re / im, integer ones as 64 bits with their kind.
typedef struct {
  wide_t re, im;
  ulong bits;
  int kind;  // 0: floating point, 1: signed integer or bool, 2: unsigned integer
} carrier;

carrier load(__global const uchar* p, int t, long i) {
  carrier v;
  v.re = 0;
  v.im = 0;
  v.bits = 0;
  v.kind = 0;
  switch (t) {
    case T_F32: v.re = ((__global const float*)p)[i]; break;
#ifdef cl_khr_fp64
    case T_F64: v.re = ((__global const double*)p)[i]; break;
    case T_C128: v.re = ((__global const double*)p)[2 * i]; v.im = ((__global const double*)p)[2 * i + 1]; break;
#endif
    case T_F16: v.re = half_to_float(((__global const ushort*)p)[i]); break;
    case T_BF16: v.re = bfloat_to_float(((__global const ushort*)p)[i]); break;
    case T_C64: v.re = ((__global const float*)p)[2 * i]; v.im = ((__global const float*)p)[2 * i + 1]; break;
    case T_BOOL: v.bits = p[i] != 0; v.kind = 1; break;
    case T_I8: v.bits = (ulong)(long)((__global const char*)p)[i]; v.kind = 1; break;
    case T_I16: v.bits = (ulong)(long)((__global const short*)p)[i]; v.kind = 1; break;
    case T_I32: v.bits = (ulong)(long)((__global const int*)p)[i]; v.kind = 1; break;
    case T_I64: v.bits = ((__global const ulong*)p)[i]; v.kind = 1; break;
    case T_U8: v.bits = p[i]; v.kind = 2; break;
    case T_U16: v.bits = ((__global const ushort*)p)[i]; v.kind = 2; break;
    case T_U32: v.bits = ((__global const uint*)p)[i]; v.kind = 2; break;
    case T_U64: v.bits = ((__global const ulong*)p)[i]; v.kind = 2; break;
  }
  return v;
}

float as_f32(carrier v) {
  if (v.kind == 1) return (float)(long)v.bits;
  if (v.kind == 2) return (float)v.bits;
  return (float)v.re;
}

wide_t as_wide(carrier v) {
  if (v.kind == 1) return (wide_t)(long)v.bits;
  if (v.kind == 2) return (wide_t)v.bits;
  return v.re;
}

ulong as_bits(carrier v) {
  if (v.kind != 0) return v.bits;
  if (!(v.re > (wide_t)-9223372036854775808.0 && v.re < (wide_t)9223372036854775808.0)) return (ulong)1 << 63;
  return (ulong)(long)v.re;
}

void store(__global uchar* p, int t, long i, carrier v) {
  switch (t) {
    case T_F32: ((__global float*)p)[i] = as_f32(v); break;
#ifdef cl_khr_fp64
    case T_F64: ((__global double*)p)[i] = as_wide(v); break;
    case T_C128:
      ((__global double*)p)[2 * i] = as_wide(v);
      ((__global double*)p)[2 * i + 1] = v.kind ? 0.0 : v.im;
      break;
#endif
    case T_F16: ((__global ushort*)p)[i] = float_to_half(as_f32(v)); break;
    case T_BF16: ((__global ushort*)p)[i] = float_to_bfloat(as_f32(v)); break;
    case T_C64:
      ((__global float*)p)[2 * i] = as_f32(v);
      ((__global float*)p)[2 * i + 1] = v.kind ? 0.0f : (float)v.im;
      break;
    case T_BOOL: p[i] = v.kind ? (v.bits != 0) : (v.re != 0 || v.im != 0); break;
    case T_I8:
    case T_U8: p[i] = (uchar)as_bits(v); break;
    case T_I16:
    case T_U16: ((__global ushort*)p)[i] = (ushort)as_bits(v); break;
    case T_I32:
    case T_U32: ((__global uint*)p)[i] = (uint)as_bits(v); break;
    case T_I64:
    case T_U64: ((__global ulong*)p)[i] = as_bits(v); break;
  }
}

// dst[i] = src[i] as dtype `to`, for i < count (global size >= count).
__kernel void cast_elements(__global const uchar* src, int from, __global uchar* dst, int to, long count) {
  const long i = get_global_id(0);
  if (i < count) store(dst, to, i, load(src, from, i));
}

// B'' of each of the stack's b (global size: N, K, matrices): rows 2k and 2k + 1 of B'' are
// (re, im) and (-im, re) of b's row k. One body for both element types (OpenCL C has no templates).
#define PM_COMPLEX_B(T, NAME)                                                                       \
  __kernel void NAME(__global const T* b, long b_off, long ldb, long b_step, __global T* out, long K, \
                     long N) {                                                                      \
    const long n = get_global_id(0), k = get_global_id(1), m = get_global_id(2);                    \
    if (n >= N || k >= K) return;                                                                   \
    __global const T* z = b + 2 * (b_off + m * b_step + k * ldb + n);                               \
    __global T* even = out + m * 4 * K * N + (2 * k) * (2 * N);                                     \
    __global T* odd = even + 2 * N;                                                                 \
    const T re = z[0], im = z[1];                                                                   \
    even[2 * n] = re;                                                                               \
    even[2 * n + 1] = im;                                                                           \
    odd[2 * n] = -im;                                                                               \
    odd[2 * n + 1] = re;                                                                            \
  }
PM_COMPLEX_B(float, complex_b_f32)
#ifdef cl_khr_fp64
PM_COMPLEX_B(double, complex_b_f64)
#endif

// dst's dst_rows x dst_cols block = src's rows x cols block, zeros beyond it (global size: at least
// dst_cols, dst_rows): a gemm operand copied into a buffer padded to whole blocks of gemm.cl, and the
// result's block copied back (rows, cols = the dst block then). Elements are moved as bits, 4 or 8
// bytes, so one kernel serves every dtype.
#define PM_COPY_2D(T, NAME)                                                                         \
  __kernel void NAME(__global const T* src, long src_off, long src_ld, long rows, long cols,       \
                     __global T* dst, long dst_off, long dst_ld, long dst_rows, long dst_cols) {   \
    const long j = get_global_id(0), i = get_global_id(1);                                         \
    if (i >= dst_rows || j >= dst_cols) return;                                                     \
    /* the address is clamped too, as in gemm.cl: a compiler may load before it selects */       \
    const long si = min(i, rows - 1), sj = min(j, cols - 1);                                        \
    const T v = src[src_off + max(si, 0L) * src_ld + max(sj, 0L)];                                  \
    dst[dst_off + i * dst_ld + j] = (i < rows && j < cols) ? v : (T)0;                              \
  }
PM_COPY_2D(uint, copy_2d_b4)
PM_COPY_2D(ulong, copy_2d_b8)

// dst's transpose of src, padded: dst[j * dst_ld + i] = src(i, j) for i < rows, j < cols, zeros for
// the rest of dst's dst_rows x dst_cols block (dst_rows >= cols, dst_cols >= rows). A row-major a
// copied column-major before a large product, so that gemm.cl reads neither operand across its
// rows (opencl_backend.cpp, transpose_a_first). One 32 x 32 tile a work-group of 32 x 8, through
// local memory (rows of 33: no bank conflicts), so that reads and writes are both whole rows.
// Launch: work-groups of TRANSPOSE_TILE x TRANSPOSE_ROWS; global size at least dst_rows (x, rounded
// up to whole tiles) by dst_cols / (TRANSPOSE_TILE / TRANSPOSE_ROWS) (y, likewise).
// (H200, 2026-12-04: 2.8-3.0 TB/s read and written at M = K = 4096-8192. A form with a bounds-free
// path for inner tiles, and one with 64 x 64 tiles, were slower: docs/opencl.md.)
#define TRANSPOSE_TILE 32
#define TRANSPOSE_ROWS 8
#define PM_TRANSPOSE_2D(T, NAME)                                                                    \
  __kernel __attribute__((reqd_work_group_size(TRANSPOSE_TILE, TRANSPOSE_ROWS, 1))) void NAME(     \
      __global const T* src, long src_off, long src_ld, long rows, long cols, __global T* dst,     \
      long dst_off, long dst_ld, long dst_rows, long dst_cols) {                                   \
    __local T tile[TRANSPOSE_TILE][TRANSPOSE_TILE + 1];                                             \
    const int lx = (int)get_local_id(0), ly = (int)get_local_id(1);                                 \
    const long j0 = (long)get_group_id(0) * TRANSPOSE_TILE, i0 = (long)get_group_id(1) * TRANSPOSE_TILE; \
    for (int r = ly; r < TRANSPOSE_TILE; r += TRANSPOSE_ROWS) {                                     \
      const long i = i0 + r, j = j0 + lx;                                                           \
      /* clamped addresses, as in copy_2d */                                                        \
      const T v = src[src_off + max(min(i, rows - 1), 0L) * src_ld + max(min(j, cols - 1), 0L)];    \
      tile[r][lx] = (i < rows && j < cols) ? v : (T)0;                                              \
    }                                                                                               \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                   \
    for (int r = ly; r < TRANSPOSE_TILE; r += TRANSPOSE_ROWS) {                                     \
      const long j = j0 + r, i = i0 + lx;                                                           \
      if (j < dst_rows && i < dst_cols) dst[dst_off + j * dst_ld + i] = tile[lx][r];                \
    }                                                                                               \
  }
PM_TRANSPOSE_2D(uint, transpose_2d_b4)
PM_TRANSPOSE_2D(ulong, transpose_2d_b8)

// c = the sum of `slices` partial products w[s] (each m x n, dense, row-major, one after another),
// added in slice order, so every run gives the same bits: split-K's second launch
// (opencl_backend.cpp, enqueue_gemm_split_k). One work-item per element of c (global size at
// least n by m); integers wrap as NumPy's do.
#define PM_SUM_SLICES(T, NAME)                                                                      \
  __kernel void NAME(__global const T* w, long slices, long m, long n, __global T* c, long c_off,  \
                     long ldc) {                                                                    \
    const long j = get_global_id(0), i = get_global_id(1);                                         \
    if (i >= m || j >= n) return;                                                                   \
    T s = w[i * n + j];                                                                             \
    for (long t = 1; t < slices; ++t) s += w[(t * m + i) * n + j];                                  \
    c[c_off + i * ldc + j] = s;                                                                     \
  }
PM_SUM_SLICES(float, sum_slices_f32)
PM_SUM_SLICES(uint, sum_slices_u32)
PM_SUM_SLICES(ulong, sum_slices_u64)
#ifdef cl_khr_fp64
PM_SUM_SLICES(double, sum_slices_f64)
#endif
