// The reference gemm: the test oracle for every backend. Plain loops, float64 accumulation, any
// strides; also the componentwise error bound the tests hold kernels to.
#pragma once

#include <vector>

#include "portmat/portmat.hpp"

namespace portmat::reference {

// ref[i*N + j] = sum_k a(i,k) * b(k,j) and mag[i*N + j] = sum_k |a(i,k) * b(k,j)|, in float64.
void gemm(const MatrixView& a, const MatrixView& b, std::vector<double>& ref,
          std::vector<double>& mag);

// Largest |c - ref| / (mag * K * eps(dtype)) over all entries: <= 1 for an accurate kernel
// (the classical bound |fl(a.b) - a.b| <= K u sum|a_k b_k|). NaN anywhere gives +inf.
double worst_error_ratio(const MatrixView& a, const MatrixView& b, const MatrixView& c);

}  // namespace portmat::reference
