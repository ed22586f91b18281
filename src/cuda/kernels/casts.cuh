// Element casts between portmat's dtypes on CUDA GPUs (cast_elements, entry point in gemm.cu).
//
// What: dst[i] = src[i] converted from one dtype to another, one thread per element, on a stream.
// Why: products of dtypes the gemm kernels lack (float16, bfloat16, bool, 8/16-bit integers) and
// of mixed dtypes run on the device in a wider type (float32, int32) with one cast in and one out,
// for portmat's own device arrays and for other libraries' (DLPack, __cuda_array_interface__)
// alike, never through the host. The rules are core/casts.hpp's, element for element, written as
// the CPU backend's host loop (core/casts.cpp) and OpenCL's casts.cl are: float16 and bfloat16
// converted on their bits in software (round to nearest even), integers wrap, to bool is != 0.
// A runtime switch on the two dtype codes (portmat::DType's order) instead of a kernel per pair:
// casts are memory-bound, and 15 x 15 instantiations would lengthen the fatbin's build.
#pragma once

#include "gemm_tiles.h"  // CastArgs, shared with the host

namespace portmat::cuda {

enum CastCode : int {
  kCastF32 = 0, kCastF64, kCastF16, kCastC64, kCastC128, kCastBool,
  kCastI8, kCastI16, kCastI32, kCastI64, kCastU8, kCastU16, kCastU32, kCastU64, kCastBF16,
};

__device__ __forceinline__ float cast_half_to_float(unsigned h) {
  const unsigned sign = (h & 0x8000u) << 16;
  unsigned exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, f;
  if (exp == 0 && mant == 0) {
    f = sign;
  } else if (exp == 0) {
    exp = 127 - 15 + 1;
    while (!(mant & 0x400u)) mant <<= 1, --exp;
    f = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  } else if (exp == 31) {
    f = sign | 0x7f800000u | (mant << 13);
  } else {
    f = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return __uint_as_float(f);
}

__device__ __forceinline__ unsigned short cast_float_to_half(float x) {
  const unsigned f = __float_as_uint(x);
  const unsigned sign = (f >> 16) & 0x8000u, exp = (f >> 23) & 0xffu;
  unsigned mant = f & 0x7fffffu;
  if (exp == 0xffu) return static_cast<unsigned short>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<unsigned short>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<unsigned short>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    unsigned m = mant >> shift;
    const unsigned rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (m & 1u))) ++m;
    return static_cast<unsigned short>(sign | m);
  }
  unsigned h = sign | (static_cast<unsigned>(e) << 10) | (mant >> 13);
  const unsigned rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<unsigned short>(h);
}

__device__ __forceinline__ float cast_bfloat_to_float(unsigned h) { return __uint_as_float(h << 16); }

__device__ __forceinline__ unsigned short cast_float_to_bfloat(float x) {
  unsigned f = __float_as_uint(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((f >> 16) | 0x40u);
  f += 0x7fffu + ((f >> 16) & 1u);
  return static_cast<unsigned short>(f >> 16);
}

struct CastCarrier {
  double re, im;
  unsigned long long bits;
  int kind;  // 0: floating point, 1: signed integer or bool, 2: unsigned integer
};

__device__ __forceinline__ CastCarrier cast_load(const void* p, int t, long long i) {
  CastCarrier v{0.0, 0.0, 0ull, 0};
  switch (t) {
    case kCastF32: v.re = static_cast<const float*>(p)[i]; break;
    case kCastF64: v.re = static_cast<const double*>(p)[i]; break;
    case kCastF16: v.re = cast_half_to_float(static_cast<const unsigned short*>(p)[i]); break;
    case kCastBF16: v.re = cast_bfloat_to_float(static_cast<const unsigned short*>(p)[i]); break;
    case kCastC64: v.re = static_cast<const float*>(p)[2 * i], v.im = static_cast<const float*>(p)[2 * i + 1]; break;
    case kCastC128: v.re = static_cast<const double*>(p)[2 * i], v.im = static_cast<const double*>(p)[2 * i + 1]; break;
    case kCastBool: v.bits = static_cast<const unsigned char*>(p)[i] != 0, v.kind = 1; break;
    case kCastI8: v.bits = static_cast<unsigned long long>(static_cast<long long>(static_cast<const signed char*>(p)[i])), v.kind = 1; break;
    case kCastI16: v.bits = static_cast<unsigned long long>(static_cast<long long>(static_cast<const short*>(p)[i])), v.kind = 1; break;
    case kCastI32: v.bits = static_cast<unsigned long long>(static_cast<long long>(static_cast<const int*>(p)[i])), v.kind = 1; break;
    case kCastI64: v.bits = static_cast<const unsigned long long*>(p)[i], v.kind = 1; break;
    case kCastU8: v.bits = static_cast<const unsigned char*>(p)[i], v.kind = 2; break;
    case kCastU16: v.bits = static_cast<const unsigned short*>(p)[i], v.kind = 2; break;
    case kCastU32: v.bits = static_cast<const unsigned*>(p)[i], v.kind = 2; break;
    case kCastU64: v.bits = static_cast<const unsigned long long*>(p)[i], v.kind = 2; break;
  }
  return v;
}

__device__ __forceinline__ float cast_as_f32(const CastCarrier& v) {
  if (v.kind == 1) return static_cast<float>(static_cast<long long>(v.bits));
  if (v.kind == 2) return static_cast<float>(v.bits);
  return static_cast<float>(v.re);
}

__device__ __forceinline__ double cast_as_f64(const CastCarrier& v) {
  if (v.kind == 1) return static_cast<double>(static_cast<long long>(v.bits));
  if (v.kind == 2) return static_cast<double>(v.bits);
  return v.re;
}

__device__ __forceinline__ unsigned long long cast_as_bits(const CastCarrier& v) {
  if (v.kind != 0) return v.bits;
  if (!(v.re > -9223372036854775808.0 && v.re < 9223372036854775808.0)) return 1ull << 63;
  return static_cast<unsigned long long>(static_cast<long long>(v.re));
}

__device__ __forceinline__ void cast_store(void* p, int t, long long i, const CastCarrier& v) {
  switch (t) {
    case kCastF32: static_cast<float*>(p)[i] = cast_as_f32(v); break;
    case kCastF64: static_cast<double*>(p)[i] = cast_as_f64(v); break;
    case kCastF16: static_cast<unsigned short*>(p)[i] = cast_float_to_half(cast_as_f32(v)); break;
    case kCastBF16: static_cast<unsigned short*>(p)[i] = cast_float_to_bfloat(cast_as_f32(v)); break;
    case kCastC64:
      static_cast<float*>(p)[2 * i] = cast_as_f32(v);
      static_cast<float*>(p)[2 * i + 1] = v.kind ? 0.f : static_cast<float>(v.im);
      break;
    case kCastC128:
      static_cast<double*>(p)[2 * i] = cast_as_f64(v);
      static_cast<double*>(p)[2 * i + 1] = v.kind ? 0.0 : v.im;
      break;
    case kCastBool: static_cast<unsigned char*>(p)[i] = v.kind ? v.bits != 0 : (v.re != 0 || v.im != 0); break;
    case kCastI8:
    case kCastU8: static_cast<unsigned char*>(p)[i] = static_cast<unsigned char>(cast_as_bits(v)); break;
    case kCastI16:
    case kCastU16: static_cast<unsigned short*>(p)[i] = static_cast<unsigned short>(cast_as_bits(v)); break;
    case kCastI32:
    case kCastU32: static_cast<unsigned*>(p)[i] = static_cast<unsigned>(cast_as_bits(v)); break;
    case kCastI64:
    case kCastU64: static_cast<unsigned long long*>(p)[i] = cast_as_bits(v); break;
  }
}

// A grid-stride loop: any count with a grid of at most 65535 x 256 threads.
__device__ __forceinline__ void cast_body(const CastArgs& p) {
  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.count; i += step)
    cast_store(p.dst, p.to, i, cast_load(p.src, p.from, i));
}

}  // namespace portmat::cuda
