// See reference.hpp.
#include "core/reference.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace portmat::reference {

namespace {
double at(const MatrixView& v, std::int64_t i, std::int64_t j) {
  const std::int64_t off = i * v.row_stride + j * v.col_stride;
  return v.dtype == DType::f32 ? static_cast<const float*>(v.data)[off]
                               : static_cast<const double*>(v.data)[off];
}
}  // namespace

// The operands as dense row-major doubles, made once: the loops below then read plain arrays
// (the strided, dtype-switched reads of `at` in the innermost loop made a 2000 x 1000 x 1000
// reference take seconds, most of a GPU test's time).
namespace {
std::vector<double> dense(const MatrixView& v) {
  std::vector<double> d(static_cast<std::size_t>(v.rows * v.cols));
  for (std::int64_t i = 0; i < v.rows; ++i)
    for (std::int64_t j = 0; j < v.cols; ++j) d[i * v.cols + j] = at(v, i, j);
  return d;
}
}  // namespace

void gemm(const MatrixView& a, const MatrixView& b, std::vector<double>& ref,
          std::vector<double>& mag) {
  const std::int64_t M = a.rows, N = b.cols, K = a.cols;
  ref.assign(static_cast<std::size_t>(M * N), 0.0);
  mag.assign(static_cast<std::size_t>(M * N), 0.0);
  const std::vector<double> A = dense(a), B = dense(b);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t k = 0; k < K; ++k) {
      const double aik = A[i * K + k];
      const double* bk = B.data() + k * N;
      double* r = ref.data() + i * N;
      double* g = mag.data() + i * N;
      for (std::int64_t j = 0; j < N; ++j) {
        const double p = aik * bk[j];
        r[j] += p;
        g[j] += std::fabs(p);
      }
    }
}

double worst_error_ratio(const MatrixView& a, const MatrixView& b, const MatrixView& c) {
  std::vector<double> ref, mag;
  gemm(a, b, ref, mag);
  const double eps = c.dtype == DType::f32 ? std::numeric_limits<float>::epsilon()
                                           : std::numeric_limits<double>::epsilon();
  const double K = static_cast<double>(std::max<std::int64_t>(a.cols, 1));
  double worst = 0.0;
  for (std::int64_t i = 0; i < c.rows; ++i)
    for (std::int64_t j = 0; j < c.cols; ++j) {
      const double got = at(c, i, j), r = ref[i * c.cols + j];
      const double bound = K * eps * mag[i * c.cols + j] + std::numeric_limits<double>::min();
      const double ratio = std::fabs(got - r) / bound;
      if (std::isnan(ratio)) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, ratio);
    }
  return worst;
}

// ---- the precision modes -------------------------------------------------------------------------

namespace {
std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
// x rounded to nearest-even keeping the top 32 - drop bits; infinities and NaN as the header says.
float round_bits(float x, int drop, std::uint32_t nan) {
  std::uint32_t u = bits_of(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x7fffffu) ? float_of(nan) : x;
  const std::uint32_t half = (1u << (drop - 1)) - 1u, mask = ~((1u << drop) - 1u);
  u += half + ((u >> drop) & 1u);
  return float_of(u & mask);
}
}  // namespace

float round_tf32(float x) { return round_bits(x, 13, 0x7fffffffu); }
float round_bf16(float x) { return round_bits(x, 16, 0x7fffffffu); }

void split_tf32(float x, float& hi, float& lo) {
  hi = round_tf32(x);
  lo = std::isfinite(hi) ? round_tf32(x - hi) : 0.f;
}

double mode_product(Precision p, float a, float b) {
  switch (p) {
    case Precision::float32: return static_cast<double>(a) * b;
    case Precision::tf32: return static_cast<double>(round_tf32(a)) * round_tf32(b);
    case Precision::bfloat16: return static_cast<double>(round_bf16(a)) * round_bf16(b);
    case Precision::float32_tc: {
      float ah, al, bh, bl;
      split_tf32(a, ah, al);
      split_tf32(b, bh, bl);
      return static_cast<double>(al) * bh + static_cast<double>(ah) * bl + static_cast<double>(ah) * bh;
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void gemm_mode(Precision p, const MatrixView& a, const MatrixView& b, std::vector<double>& ref,
               std::vector<double>& mag) {
  if (a.dtype != DType::f32 || b.dtype != DType::f32)
    throw std::invalid_argument("reference::gemm_mode: the modes are of float32 products");
  const std::int64_t M = a.rows, N = b.cols, K = a.cols;
  ref.assign(static_cast<std::size_t>(M * N), 0.0);
  mag.assign(static_cast<std::size_t>(M * N), 0.0);
  // Each operand once as doubles: its value, and the parts the mode multiplies (the rounded
  // value; float32_tc's hi and lo), so that the inner loop is plain arithmetic; the sum per product
  // is mode_product's, term for term.
  struct Parts {
    std::vector<double> x, hi, lo;
  };
  auto parts = [p](const MatrixView& v) {
    Parts d;
    const std::size_t n = static_cast<std::size_t>(v.rows * v.cols);
    d.x.resize(n), d.hi.resize(n), d.lo.resize(n);
    for (std::int64_t i = 0; i < v.rows; ++i)
      for (std::int64_t j = 0; j < v.cols; ++j) {
        const float x = static_cast<const float*>(v.data)[i * v.row_stride + j * v.col_stride];
        float hi = x, lo = 0.f;
        if (p == Precision::tf32) hi = round_tf32(x);
        if (p == Precision::bfloat16) hi = round_bf16(x);
        if (p == Precision::float32_tc) split_tf32(x, hi, lo);
        const std::size_t at = static_cast<std::size_t>(i * v.cols + j);
        d.x[at] = x, d.hi[at] = hi, d.lo[at] = lo;
      }
    return d;
  };
  const Parts A = parts(a), B = parts(b);
  const bool split = p == Precision::float32_tc;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t k = 0; k < K; ++k) {
      const std::size_t ik = static_cast<std::size_t>(i * K + k), k0 = static_cast<std::size_t>(k * N);
      const double ax = A.x[ik], ah = A.hi[ik], al = A.lo[ik];
      double* r = ref.data() + i * N;
      double* g = mag.data() + i * N;
      if (split) {
        for (std::int64_t j = 0; j < N; ++j) {
          r[j] += al * B.hi[k0 + j] + ah * B.lo[k0 + j] + ah * B.hi[k0 + j];
          g[j] += std::fabs(ax * B.x[k0 + j]);
        }
      } else {
        for (std::int64_t j = 0; j < N; ++j) {
          r[j] += ah * B.hi[k0 + j];
          g[j] += std::fabs(ax * B.x[k0 + j]);
        }
      }
    }
}

namespace {
double accumulation_bound(Precision p, std::int64_t k) {
  const double kk = static_cast<double>(std::max<std::int64_t>(k, 1));
  return (p == Precision::float32_tc ? 3.0 : 1.0) * kk * std::ldexp(1.0, -23);
}
}  // namespace

double error_bound(Precision p, std::int64_t k) {
  double operands = 0;
  switch (p) {
    case Precision::float32: operands = 0; break;
    case Precision::tf32: operands = 2 * std::ldexp(1.0, -11) + std::ldexp(1.0, -22); break;
    case Precision::bfloat16: operands = 2 * std::ldexp(1.0, -8) + std::ldexp(1.0, -16); break;
    case Precision::float32_tc: operands = 3 * std::ldexp(1.0, -22) + std::ldexp(1.0, -44); break;
  }
  return operands + accumulation_bound(p, k);
}

namespace {
double worst_against(const std::vector<double>& ref, const std::vector<double>& mag, const MatrixView& c,
                     double scale) {
  double worst = 0.0;
  for (std::int64_t i = 0; i < c.rows; ++i)
    for (std::int64_t j = 0; j < c.cols; ++j) {
      const double got = at(c, i, j), r = ref[i * c.cols + j];
      const double ratio = std::fabs(got - r) / (scale * mag[i * c.cols + j] + std::numeric_limits<double>::min());
      if (std::isnan(ratio)) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, ratio);
    }
  return worst;
}
}  // namespace

double worst_mode_ratio(Precision p, const MatrixView& a, const MatrixView& b, const MatrixView& c) {
  std::vector<double> ref, mag;
  gemm_mode(p, a, b, ref, mag);
  return worst_against(ref, mag, c, accumulation_bound(p, a.cols));
}

double worst_relative_error(const MatrixView& a, const MatrixView& b, const MatrixView& c) {
  std::vector<double> ref, mag;
  gemm(a, b, ref, mag);
  return worst_against(ref, mag, c, 1.0);
}

}  // namespace portmat::reference
