// See broadcast.hpp.
#include "core/broadcast.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace portmat::core {

namespace {

// What decides sum_k x * v_k for one run v_0 .. v_{K-1}: the sum of the v_k (float64), and
// whether any v_k is zero, positive or negative (NaN shows in the sum).
struct RunStats {
  double sum = 0;
  bool zero = false, pos = false, neg = false;
  void add(double v) {
    sum += v;
    zero |= v == 0;
    pos |= v > 0;
    neg |= v < 0;
  }
};

// sum_k x * v_k as NumPy's sum of products gives it for special values: for finite x that is
// x * sum_k v_k (NaN and inf in the v_k show in the sum; 0 * inf is NaN either way); an infinite
// x gives NaN if any term is NaN (a zero v_k, a NaN, or infinities of both signs), else an
// infinity with the sign of x times the v_k's common sign.
double times_run(double x, const RunStats& r) {
  if (!std::isinf(x)) return x * r.sum;
  if (r.zero || std::isnan(r.sum) || (r.pos && r.neg)) return std::numeric_limits<double>::quiet_NaN();
  return (x > 0) == r.pos ? std::numeric_limits<double>::infinity()
                          : -std::numeric_limits<double>::infinity();
}

template <class T>
T at(const MatrixView& v, std::int64_t i, std::int64_t j) {
  return static_cast<const T*>(v.data)[i * v.row_stride + j * v.col_stride];
}

// `count` runs of length `len`: run r has element t at v(r, t) (along_rows: v(t, r)).
template <class T>
std::vector<RunStats> run_stats(const MatrixView& v, bool along_rows, std::int64_t count,
                                std::int64_t len) {
  std::vector<RunStats> out(static_cast<std::size_t>(count));
  const std::int64_t step = along_rows ? v.row_stride : v.col_stride;
  for (std::int64_t r = 0; r < count; ++r) {
    if (step == 0) {  // constant along the run too: len equal terms
      const double x = along_rows ? at<T>(v, 0, r) : at<T>(v, r, 0);
      out[r].add(x);
      out[r].sum = x * static_cast<double>(len);
    }
  }
  if (step != 0) {
    // Walk v in its own row order so that a row-major view is read sequentially.
    for (std::int64_t i = 0; i < v.rows; ++i)
      for (std::int64_t j = 0; j < v.cols; ++j) out[along_rows ? j : i].add(at<T>(v, i, j));
  }
  return out;
}

// c = a @ b where a is constant along k (a_const) or b is.
template <class T>
void rank_one(const MatrixView& a, const MatrixView& b, const MatrixView& c, bool a_const) {
  const std::int64_t M = a.rows, N = b.cols, K = a.cols;
  // a constant along k: c[i, j] = a[i, 0] times the run down b's column j.
  // b constant along k: c[i, j] = b[0, j] times the run along a's row i.
  const std::vector<RunStats> runs = a_const ? run_stats<T>(b, true, N, K) : run_stats<T>(a, false, M, K);
  for (std::int64_t i = 0; i < M; ++i) {
    T* row = static_cast<T*>(c.data) + i * c.row_stride;
    for (std::int64_t j = 0; j < N; ++j)
      row[j] = static_cast<T>(a_const ? times_run(at<T>(a, i, 0), runs[j]) : times_run(at<T>(b, 0, j), runs[i]));
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
    if (c.dtype == DType::f32)
      rank_one<float>(a, b, c, a.col_stride == 0);
    else
      rank_one<double>(a, b, c, a.col_stride == 0);
    return true;
  }
  return false;
}

}  // namespace portmat::core
