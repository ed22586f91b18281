// portmat from C++: a float32 product of strided matrices, then a broadcast stack of int32
// products (wrapping as NumPy's do), each checked against a plain loop. Exits non-zero on any
// mismatch, so it doubles as a test of the installed package.
#include <portmat/portmat.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
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
  return worst <= 1.0 && wrong == 0 ? 0 : 1;
}
