// The AVX2 + FMA float traits of the micro-kernels (tile_common.hpp's S): F32 and F64 on ymm
// vectors, and the stack-buffer partial loads and stores of edge columns, shared by the real
// kernels (gemm_avx2.cpp) and the complex ones (gemm_complex_avx2.cpp). Include it only from files
// compiled with -mavx2 -mfma (cpu.cmake); internal linkage, as tile_common.hpp.
#pragma once

#include <immintrin.h>

namespace portmat::cpu {
namespace {

// Partial vectors through a small stack buffer: AVX2 has no cheap masked stores of every width,
// and edge tiles are rare.
template <class S>
typename S::V load_part_via_stack(const typename S::T* p, int n) {
  alignas(32) typename S::T t[S::lanes] = {};
  for (int i = 0; i < n; ++i) t[i] = p[i];
  return S::load(t);
}
template <class S>
void store_part_via_stack(typename S::T* p, typename S::V v, int n) {
  alignas(32) typename S::T t[S::lanes];
  S::store(t, v);
  for (int i = 0; i < n; ++i) p[i] = t[i];
}

struct F32 {
  using T = float;
  using V = __m256;
  static constexpr int lanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const T* p) { return _mm256_loadu_ps(p); }
  static V bcast(const T* p) { return _mm256_broadcast_ss(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static void store(T* p, V v) { _mm256_storeu_ps(p, v); }
  static V load_part(const T* p, int n) { return load_part_via_stack<F32>(p, n); }
  static void store_part(T* p, V v, int n) { store_part_via_stack<F32>(p, v, n); }
};

struct F64 {
  using T = double;
  using V = __m256d;
  static constexpr int lanes = 4;
  static V zero() { return _mm256_setzero_pd(); }
  static V load(const T* p) { return _mm256_loadu_pd(p); }
  static V bcast(const T* p) { return _mm256_broadcast_sd(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static V add(V a, V b) { return _mm256_add_pd(a, b); }
  static void store(T* p, V v) { _mm256_storeu_pd(p, v); }
  static V load_part(const T* p, int n) { return load_part_via_stack<F64>(p, n); }
  static void store_part(T* p, V v, int n) { store_part_via_stack<F64>(p, v, n); }
};

}  // namespace
}  // namespace portmat::cpu
