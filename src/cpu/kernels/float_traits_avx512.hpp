// The AVX-512 float traits of the micro-kernels (tile_common.hpp's S): F32 and F64 on zmm
// vectors with masked partial loads and stores, shared by the real kernels (gemm_avx512.cpp) and
// the complex ones (gemm_complex_avx512.cpp). Include it only from files compiled with -mavx512f
// -mfma (cpu.cmake); internal linkage, as tile_common.hpp.
#pragma once

#include <immintrin.h>

namespace portmat::cpu {
namespace {

struct F32 {
  using T = float;
  using V = __m512;
  static constexpr int lanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const T* p) { return _mm512_loadu_ps(p); }
  static V bcast(const T* p) { return _mm512_set1_ps(*p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static void store(T* p, V v) { _mm512_storeu_ps(p, v); }
  static V load_part(const T* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store_part(T* p, V v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }
  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }  // n < 16
};

struct F64 {
  using T = double;
  using V = __m512d;
  static constexpr int lanes = 8;
  static V zero() { return _mm512_setzero_pd(); }
  static V load(const T* p) { return _mm512_loadu_pd(p); }
  static V bcast(const T* p) { return _mm512_set1_pd(*p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static V add(V a, V b) { return _mm512_add_pd(a, b); }
  static void store(T* p, V v) { _mm512_storeu_pd(p, v); }
  static V load_part(const T* p, int n) { return _mm512_maskz_loadu_pd(mask(n), p); }
  static void store_part(T* p, V v, int n) { _mm512_mask_storeu_pd(p, mask(n), v); }
  static __mmask8 mask(int n) { return static_cast<__mmask8>((1u << n) - 1); }  // n < 8
};

}  // namespace
}  // namespace portmat::cpu
