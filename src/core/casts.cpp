// Element casts between portmat's dtypes on the host (casts.hpp has the rules). Used by the CPU
// backend's device arrays, whose memory is host memory: a cast there is a loop, not a kernel.
// Every element goes through one carrier (a double pair, or a 64-bit integer with its
// signedness), as the CUDA and OpenCL cast kernels do, so the three give the same bits.
#include <cmath>
#include <complex>
#include <cstring>
#include <stdexcept>

#include "core/casts.hpp"

namespace portmat::core {

namespace {

struct Carrier {
  double re = 0, im = 0;   // floating-point sources
  std::uint64_t bits = 0;  // integer sources, extended to 64 bits by their own signedness
  int kind = 0;            // 0: floating point, 1: signed integer (and bool), 2: unsigned integer
};

template <class T>
T at(const void* p, std::int64_t i) {
  T x;
  std::memcpy(&x, static_cast<const unsigned char*>(p) + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
  return x;
}

template <class T>
void put(void* p, std::int64_t i, T x) {
  std::memcpy(static_cast<unsigned char*>(p) + i * static_cast<std::int64_t>(sizeof(T)), &x, sizeof(T));
}

Carrier load(const void* p, DType t, std::int64_t i) {
  Carrier v;
  auto sint = [&](std::int64_t x) { v.bits = static_cast<std::uint64_t>(x), v.kind = 1; };
  auto uint = [&](std::uint64_t x) { v.bits = x, v.kind = 2; };
  switch (t) {
    case DType::f32: v.re = at<float>(p, i); break;
    case DType::f64: v.re = at<double>(p, i); break;
    case DType::f16: v.re = half_to_float(at<std::uint16_t>(p, i)); break;
    case DType::bf16: v.re = bfloat_to_float(at<std::uint16_t>(p, i)); break;
    case DType::c64: {
      const auto z = at<std::complex<float>>(p, i);
      v.re = z.real(), v.im = z.imag();
      break;
    }
    case DType::c128: {
      const auto z = at<std::complex<double>>(p, i);
      v.re = z.real(), v.im = z.imag();
      break;
    }
    case DType::boolean: sint(at<std::uint8_t>(p, i) != 0); break;
    case DType::i8: sint(at<std::int8_t>(p, i)); break;
    case DType::i16: sint(at<std::int16_t>(p, i)); break;
    case DType::i32: sint(at<std::int32_t>(p, i)); break;
    case DType::i64: sint(at<std::int64_t>(p, i)); break;
    case DType::u8: uint(at<std::uint8_t>(p, i)); break;
    case DType::u16: uint(at<std::uint16_t>(p, i)); break;
    case DType::u32: uint(at<std::uint32_t>(p, i)); break;
    case DType::u64: uint(at<std::uint64_t>(p, i)); break;
  }
  return v;
}

// The carrier as a float / double (integers converted directly: one rounding).
template <class R>
R real_of(const Carrier& v) {
  if (v.kind == 1) return static_cast<R>(static_cast<std::int64_t>(v.bits));
  if (v.kind == 2) return static_cast<R>(v.bits);
  return static_cast<R>(v.re);
}

std::uint64_t bits_of(const Carrier& v) {
  if (v.kind != 0) return v.bits;
  if (!(v.re > -9223372036854775808.0 && v.re < 9223372036854775808.0))
    return std::uint64_t(1) << 63;  // NaN, out of range: INT64_MIN
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(v.re));
}

void store(void* p, DType t, std::int64_t i, const Carrier& v) {
  switch (t) {
    case DType::f32: return put(p, i, real_of<float>(v));
    case DType::f64: return put(p, i, real_of<double>(v));
    case DType::f16: return put(p, i, float_to_half(real_of<float>(v)));
    case DType::bf16: return put(p, i, float_to_bfloat(real_of<float>(v)));
    case DType::c64:
      return put(p, i, std::complex<float>(real_of<float>(v), static_cast<float>(v.kind ? 0.0 : v.im)));
    case DType::c128: return put(p, i, std::complex<double>(real_of<double>(v), v.kind ? 0.0 : v.im));
    case DType::boolean:
      return put(p, i, static_cast<std::uint8_t>(v.kind ? v.bits != 0 : (v.re != 0 || v.im != 0)));
    case DType::i8:
    case DType::u8: return put(p, i, static_cast<std::uint8_t>(bits_of(v)));
    case DType::i16:
    case DType::u16: return put(p, i, static_cast<std::uint16_t>(bits_of(v)));
    case DType::i32:
    case DType::u32: return put(p, i, static_cast<std::uint32_t>(bits_of(v)));
    case DType::i64:
    case DType::u64: return put(p, i, bits_of(v));
  }
}

}  // namespace

void cast_elements(const void* src, DType from, void* dst, DType to, std::int64_t count) {
  if (from == to) {
    std::memcpy(dst, src, static_cast<std::size_t>(count) * dtype_size(to));
    return;
  }
  for (std::int64_t i = 0; i < count; ++i) store(dst, to, i, load(src, from, i));
}

DType compute_dtype(DType t) {
  switch (t) {
    case DType::f16:
    case DType::bf16: return DType::f32;
    case DType::boolean:
    case DType::i8:
    case DType::i16:
    case DType::u8:
    case DType::u16: return DType::i32;
    default: return t;
  }
}

}  // namespace portmat::core
