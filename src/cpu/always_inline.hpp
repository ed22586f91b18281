// PM_LAMBDA_ALWAYS_INLINE: a lambda the compiler must inline (GCC / Clang syntax; other compilers
// decide for themselves). Both kinds of CPU kernel need it: a lambda is a function of its own,
// compiled with the enclosing file's flags rather than for the target of the function it sits in
// (the micro-kernels' tile_common.hpp, the unpacked kernels' PM_TARGET_AVX2 clones), unless it is
// inlined there.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define PM_LAMBDA_ALWAYS_INLINE __attribute__((always_inline))
#else
#define PM_LAMBDA_ALWAYS_INLINE
#endif
