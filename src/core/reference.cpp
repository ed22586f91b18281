// See reference.hpp.
#include "core/reference.hpp"

#include <cmath>
#include <limits>

namespace portmat::reference {

namespace {
double at(const MatrixView& v, std::int64_t i, std::int64_t j) {
  const std::int64_t off = i * v.row_stride + j * v.col_stride;
  return v.dtype == DType::f32 ? static_cast<const float*>(v.data)[off]
                               : static_cast<const double*>(v.data)[off];
}
}  // namespace

void gemm(const MatrixView& a, const MatrixView& b, std::vector<double>& ref,
          std::vector<double>& mag) {
  const std::int64_t M = a.rows, N = b.cols, K = a.cols;
  ref.assign(static_cast<std::size_t>(M * N), 0.0);
  mag.assign(static_cast<std::size_t>(M * N), 0.0);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t k = 0; k < K; ++k) {
      const double aik = at(a, i, k);
      for (std::int64_t j = 0; j < N; ++j) {
        const double p = aik * at(b, k, j);
        ref[i * N + j] += p;
        mag[i * N + j] += std::fabs(p);
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

}  // namespace portmat::reference
