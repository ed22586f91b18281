// See broadcast.hpp.
#include "core/broadcast.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace portmat::core {

namespace {

// What decides sum_k x * v_k for one run v_0 .. v_{K-1}: the sum of the v_k (float64 for floats,
// wrapping in T for the unsigned integer types), and for floats whether any v_k is zero, positive
// or negative (NaN shows in the sum).
template <class T>
struct RunStats {
  using Sum = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  Sum sum = 0;
  bool zero = false, pos = false, neg = false;
  void add(T v) {
    sum += v;
    if constexpr (std::is_floating_point_v<T>) {
      zero |= v == 0;
      pos |= v > 0;
      neg |= v < 0;
    }
  }
  void repeat(T v, std::int64_t len) {  // len equal terms
    add(v);
    sum = static_cast<Sum>(v) * static_cast<Sum>(len);
  }
};

// sum_k x * v_k as NumPy's sum of products gives it. Integers: x * sum, modulo 2^bits. Floats:
// for finite x that is x * sum_k v_k (NaN and inf in the v_k show in the sum; 0 * inf is NaN
// either way); an infinite x gives NaN if any term is NaN (a zero v_k, a NaN, or infinities of
// both signs), else an infinity with the sign of x times the v_k's common sign.
template <class T>
T times_run(T x, const RunStats<T>& r) {
  if constexpr (!std::is_floating_point_v<T>) {
    return static_cast<T>(x * r.sum);
  } else {
    if (!std::isinf(x)) return static_cast<T>(x * r.sum);
    if (r.zero || std::isnan(r.sum) || (r.pos && r.neg)) return std::numeric_limits<T>::quiet_NaN();
    return (x > 0) == r.pos ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity();
  }
}

template <class T>
T at(const MatrixView& v, std::int64_t i, std::int64_t j) {
  return static_cast<const T*>(v.data)[i * v.row_stride + j * v.col_stride];
}

// `count` runs of length `len`: run r has element t at v(r, t) (along_rows: v(t, r)).
template <class T>
std::vector<RunStats<T>> run_stats(const MatrixView& v, bool along_rows, std::int64_t count,
                                   std::int64_t len) {
  std::vector<RunStats<T>> out(static_cast<std::size_t>(count));
  const std::int64_t step = along_rows ? v.row_stride : v.col_stride;
  if (step == 0) {  // constant along the run too: len equal terms
    for (std::int64_t r = 0; r < count; ++r) out[r].repeat(along_rows ? at<T>(v, 0, r) : at<T>(v, r, 0), len);
    return out;
  }
  // Walk v in its own row order so that a row-major view is read sequentially.
  for (std::int64_t i = 0; i < v.rows; ++i)
    for (std::int64_t j = 0; j < v.cols; ++j) out[along_rows ? j : i].add(at<T>(v, i, j));
  return out;
}

// c = a @ b where a is constant along k (a_const) or b is.
template <class T>
void rank_one(const MatrixView& a, const MatrixView& b, const MatrixView& c, bool a_const) {
  const std::int64_t M = a.rows, N = b.cols, K = a.cols;
  // a constant along k: c[i, j] = a[i, 0] times the run down b's column j.
  // b constant along k: c[i, j] = b[0, j] times the run along a's row i.
  const auto runs = a_const ? run_stats<T>(b, true, N, K) : run_stats<T>(a, false, M, K);
  for (std::int64_t i = 0; i < M; ++i) {
    T* row = static_cast<T*>(c.data) + i * c.row_stride;
    for (std::int64_t j = 0; j < N; ++j)
      row[j] = a_const ? times_run(at<T>(a, i, 0), runs[j]) : times_run(at<T>(b, 0, j), runs[i]);
  }
}

}  // namespace

bool multiply_broadcast(const MatrixView& a, const MatrixView& b, const MatrixView& c,
                        const Product& product) {
  const std::int64_t M = a.rows, N = b.cols, K = a.cols;
  const std::size_t es = dtype_size(c.dtype);
  auto* c0 = static_cast<unsigned char*>(c.data);
  if (M > 1 && a.row_stride == 0) {
    product({a.data, 1, K, 0, a.col_stride, a.dtype}, b, {c.data, 1, N, c.row_stride, 1, c.dtype});
    for (std::int64_t i = 1; i < M; ++i) std::memcpy(c0 + i * c.row_stride * es, c0, N * es);
    return true;
  }
  if (N > 1 && b.col_stride == 0) {
    product(a, {b.data, K, 1, b.row_stride, 0, b.dtype}, {c.data, M, 1, c.row_stride, 1, c.dtype});
    for (std::int64_t i = 0; i < M; ++i) {
      unsigned char* row = c0 + i * c.row_stride * es;
      for (std::int64_t j = 1; j < N; ++j) std::memcpy(row + j * es, row, es);
    }
    return true;
  }
  if (K > 1 && (a.col_stride == 0 || b.row_stride == 0)) {
    const bool a_const = a.col_stride == 0;
    switch (c.dtype) {
      case DType::f32: rank_one<float>(a, b, c, a_const); break;
      case DType::f64: rank_one<double>(a, b, c, a_const); break;
      case DType::u32: rank_one<std::uint32_t>(a, b, c, a_const); break;
      case DType::u64: rank_one<std::uint64_t>(a, b, c, a_const); break;
      default: throw std::logic_error(std::string("multiply_broadcast: ") + dtype_name(c.dtype) + " is not computed");
    }
    return true;
  }
  return false;
}

}  // namespace portmat::core
