// dtypes: names and sizes, and the conversions that bring every dtype to one of the four the
// kernels compute (batch.hpp): float16 through float32, boolean and 8/16-bit integers through
// the uint32 product, integers through float64 where that is exact (devices without integer
// kernels), complex through one real product.
//
// Integer arithmetic: NumPy's integer matmul wraps around modulo 2^bits. Modular arithmetic
// commutes with widening and narrowing, so an int8 product computed in uint32 and truncated to
// 8 bits is NumPy's exactly, whichever way the operands were extended; unsigned types make the
// wrap-around defined in C++.
#include <complex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/batch.hpp"
#include "core/casts.hpp"

namespace portmat {

namespace {
struct DTypeInfo {
  DType type;
  const char* name;
  std::size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "float32", 4},   {DType::f64, "float64", 8},     {DType::f16, "float16", 2},
    {DType::c64, "complex64", 8}, {DType::c128, "complex128", 16}, {DType::boolean, "bool", 1},
    {DType::i8, "int8", 1},       {DType::i16, "int16", 2},        {DType::i32, "int32", 4},
    {DType::i64, "int64", 8},     {DType::u8, "uint8", 1},         {DType::u16, "uint16", 2},
    {DType::u32, "uint32", 4},    {DType::u64, "uint64", 8},      {DType::bf16, "bfloat16", 2},
};
const DTypeInfo& info(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d;
  throw std::invalid_argument("portmat: unknown dtype");
}
}  // namespace

std::size_t dtype_size(DType t) { return info(t).size; }
const char* dtype_name(DType t) { return info(t).name; }
DType dtype_from_name(const std::string& name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.type;
  throw std::invalid_argument("unsupported dtype '" + name + "'");
}

}  // namespace portmat

namespace portmat::core {

// ---- float16, IEEE binary16, in software (round to nearest even) -----------------------------
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, f;
  if (exp == 0 && mant == 0) {
    f = sign;
  } else if (exp == 0) {  // subnormal: normalise
    exp = 127 - 15 + 1;
    while (!(mant & 0x400u)) mant <<= 1, --exp;
    f = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  } else if (exp == 31) {  // inf, NaN
    f = sign | 0x7f800000u | (mant << 13);
  } else {
    f = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float x;
  std::memcpy(&x, &f, 4);
  return x;
}

std::uint16_t float_to_half(float x) {
  std::uint32_t f;
  std::memcpy(&f, &x, 4);
  const std::uint32_t sign = (f >> 16) & 0x8000u, exp = (f >> 23) & 0xffu;
  std::uint32_t mant = f & 0x7fffffu;
  if (exp == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow: inf
  if (e <= 0) {  // a half subnormal (or zero): m = mantissa with its implicit bit >> (14 - e)
    if (e < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t m = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (m & 1))) ++m;  // may carry into the exponent: fine
    return static_cast<std::uint16_t>(sign | m);
  }
  std::uint32_t h = sign | (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // a carry may reach inf: right
  return static_cast<std::uint16_t>(h);
}

// ---- bfloat16: the upper half of a float32, rounded to nearest even; NaN stays a (quiet) NaN ----
float bfloat_to_float(std::uint16_t h) {
  const std::uint32_t f = std::uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &f, 4);
  return x;
}

std::uint16_t float_to_bfloat(float x) {
  std::uint32_t f;
  std::memcpy(&f, &x, 4);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((f >> 16) | 0x40u);
  f += 0x7fffu + ((f >> 16) & 1u);
  return static_cast<std::uint16_t>(f >> 16);
}

namespace {

// Calls f(T{}) with the C++ type that stores dtype t (float16 and bfloat16 as their bits, boolean
// as a byte).
template <class F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(std::uint16_t{});
    case DType::c64: return f(std::complex<float>{});
    case DType::c128: return f(std::complex<double>{});
    case DType::boolean: return f(std::uint8_t{});
    case DType::i8: return f(std::int8_t{});
    case DType::i16: return f(std::int16_t{});
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    case DType::u8: return f(std::uint8_t{});
    case DType::u16: return f(std::uint16_t{});
    case DType::u32: return f(std::uint32_t{});
    case DType::u64: return f(std::uint64_t{});
    case DType::bf16: return f(std::uint16_t{});
  }
}

// One element from `from` to `to`, for the pairs the routes use (others are not reached).
template <class From, class To>
To convert(From x, DType from, DType to) {
  if constexpr (std::is_same_v<From, To>) {
    (void)from, (void)to;
    return x;
  } else if constexpr (std::is_same_v<From, std::uint16_t> && std::is_same_v<To, float>) {
    (void)to;
    return from == DType::f16 ? half_to_float(x) : from == DType::bf16 ? bfloat_to_float(x) : static_cast<float>(x);
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, std::uint16_t>) {
    (void)from;
    return to == DType::f16 ? float_to_half(x) : to == DType::bf16 ? float_to_bfloat(x) : static_cast<std::uint16_t>(x);
  } else if constexpr (std::is_integral_v<From> && std::is_integral_v<To>) {
    // A boolean is 0 or 1 whatever its byte holds (NumPy's truth value of a view's bytes).
    if (to == DType::boolean || from == DType::boolean) return static_cast<To>(x != 0);
    // Widening extends by the source's own signedness; narrowing keeps the low bits.
    return static_cast<To>(x);
  } else if constexpr (std::is_integral_v<From> && std::is_same_v<To, double>) {
    (void)from, (void)to;
    return static_cast<double>(x);
  } else if constexpr (std::is_same_v<From, double> && std::is_integral_v<To>) {
    (void)from;
    // An exact integer below 2^53 in magnitude: through int64, then wrapped to the target width.
    const std::int64_t v = static_cast<std::int64_t>(x);
    return to == DType::boolean ? static_cast<To>(v != 0) : static_cast<To>(static_cast<std::uint64_t>(v));
  } else {
    (void)x, (void)from, (void)to;
    throw std::logic_error("portmat: no conversion between these dtypes");
  }
}

constexpr std::int64_t kCopyTileRows = 64, kCopyTileCols = 8;

// dst[j] = convert(src[j]) for j < n: between integers (booleans as 0 / 1) a loop the compiler
// vectorises, where convert's dtype tests per element kept it scalar.
template <class From, class To>
void convert_run(const From* src, DType from, To* dst, DType to, std::int64_t n) {
  if constexpr (std::is_integral_v<From> && std::is_integral_v<To>) {
    if (to == DType::boolean || from == DType::boolean)
      for (std::int64_t j = 0; j < n; ++j) dst[j] = static_cast<To>(src[j] != 0);
    else
      for (std::int64_t j = 0; j < n; ++j) dst[j] = static_cast<To>(src[j]);
  } else {
    for (std::int64_t j = 0; j < n; ++j) dst[j] = convert<From, To>(src[j], from, to);
  }
}

template <class From, class To>
void copy_matrix(const MatrixView& v, DType to, To* dst) {
  const auto* src = static_cast<const From*>(v.data);
  const std::int64_t R = v.rows, C = v.cols, rs = v.row_stride, cs = v.col_stride;
  if (cs == 1) {  // rows contiguous
    for (std::int64_t i = 0; i < R; ++i, dst += C) convert_run<From, To>(src + i * rs, v.dtype, dst, to, C);
    return;
  }
  if (R < 2 || C < 2 || std::abs(cs) <= std::abs(rs)) {
    for (std::int64_t i = 0; i < R; ++i)
      for (std::int64_t j = 0; j < C; ++j) *dst++ = convert<From, To>(src[i * rs + j * cs], v.dtype, to);
    return;
  }
  // A source whose elements lie closer together down a column than along a row (column-major, a transposed
  // view): row by row each element comes from another cache line. In tiles of kCopyTileRows x
  // kCopyTileCols the tile's source lines (8 columns: fewer than L1's ways, where the columns are
  // 4 KiB apart) serve its rows while they are in L1, the destination written a row at a time.
  // A process per variant, us, row by row / tiles, 2-core machine: a (1024 x 1024, Fortran order)
  // complex64 packed for (1024 x 1024) @ (1024 x 8) 6037 / 3699, (2048 x 2048) @ (2048 x 64) 46821
  // / 34924; float16 (1024 x 1024, F) @ (1024) converted 9892 / 6016, int8 512^3 both F 4687 /
  // 3756; int8 matrix-vector products alike (3788 / 3954, 2863 / 2891). 32 x 32 tiles, a column at
  // a time, lost 2x on int8 (its destination rows 4 KiB apart in one L1 set).
  for (std::int64_t i0 = 0; i0 < R; i0 += kCopyTileRows)
    for (std::int64_t j0 = 0; j0 < C; j0 += kCopyTileCols) {
      const std::int64_t i1 = std::min(R, i0 + kCopyTileRows), j1 = std::min(C, j0 + kCopyTileCols);
      for (std::int64_t i = i0; i < i1; ++i)
        for (std::int64_t j = j0; j < j1; ++j) dst[i * C + j] = convert<From, To>(src[i * rs + j * cs], v.dtype, to);
    }
}

// Conversion buffers. Each thread keeps its last one (up to kKeptBytes) for its next call: a
// fresh buffer's pages fault in on first write (a 32 MiB B'' for a complex128 product at
// n = 1024 cost ~10 ms of faults on the 2-core machine), a kept one's are already there.
constexpr std::size_t kKeptBytes = std::size_t(256) << 20;
struct KeptBuffer {
  std::unique_ptr<unsigned char[]> p;
  std::size_t bytes = 0;
};
thread_local KeptBuffer t_kept;

std::shared_ptr<unsigned char> buffer(std::size_t bytes) {
  std::unique_ptr<unsigned char[]> p;
  if (t_kept.p && t_kept.bytes >= bytes && t_kept.bytes <= 2 * bytes + (std::size_t(1) << 20)) {
    p = std::move(t_kept.p);
    bytes = t_kept.bytes;
  } else {
    p.reset(new unsigned char[bytes]);
  }
  // Back to this thread's slot when the last user lets go (on this thread: conversions live
  // within one call), unless too big to keep.
  return std::shared_ptr<unsigned char>(p.release(), [bytes](unsigned char* q) {
    if (bytes <= kKeptBytes && (!t_kept.p || t_kept.bytes < bytes)) {
      t_kept.p.reset(q);
      t_kept.bytes = bytes;
    } else {
      delete[] q;
    }
  });
}

// f(begin, end) over [0, count), split between up to `threads` threads when the work is large
// enough to pay for starting them (the core has no pool of its own; the CPU backend's may be
// busy with the product this conversion feeds, or absent).
template <class F>
void in_parallel(std::int64_t count, std::int64_t elems_per_item, F&& f) {
  const std::int64_t work = count * elems_per_item;
  if (work < (std::int64_t(1) << 20) || count < 2) return f(std::int64_t(0), count);
  // Once a process: glibc's hardware_concurrency() opens and reads a file in /sys at every call,
  // which cost a small complex product (its b's real form comes through here) 3-5 us.
  static const int cpus = static_cast<int>(std::min<long>(std::thread::hardware_concurrency(), 8));
  int threads = cpus;
  if (threads <= 1) return f(std::int64_t(0), count);
  threads = static_cast<int>(std::min<std::int64_t>(threads, count));
  std::vector<std::thread> others;
  std::exception_ptr error;
  std::mutex error_mu;
  const std::int64_t share = (count + threads - 1) / threads;
  for (int t = 1; t < threads; ++t)
    others.emplace_back([&, t] {
      try {
        f(std::min(count, t * share), std::min(count, (t + 1) * share));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        error = std::current_exception();
      }
    });
  f(std::int64_t(0), std::min(count, share));
  for (auto& th : others) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

bool is_integer(DType t) {
  return t != DType::f32 && t != DType::f64 && t != DType::f16 && t != DType::bf16 && t != DType::c64 &&
         t != DType::c128;
}
bool is_signed(DType t) { return t == DType::i8 || t == DType::i16 || t == DType::i32 || t == DType::i64; }

MatrixView nth(const MatrixView& v, std::int64_t step, std::int64_t i) {
  MatrixView m = v;
  m.data = static_cast<unsigned char*>(v.data) + i * step * static_cast<std::int64_t>(dtype_size(v.dtype));
  return m;
}

Converted result_buffer(std::int64_t elements, DType t) {
  Converted out;
  out.storage = buffer(static_cast<std::size_t>(elements) * dtype_size(t));
  return out;
}

Converted convert_stack(const MatrixView& v, std::int64_t step, std::int64_t count, DType to,
                        bool keep_column_major) {
  Converted out;
  const std::int64_t distinct = step == 0 ? 1 : count, elems = v.rows * v.cols;
  const bool column_major = keep_column_major && v.rows > 1 && v.cols > 1 && std::abs(v.row_stride) < std::abs(v.col_stride);
  out.storage = buffer(static_cast<std::size_t>(distinct * elems) * dtype_size(to));
  out.view = column_major ? MatrixView{out.storage.get(), v.rows, v.cols, 1, v.rows, to}
                          : MatrixView{out.storage.get(), v.rows, v.cols, v.cols, 1, to};
  out.step = step == 0 ? 0 : elems;
  with_type(v.dtype, [&](auto from_t) {
    with_type(to, [&](auto to_t) {
      using From = decltype(from_t);
      using To = decltype(to_t);
      auto* dst = reinterpret_cast<To*>(out.storage.get());
      if (!column_major && distinct > 1 && v.col_stride == 1 && v.row_stride == v.cols && step == elems) {
        // A dense stack of row-major matrices: one matrix of all their rows (a call a matrix cost
        // a stack of 10000 int8 4 x 4 products more than their multiply-adds).
        MatrixView all = v;
        all.rows = distinct * v.rows;
        copy_matrix<From, To>(all, to, dst);
        return;
      }
      for (std::int64_t i = 0; i < distinct; ++i) {
        MatrixView m = nth(v, step, i);
        if (column_major)  // m^T row-major is m column-major
          std::swap(m.rows, m.cols), std::swap(m.row_stride, m.col_stride);
        copy_matrix<From, To>(m, to, dst + i * elems);
      }
    });
  });
  return out;
}

void store_stack(const void* src, DType from, const MatrixView& c, std::int64_t c_step, std::int64_t count) {
  with_type(from, [&](auto from_t) {
    with_type(c.dtype, [&](auto to_t) {
      using From = decltype(from_t);
      using To = decltype(to_t);
      const auto* s = static_cast<const From*>(src);
      // A dense stack (c's matrices one after another, rows contiguous) is one matrix of all their
      // rows; contiguous rows go through convert_run.
      const bool dense = c.col_stride == 1 && (c.rows <= 1 || c.row_stride == c.cols) && c_step == c.rows * c.cols;
      const std::int64_t matrices = dense ? 1 : count, rows = dense ? count * c.rows : c.rows;
      const std::int64_t ld = dense ? c.cols : c.row_stride;
      for (std::int64_t b = 0; b < matrices; ++b) {
        auto* dst = static_cast<To*>(nth(c, c_step, b).data);
        for (std::int64_t i = 0; i < rows; ++i) {
          if (c.col_stride == 1) {
            convert_run<From, To>(s, from, dst + i * ld, c.dtype, c.cols);
            s += c.cols;
            continue;
          }
          for (std::int64_t j = 0; j < c.cols; ++j)
            dst[i * ld + j * c.col_stride] = convert<From, To>(*s++, from, c.dtype);
        }
      }
    });
  });
}

double max_abs(const MatrixView& v, std::int64_t step, std::int64_t count) {
  double worst = 0;
  with_type(v.dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_integral_v<T>) {
      const std::int64_t distinct = step == 0 ? 1 : count;
      for (std::int64_t b = 0; b < distinct; ++b) {
        const auto* src = static_cast<const T*>(nth(v, step, b).data);
        for (std::int64_t i = 0; i < v.rows; ++i)
          for (std::int64_t j = 0; j < v.cols; ++j) {
            const T x = src[i * v.row_stride + j * v.col_stride];
            const double m = std::is_signed_v<T> && x < 0 ? -static_cast<double>(x) : static_cast<double>(x);
            worst = m > worst ? m : worst;
          }
      }
    }
  });
  return worst;
}

// dst's pairs = (-im, re) for src's pairs (re, im), n pairs: the odd rows of B''. float32 pairs as
// one 64-bit word each (rotated by 32 bits, the new low half's sign flipped); float64 pairs as two.
void swapped_pairs(const float* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t w;
    std::memcpy(&w, src + 2 * i, 8);
    w = ((w >> 32) | (w << 32)) ^ 0x80000000u;
    std::memcpy(dst + 2 * i, &w, 8);
  }
}
void swapped_pairs(const double* src, double* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[2 * i] = -src[2 * i + 1], dst[2 * i + 1] = src[2 * i];
}

// Rows of b this wide or wider go through memcpy and swapped_pairs; narrower ones (a matrix times a
// vector: one element a row) element by element, where two calls a row cost more than the row:
// (256 x 256) @ (256) complex64 spent 1.5-2 us of its 13 in them on the 2-core machine.
constexpr std::int64_t kComplexRowCopyMin = 8;

Converted complex_b(const MatrixView& b, std::int64_t step, std::int64_t count) {
  const bool single = b.dtype == DType::c64;
  Converted out;
  const std::int64_t distinct = step == 0 ? 1 : count, K = b.rows, N = b.cols;
  const std::int64_t elems = 4 * K * N;  // (2K x 2N) reals per matrix
  const std::size_t real_size = single ? 4 : 8;
  out.storage = buffer(static_cast<std::size_t>(distinct * elems) * real_size);
  out.view = {out.storage.get(), 2 * K, 2 * N, 2 * N, 1, single ? DType::f32 : DType::f64};
  out.step = step == 0 ? 0 : elems;
  auto fill = [&](auto real_t) {
    using R = decltype(real_t);
    for (std::int64_t m = 0; m < distinct; ++m) {
      const auto* src = static_cast<const std::complex<R>*>(nth(b, step, m).data);
      R* dst = reinterpret_cast<R*>(out.storage.get()) + m * elems;
      in_parallel(K, 4 * N, [&](std::int64_t k0, std::int64_t k1) {
        for (std::int64_t k = k0; k < k1; ++k) {
          R* even = dst + (2 * k) * (2 * N);
          R* odd = even + 2 * N;
          if (b.col_stride == 1 && N >= kComplexRowCopyMin) {
            // A row of b as it is, and its pairs swapped with a sign: plain loops over the reals
            // that the compiler vectorises (the strided loop below cost a 64 x 64 complex64
            // product 7-8 us of its 28).
            const R* row = reinterpret_cast<const R*>(src + k * b.row_stride);
            std::memcpy(even, row, static_cast<std::size_t>(2 * N) * sizeof(R));
            swapped_pairs(row, odd, N);
            continue;
          }
          for (std::int64_t n = 0; n < N; ++n) {
            const std::complex<R> z = src[k * b.row_stride + n * b.col_stride];
            even[2 * n] = z.real(), even[2 * n + 1] = z.imag();
            odd[2 * n] = -z.imag(), odd[2 * n + 1] = z.real();
          }
        }
      });
    }
  };
  if (single)
    fill(float{});
  else
    fill(double{});
  return out;
}

Converted complex_parts_a(const MatrixView& a, std::int64_t step, std::int64_t count) {
  const bool single = a.dtype == DType::c64;
  Converted out;
  const std::int64_t distinct = step == 0 ? 1 : count, M = a.rows, K = a.cols, elems = 2 * M * K;
  out.storage = buffer(static_cast<std::size_t>(distinct * elems) * (single ? 4 : 8));
  out.view = {out.storage.get(), 2 * M, K, K, 1, single ? DType::f32 : DType::f64};
  out.step = step == 0 ? 0 : elems;
  auto fill = [&](auto real_t) {
    using R = decltype(real_t);
    for (std::int64_t m = 0; m < distinct; ++m) {
      const auto* src = static_cast<const std::complex<R>*>(nth(a, step, m).data);
      R* re = reinterpret_cast<R*>(out.storage.get()) + m * elems;
      R* im = re + M * K;
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t k = 0; k < K; ++k) {
          const std::complex<R> z = src[i * a.row_stride + k * a.col_stride];
          re[i * K + k] = z.real(), im[i * K + k] = z.imag();
        }
    }
  };
  if (single)
    fill(float{});
  else
    fill(double{});
  return out;
}

void store_complex_rows(const void* r, const MatrixView& c, std::int64_t c_step, std::int64_t count) {
  const std::int64_t M = c.rows, N = c.cols;
  auto store = [&](auto real_t) {
    using R = decltype(real_t);
    for (std::int64_t b = 0; b < count; ++b) {
      const R* rb = static_cast<const R*>(r) + b * 4 * M * N;
      auto* dst = static_cast<std::complex<R>*>(nth(c, c_step, b).data);
      for (std::int64_t i = 0; i < M; ++i) {
        const R* p = rb + i * 2 * N;          // (re a_i . re b, re a_i . im b) interleaved
        const R* q = rb + (M + i) * 2 * N;    // (im a_i . re b, im a_i . im b)
        std::complex<R>* ci = dst + i * c.row_stride;
        for (std::int64_t n = 0; n < N; ++n)
          ci[n * c.col_stride] = {p[2 * n] - q[2 * n + 1], p[2 * n + 1] + q[2 * n]};
      }
    }
  };
  if (c.dtype == DType::c64)
    store(float{});
  else
    store(double{});
}

}  // namespace portmat::core
