// portmat from C++: a float32 product of strided matrices, then a broadcast stack of int32
// products (wrapping as NumPy's do), then a chain of products on arrays that stay on the device
// (DeviceArray), each checked against a plain loop. Exits non-zero on any mismatch, so it doubles
// as a test of the installed package.
#include <portmat/portmat.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string device = argc > 1 ? argv[1] : "";  // "" = the default device
  std::printf("devices:");
  for (const auto& d : portmat::devices()) std::printf(" %s (%s)", d.id().c_str(), d.name.c_str());
  std::printf("\n");

  // c = a^T @ b: a is stored K x M and read transposed (strides in elements).
  const std::int64_t M = 150, K = 70, N = 90;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(K * M), b(K * N), c(M * N);
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  portmat::matmul({a.data(), M, K, 1, M, portmat::DType::f32}, {b.data(), K, N, N, 1, portmat::DType::f32},
                  {c.data(), M, N, N, 1, portmat::DType::f32}, device);
  double worst = 0;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (std::int64_t k = 0; k < K; ++k) ref += double(a[k * M + i]) * b[k * N + j], mag += std::fabs(double(a[k * M + i]) * b[k * N + j]);
      worst = std::max(worst, std::fabs(c[i * N + j] - ref) / (K * 1.2e-7 * mag));
    }
  std::printf("float32 (%lld x %lld) @ (%lld x %lld): worst error %.2f of the bound\n", (long long)M,
              (long long)K, (long long)K, (long long)N, worst);

  // A stack of 4 int32 matrices times one matrix broadcast over it (stride 0): (4, 5, 6) @ (6, 3).
  std::vector<std::int32_t> x(4 * 5 * 6), w(6 * 3), y(4 * 5 * 3);
  for (auto& v : x) v = static_cast<std::int32_t>(rng());
  for (auto& v : w) v = static_cast<std::int32_t>(rng());
  portmat::matmul(portmat::ArrayView{x.data(), portmat::DType::i32, {4, 5, 6}, {30, 6, 1}},
                  portmat::ArrayView{w.data(), portmat::DType::i32, {6, 3}, {3, 1}},
                  portmat::ArrayView{y.data(), portmat::DType::i32, {4, 5, 3}, {15, 3, 1}}, device);
  int wrong = 0;
  for (int s = 0; s < 4; ++s)
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 3; ++j) {
        std::uint32_t ref = 0;  // NumPy's int32 matmul wraps modulo 2^32
        for (int k = 0; k < 6; ++k) ref += std::uint32_t(x[s * 30 + i * 6 + k]) * std::uint32_t(w[k * 3 + j]);
        wrong += static_cast<std::int32_t>(ref) != y[s * 15 + i * 3 + j];
      }
  std::printf("int32 stack (4, 5, 6) @ (6, 3): %d wrong entries\n", wrong);

  // y = (x @ w1) @ w2 with the intermediate kept on the device: one copy in per operand, one out.
  const std::int64_t R = 64, D1 = 48, D2 = 32, D3 = 16;
  std::vector<float> xs(R * D1), w1(D1 * D2), w2(D2 * D3), ys(R * D3);
  for (auto* v : {&xs, &w1, &w2})
    for (auto& e : *v) e = u(rng);
  auto host = [](std::vector<float>& v, std::vector<std::int64_t> shape) {
    return portmat::ArrayView{v.data(), portmat::DType::f32, shape, {shape[1], 1}};
  };
  const auto dx = portmat::DeviceArray::from_host(host(xs, {R, D1}), device);
  const auto dw1 = portmat::DeviceArray::from_host(host(w1, {D1, D2}), device);
  const auto dw2 = portmat::DeviceArray::from_host(host(w2, {D2, D3}), device);
  const portmat::DeviceArray dy = portmat::matmul(portmat::matmul(dx, dw1), dw2);
  dy.to_host(host(ys, {R, D3}));
  // The same chain in double on the host, with |x| @ |w1| @ |w2| for the error bound.
  std::vector<double> t(R * D2), tmag(R * D2);
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t k = 0; k < D1; ++k)
      for (std::int64_t j = 0; j < D2; ++j) {
        const double p = double(xs[i * D1 + k]) * w1[k * D2 + j];
        t[i * D2 + j] += p, tmag[i * D2 + j] += std::fabs(p);
      }
  double chain_worst = 0, checksum = 0;
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < D3; ++j) {
      double ref = 0, mag = 0;
      for (std::int64_t k = 0; k < D2; ++k)
        ref += t[i * D2 + k] * w2[k * D3 + j], mag += tmag[i * D2 + k] * std::fabs(w2[k * D3 + j]);
      const double e = std::fabs(ys[i * D3 + j] - ref) / ((D1 + D2) * 1.2e-7 * mag);
      if (!(e <= chain_worst)) chain_worst = e;  // a NaN stays and fails the check
      checksum += ys[i * D3 + j];
    }
  std::printf("device chain (%lld x %lld) @ (%lld x %lld) @ (%lld x %lld) on %s: checksum %.6f, worst error %.2f "
              "of the bound\n",
              (long long)R, (long long)D1, (long long)D1, (long long)D2, (long long)D2, (long long)D3,
              dy.device().id().c_str(), checksum, chain_worst);
  return worst <= 1.0 && wrong == 0 && chain_worst <= 1.0 ? 0 : 1;
}
