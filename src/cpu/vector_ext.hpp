// What the unpacked kernels (skinny.cpp, small.cpp) share: vectors as GCC vector extensions,
// unaligned loads and stores of them, and the target attributes of their clones. Each kernel
// template is compiled in functions with PM_TARGET_AVX512, PM_TARGET_AVX2 and for the baseline,
// and one is picked at run time (function attributes rather than ifunc / target_clones, whose
// resolvers run before sanitizer runtimes are up).
//
// 32-byte vectors by default: one ymm register on AVX2. The AVX-512 clones use 64-byte ones (one
// zmm): small.cpp's tiles are compute-bound, and with ymm they ran at half the packed GEMM's
// AVX-512 rate (docs/cpu.md, "AVX-512 tiles"). skinny.cpp's baseline uses 16 (one xmm on x86-64).
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu/always_inline.hpp"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define PM_CPU_AVX2_CLONES 1
#define PM_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define PM_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace portmat::cpu {

// B: the vector's bytes, 32 everywhere but in small.cpp's AVX-512 clones (64: one zmm register).
template <class T, int B = 32>
struct VecOf {
  typedef T type __attribute__((vector_size(B)));
};
template <class T, int B = 32>
using Vec = typename VecOf<T, B>::type;
template <class T, int B = 32>
constexpr int kLanes = B / sizeof(T);

// Elements of T from `row` to the next B-byte boundary where every row of a matrix `ld` elements
// apart sits at that same offset (ld a multiple of the lanes, the start element-aligned), else 0:
// where skinny.cpp's vector loops start, so that their loads read whole cache lines, and whether
// small.cpp copies b's strips to aligned memory.
template <class T, int B = 32>
inline std::int64_t elements_to_boundary(const T* row, std::int64_t ld) {
  const auto start = reinterpret_cast<std::uintptr_t>(row);
  if (ld % kLanes<T, B> != 0 || start % sizeof(T) != 0) return 0;
  return static_cast<std::int64_t>((B - start % B) % B / sizeof(T));
}

// Internal linkage (static): a vector's calling convention differs between the AVX2 clones and
// the baseline, so no out-of-line copy may be shared between translation units.
template <class T, int B = 32>
[[gnu::always_inline]] static inline Vec<T, B> load(const T* p) {
  Vec<T, B> v;
  std::memcpy(&v, p, sizeof v);  // an unaligned vector load
  return v;
}
// Through the vector type at the element's alignment, not memcpy: GCC joined the memcpys of a tile
// row's adjacent vectors into one copy from a stack image of all the accumulators, spilled there
// after the loop (small.cpp's AVX2 tiles: 12 ymm stores, then 24 xmm loads and 24 stores). 2-core
// Zen 4 with PORTMAT_CPU_ISA=avx2, float32 GFLOP/s, a process per variant, medians of 3
// alternating rounds, memcpy / this: (65536 x 16) @ (16 x 16) 158 / 199, (16 x 16) @ (16 x 65536)
// 116 / 137, (256 x 64) @ (64 x 256) 190 / 198, 192^3 213 / 218; AVX-512 unchanged.
template <class T, class V>
[[gnu::always_inline]] static inline void store(T* p, const V& v) {
  typedef V Unaligned __attribute__((aligned(alignof(T)), may_alias));
  *reinterpret_cast<Unaligned*>(p) = v;
}

// Keeps a loaded vector in a register: GCC otherwise folds each use of a load into its
// multiply-add as a memory operand, loading it again for every use (skinny.cpp's dots read each
// vector of the short operand twice, 10 loads for 8 multiply-adds, where 2 + 4 are needed). An
// empty asm whose operand is the vector, in and out; only where one register holds it (x86: a
// vector of at most the clone's width).
template <class V>
[[gnu::always_inline]] static inline void in_register(V& v) {
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
  __asm__("" : "+v"(v));
#else
  (void)v;
#endif
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
