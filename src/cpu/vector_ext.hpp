// What the unpacked kernels (skinny.cpp, small.cpp) share: 32-byte vectors as GCC vector
// extensions, unaligned loads and stores of them, and the AVX2 + FMA clones. Each kernel template
// is compiled twice, once in a function with PM_TARGET_AVX2 and once for the baseline, and
// has_avx2_fma() picks one at run time (function attributes rather than ifunc / target_clones,
// whose resolvers run before sanitizer runtimes are up).
//
// 32-byte vectors: one ymm register on AVX2 and AVX-512 (these kernels are memory-bound or
// register-bound; wider vectors would only raise register pressure), two xmm on baseline x86-64.
#pragma once

#include <cstring>

#include "cpu/always_inline.hpp"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define PM_CPU_AVX2_CLONES 1
#define PM_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace portmat::cpu {

template <class T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(32)));
};
template <class T>
using Vec = typename VecOf<T>::type;
template <class T>
constexpr int kLanes = 32 / sizeof(T);

// Internal linkage (static): a vector's calling convention differs between the AVX2 clones and
// the baseline, so no out-of-line copy may be shared between translation units.
template <class T>
[[gnu::always_inline]] static inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);  // an unaligned vector load
  return v;
}
template <class T>
[[gnu::always_inline]] static inline void store(T* p, const Vec<T>& v) {
  std::memcpy(p, &v, sizeof v);
}

// Whether this CPU runs the PM_TARGET_AVX2 clones.
inline bool has_avx2_fma() {
#ifdef PM_CPU_AVX2_CLONES
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

}  // namespace portmat::cpu
