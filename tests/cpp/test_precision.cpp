// The precision modes (issue 18) without a GPU: the reference's roundings and split against values
// checked by hand (ties, subnormals, infinities, NaN, overflow), the mode bounds against what they
// must tell apart, and the API: names, the process-wide setting and $PORTMAT_PRECISION, and a clear
// error (naming mode and device) on every device that runs no mode other than float32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/reference.hpp"

using portmat::DType;
using portmat::MatrixView;
using portmat::Precision;
namespace ref = portmat::reference;

namespace {

float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
constexpr Precision kModes[] = {Precision::float32, Precision::float32_tc, Precision::tf32, Precision::bfloat16};

}  // namespace

TEST(PrecisionReference, Tf32RoundsToNearestEven) {
  // 1 + 2^-10 is the TF32 number after 1; halfway between them is 1 + 2^-11.
  EXPECT_EQ(ref::round_tf32(1.0f), 1.0f);
  EXPECT_EQ(ref::round_tf32(1.0f + std::ldexp(1.0f, -10)), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(ref::round_tf32(1.0f + std::ldexp(1.0f, -11)), 1.0f);  // tie: to even (1)
  EXPECT_EQ(ref::round_tf32(1.0f + 3 * std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -9));  // tie: to even
  EXPECT_EQ(ref::round_tf32(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -23)), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(ref::round_tf32(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -23)), 1.0f);
  EXPECT_EQ(ref::round_tf32(-(1.0f + std::ldexp(1.0f, -11))), -1.0f);  // symmetric
  // Carry into the exponent: the largest TF32 below 2, plus a bit more than half its ulp, is 2.
  EXPECT_EQ(ref::round_tf32(from_bits(0x3ffff000u)), 2.0f);
  // The low 13 bits are always clear; the error is at most half a TF32 ulp: 2^-11 |x| for normal
  // x, and 2^12 subnormal units (2^-137) for subnormal x, whose ulp does not shrink with x.
  std::mt19937 rng(1);
  for (int i = 0; i < 10000; ++i) {
    const float x = from_bits(rng() & 0xff7fffffu);  // finite
    const float r = ref::round_tf32(x);
    EXPECT_EQ(bits(r) & 0x1fffu, 0u);
    EXPECT_LE(std::fabs(static_cast<double>(r) - x),
              std::max(std::ldexp(std::fabs(static_cast<double>(x)), -11), std::ldexp(1.0, -137)));
  }
}

TEST(PrecisionReference, Tf32SubnormalsInfinitiesNaN) {
  const float tiny = from_bits(0x00001000u);  // a subnormal with only bit 12 set: a tie, to even (0)
  EXPECT_EQ(bits(ref::round_tf32(tiny)), 0u);
  EXPECT_EQ(bits(ref::round_tf32(from_bits(0x00003000u))), 0x00004000u);  // tie, to even (up)
  EXPECT_EQ(bits(ref::round_tf32(from_bits(0x00002001u))), 0x00002000u);  // below the tie: down
  EXPECT_EQ(bits(ref::round_tf32(from_bits(0x007ff000u))), 0x00800000u);  // up into the normals
  EXPECT_EQ(ref::round_tf32(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ref::round_tf32(-std::numeric_limits<float>::infinity()), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(ref::round_tf32(from_bits(0x7f800001u))));  // would be infinity if truncated
  EXPECT_EQ(ref::round_tf32(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ref::round_tf32(-0.0f), -0.0f);
  EXPECT_TRUE(std::signbit(ref::round_tf32(-0.0f)));
}

TEST(PrecisionReference, Bf16RoundsToNearestEven) {
  EXPECT_EQ(ref::round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);                          // tie: to even
  EXPECT_EQ(ref::round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));  // tie: to even
  EXPECT_EQ(ref::round_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(bits(ref::round_bf16(from_bits(0x00008000u))), 0u);           // subnormal tie: to even
  EXPECT_EQ(bits(ref::round_bf16(from_bits(0x00018000u))), 0x00020000u);  // subnormal tie: to even
  EXPECT_TRUE(std::isnan(ref::round_bf16(from_bits(0x7f800001u))));
  EXPECT_EQ(ref::round_bf16(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ref::round_bf16(3.0f), 3.0f);
}

TEST(PrecisionReference, SplitIsExactForTf32PartsAndCloseOtherwise) {
  // x = hi + lo exactly when x has at most 22 significant bits in two TF32 pieces.
  const float x = 1.0f + std::ldexp(1.0f, -10) + std::ldexp(1.0f, -15) + std::ldexp(1.0f, -21);
  float hi, lo;
  ref::split_tf32(x, hi, lo);
  EXPECT_EQ(hi, 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(lo, std::ldexp(1.0f, -15) + std::ldexp(1.0f, -21));
  EXPECT_EQ(hi + lo, x);
  EXPECT_EQ(ref::round_tf32(hi), hi);
  EXPECT_EQ(ref::round_tf32(lo), lo);
  // A negative lo: hi rounded up.
  const float y = 1.0f + std::ldexp(1.0f, -10) - std::ldexp(1.0f, -20);
  ref::split_tf32(y, hi, lo);
  EXPECT_EQ(hi, 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(lo, -std::ldexp(1.0f, -20));
  // Random float32: |x - hi - lo| <= 2^-22 |x|.
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1e3f, 1e3f);
  for (int i = 0; i < 10000; ++i) {
    const float v = u(rng);
    ref::split_tf32(v, hi, lo);
    EXPECT_LE(std::fabs(static_cast<double>(v) - hi - lo), std::ldexp(std::fabs(static_cast<double>(v)), -22));
  }
  // Infinities keep their sign and give lo = 0 (no inf - inf).
  ref::split_tf32(-std::numeric_limits<float>::infinity(), hi, lo);
  EXPECT_EQ(hi, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(lo, 0.0f);
}

TEST(PrecisionReference, ModeProducts) {
  const float a = 1.0f + std::ldexp(1.0f, -12) + std::ldexp(1.0f, -20), b = 3.0f;
  EXPECT_EQ(ref::mode_product(Precision::float32, a, b), static_cast<double>(a) * 3);
  EXPECT_EQ(ref::mode_product(Precision::tf32, a, b), 3.0);      // a rounds to 1
  EXPECT_EQ(ref::mode_product(Precision::bfloat16, a, b), 3.0);  // so it does in bfloat16
  // a = hi + lo exactly (1 and 2^-12 + 2^-20), b a TF32 number: the three products are exact.
  EXPECT_EQ(ref::mode_product(Precision::float32_tc, a, b), static_cast<double>(a) * 3);
  EXPECT_EQ(ref::mode_product(Precision::bfloat16, 1.0f + std::ldexp(1.0f, -7), 1.0f), 1.0 + std::ldexp(1.0, -7));
}

// gemm_mode and gemm (which read each operand once into dense doubles, for speed) are the sums
// over k of mode_product and of plain double products: on views of both layouts,
// with values whose modes differ (so that a mode's parts mixed up would show).
TEST(PrecisionReference, GemmModeIsTheSumOfModeProducts) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  const std::int64_t M = 7, K = 13, N = 5;
  std::vector<float> ab(M * K), bb(K * N);
  for (auto& x : ab) x = u(rng);
  for (auto& x : bb) x = u(rng);
  // a row-major; b column-major (element (k, j) at bb[j * K + k]).
  const portmat::MatrixView a{ab.data(), M, K, K, 1, portmat::DType::f32};
  const portmat::MatrixView b{bb.data(), K, N, 1, K, portmat::DType::f32};
  for (Precision p : {Precision::float32, Precision::tf32, Precision::bfloat16, Precision::float32_tc}) {
    std::vector<double> r, g, r64, g64;
    ref::gemm_mode(p, a, b, r, g);
    ref::gemm(a, b, r64, g64);
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) {
        double want = 0, want_mag = 0, want64 = 0;
        for (std::int64_t k = 0; k < K; ++k) {
          const float x = ab[i * K + k], y = bb[j * K + k];
          want += ref::mode_product(p, x, y);
          want_mag += std::fabs(static_cast<double>(x) * y);
          want64 += static_cast<double>(x) * y;
        }
        // Equal up to double rounding (a compiler may contract a * b + c into an FMA in one loop
        // and not the other); a mode's parts mixed up would differ by 2^-24 |a| |b| and more.
        const double tol = 1e-13 * want_mag;
        EXPECT_NEAR(r[i * N + j], want, tol) << portmat::precision_name(p) << " at " << i << ", " << j;
        EXPECT_NEAR(g[i * N + j], want_mag, tol);
        EXPECT_NEAR(r64[i * N + j], want64, tol);
        EXPECT_NEAR(g64[i * N + j], want_mag, tol);
      }
  }
}

// The bounds tell the modes apart where the tests rely on it: at K <= 64, random operands, a
// plain TF32 result (the reference of tf32, exactly) fails float32_tc's bound, and a float32_tc
// result meets it; every mode's exact reference meets its own bound.
TEST(PrecisionReference, BoundsSeparateTheModes) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (std::int64_t K : {1, 7, 33, 64}) {
    const std::int64_t M = 40, N = 24;
    std::vector<float> a(M * K), b(K * N);
    for (auto& x : a) x = u(rng);
    for (auto& x : b) x = u(rng);
    MatrixView va{a.data(), M, K, K, 1, DType::f32}, vb{b.data(), K, N, N, 1, DType::f32};
    std::vector<double> exact, mag;
    ref::gemm(va, vb, exact, mag);
    auto worst_of = [&](Precision p) {
      std::vector<double> r, m;
      ref::gemm_mode(p, va, vb, r, m);
      double w = 0;
      for (std::size_t i = 0; i < r.size(); ++i) w = std::max(w, std::fabs(r[i] - exact[i]) / mag[i]);
      return w;
    };
    for (Precision p : kModes) EXPECT_LE(worst_of(p), ref::error_bound(p, K)) << portmat::precision_name(p) << " K=" << K;
    // Margins measured with NumPy over 50 draws of this size (smallest ratio): tf32's worst error
    // over float32_tc's bound 585 (K = 1), 114, 14, 5.3 (K = 64); bfloat16's over tf32's bound
    // 5.4 (K = 1), 3.0 (K = 7), 1.4, 1.0: compared at K <= 7 only.
    EXPECT_GT(worst_of(Precision::tf32), 2 * ref::error_bound(Precision::float32_tc, K)) << "K=" << K;
    if (K <= 7) EXPECT_GT(worst_of(Precision::bfloat16), 2 * ref::error_bound(Precision::tf32, K)) << "K=" << K;
    // worst_mode_ratio: a float32 result rounded from tf32's exact sums passes tf32's check and
    // fails float32_tc's; one rounded from float32_tc's passes float32_tc's and fails tf32's.
    std::vector<double> rt, rc, m;
    ref::gemm_mode(Precision::tf32, va, vb, rt, m);
    ref::gemm_mode(Precision::float32_tc, va, vb, rc, m);
    std::vector<float> ct(rt.begin(), rt.end()), cc(rc.begin(), rc.end());
    MatrixView vt{ct.data(), M, N, N, 1, DType::f32}, vc{cc.data(), M, N, N, 1, DType::f32};
    EXPECT_LE(ref::worst_mode_ratio(Precision::tf32, va, vb, vt), 1.0);
    EXPECT_GT(ref::worst_mode_ratio(Precision::float32_tc, va, vb, vt), 2.0);
    EXPECT_LE(ref::worst_mode_ratio(Precision::float32_tc, va, vb, vc), 1.0);
    EXPECT_GT(ref::worst_mode_ratio(Precision::tf32, va, vb, vc), 2.0);
  }
}

TEST(PrecisionApi, NamesSettingAndEnvironment) {
  for (Precision p : kModes) EXPECT_EQ(portmat::precision_from_name(portmat::precision_name(p)), p);
  EXPECT_THROW(portmat::precision_from_name("highest"), std::invalid_argument);
  EXPECT_THROW(portmat::precision_from_name("TF32"), std::invalid_argument);
  portmat::set_precision(std::nullopt);
  ::unsetenv("PORTMAT_PRECISION");
  EXPECT_EQ(portmat::get_precision(), Precision::float32);
  ::setenv("PORTMAT_PRECISION", "tf32", 1);
  EXPECT_EQ(portmat::get_precision(), Precision::tf32);
  portmat::set_precision(Precision::bfloat16);  // the call wins over the variable
  EXPECT_EQ(portmat::get_precision(), Precision::bfloat16);
  portmat::set_precision(std::nullopt);
  ::setenv("PORTMAT_PRECISION", "fast", 1);
  try {
    portmat::get_precision();
    ADD_FAILURE() << "a bad PORTMAT_PRECISION was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("PORTMAT_PRECISION"), std::string::npos) << e.what();
  }
  ::unsetenv("PORTMAT_PRECISION");
}

// The CPU backend runs only float32: every other mode raises, naming the mode and the device, for
// float32 and the dtypes computed in float32; float64 and the integers ignore the mode.
TEST(PrecisionApi, CpuRaisesForTensorCoreModesAndOtherDtypesIgnoreThem) {
  std::vector<float> a(6, 1.f), b(6, 1.f), c(4, 0.f);
  MatrixView va{a.data(), 2, 3, 3, 1, DType::f32}, vb{b.data(), 3, 2, 2, 1, DType::f32}, vc{c.data(), 2, 2, 2, 1, DType::f32};
  for (Precision p : {Precision::float32_tc, Precision::tf32, Precision::bfloat16}) {
    try {
      portmat::matmul(va, vb, vc, "cpu", p);
      ADD_FAILURE() << "cpu computed " << portmat::precision_name(p);
    } catch (const portmat::DeviceError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("'") + portmat::precision_name(p) + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("cpu:0"), std::string::npos) << what;
    }
    EXPECT_EQ(c[0], 0.f);  // nothing written
  }
  portmat::matmul(va, vb, vc, "cpu", Precision::float32);
  EXPECT_EQ(c[0], 3.f);
  std::vector<double> a64(6, 1.0), b64(6, 2.0), c64(4, 0.0);
  portmat::matmul(MatrixView{a64.data(), 2, 3, 3, 1, DType::f64}, MatrixView{b64.data(), 3, 2, 2, 1, DType::f64},
                  MatrixView{c64.data(), 2, 2, 2, 1, DType::f64}, "cpu", Precision::tf32);
  EXPECT_EQ(c64[3], 6.0);
  std::vector<std::int32_t> ai(6, 2), bi(6, 3), ci(4, 0);
  portmat::matmul(MatrixView{ai.data(), 2, 3, 3, 1, DType::i32}, MatrixView{bi.data(), 3, 2, 2, 1, DType::i32},
                  MatrixView{ci.data(), 2, 2, 2, 1, DType::i32}, "cpu", Precision::bfloat16);
  EXPECT_EQ(ci[0], 18);
  // The process-wide setting applies where the call names none.
  portmat::set_precision(Precision::tf32);
  EXPECT_THROW(portmat::matmul(va, vb, vc, "cpu"), portmat::DeviceError);
  portmat::set_precision(std::nullopt);
}
