// Element casts between portmat's dtypes, on the host: what the CPU backend's device arrays use to
// change dtype (portmat.Array.astype, mixed-dtype products), and the rules the CUDA and OpenCL
// cast kernels (src/cuda/kernels/casts.cuh, src/opencl/kernels/casts.cl) follow element for
// element, so that a product gives the same bits on every backend:
//   - to bool: x != 0 (a complex number: either part != 0);
//   - integer to integer: the low bits, after extending the source by its own signedness
//     (NumPy's wrap-around);
//   - integer or bool to floating point: the value, rounded to nearest even once; to float16 /
//     bfloat16 through float32 (every backend converts them from float32): exact below 2^24, so
//     only bfloat16 of a larger integer can be rounded twice (2^24 + 2^16 + 1 gives 2^24);
//   - floating point to floating point: rounded to nearest even once (float64 to float16 /
//     bfloat16 goes through float32: rounded twice); products reach these double roundings only
//     with an out narrower than NumPy's result dtype (the operands are cast to out's dtype first);
//   - real to complex: (x, 0); complex to real: the real part (NumPy's ComplexWarning case);
//   - floating point to integer: truncated toward zero; NaN and values out of int64's range give
//     INT64_MIN's low bits (what NumPy gives on x86), a case no product of portmat reaches.
#pragma once

#include <cstdint>

#include "portmat/portmat.hpp"

namespace portmat::core {

// dst[i] = src[i] converted from `from` to `to`, for i < count (contiguous, both aligned).
void cast_elements(const void* src, DType from, void* dst, DType to, std::int64_t count);

// IEEE binary16 and bfloat16 from and to float32 (round to nearest even), in software (dtypes.cpp).
float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float x);
float bfloat_to_float(std::uint16_t h);
std::uint16_t float_to_bfloat(float x);

// The dtype a product of dtype t is computed in on a device: float16 / bfloat16 in float32
// (accumulated there, rounded once to t), bool and 8/16-bit integers in int32 (wrapping; bool is
// the logical product, the int32 sum != 0), every other dtype in itself.
DType compute_dtype(DType t);

}  // namespace portmat::core
